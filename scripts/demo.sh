#!/usr/bin/env bash
# One command on a fresh machine: set up .venv-<version> the way scripts/test.sh does, then run the
# demo on the embedded model (python -m pydynamo.demo).
#   scripts/demo.sh [demo arguments...]        e.g. scripts/demo.sh --codegen --show-graph
# The interpreter is $PYTHON if set, else Python 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_venv.sh
export PYDYNAMO_CACHE_DIR="${PYDYNAMO_CACHE_DIR:-$PWD/.cache-demo-$VER}"
exec "$VENV/bin/python" -m pydynamo.demo --codegen "$@"
