# Sourced by test.sh and demo.sh: make (or reuse) .venv-<version> for $PYTHON (default 3.11),
# install torch and this project with its test extras, and set VENV and VER.
PY=${PYTHON:-$(scripts/find_python.sh 3.11)}
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV=.venv-$VER
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip's warnings about this machine's absent local indexes are noise; its exit status is kept.
pip_install() { "$VENV/bin/python" -m pip install -q "$@" 2>&1 | { grep -v "is ignored: it is neither" || true; }; }
pip_install --upgrade pip
pip_install "torch==2.13.0"
pip_install -e ".[test]"
