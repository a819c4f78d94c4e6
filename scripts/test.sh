#!/usr/bin/env bash
# Set up a virtual environment for one Python version and run the whole test suite in it.
#   [PYTHON=/path/to/python] scripts/test.sh [pytest args...]      (default interpreter: 3.11)
# The venv lives in .venv-<version>/ and is reused when it exists; installs are idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$(scripts/find_python.sh 3.11)}
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV=.venv-$VER
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip's warnings about this machine's absent local indexes are noise; its exit status is kept.
pip_install() { "$VENV/bin/python" -m pip install -q "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }; }
pip_install --upgrade pip
pip_install "torch==2.13.0"
pip_install -e ".[test]"
export TRITON_INTERPRET=1 PYDYNAMO_CACHE_DIR="${PYDYNAMO_CACHE_DIR:-$PWD/.cache-test-$VER}"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
