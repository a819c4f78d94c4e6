#!/usr/bin/env bash
# Set up a virtual environment for one Python version and run the whole test suite in it.
#   [PYTHON=/path/to/python] scripts/test.sh [pytest args...]      (default interpreter: 3.11)
# The venv lives in .venv-<version>/ and is reused when it exists; installs are idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_venv.sh
export TRITON_INTERPRET=1 PYDYNAMO_CACHE_DIR="${PYDYNAMO_CACHE_DIR:-$PWD/.cache-test-$VER}"
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
