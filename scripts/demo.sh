#!/usr/bin/env bash
# One command on a fresh machine: set up .venv-<version> the way scripts/test.sh does, then run the
# demo on the embedded model (python -m pydynamo.demo).
#   scripts/demo.sh [demo arguments...]        e.g. scripts/demo.sh --codegen --show-graph
# The interpreter is $PYTHON if set, else Python 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(scripts/find_python.sh 3.11)}
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV=.venv-$VER
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
"$VENV/bin/python" -m pip install -q "torch==2.13.0" 2>&1 | grep -v "is ignored: it is neither" || true
"$VENV/bin/python" -m pip install -q -e ".[test]" 2>&1 | grep -v "is ignored: it is neither" || true
export PYDYNAMO_CACHE_DIR="${PYDYNAMO_CACHE_DIR:-$PWD/.cache-demo-$VER}"
exec "$VENV/bin/python" -m pydynamo.demo "$@"
