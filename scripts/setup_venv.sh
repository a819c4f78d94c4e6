# Sourced by test.sh and demo.sh: make (or reuse) .venv-<version> for $PYTHON (default 3.11),
# install torch and this project with its test extras, and set VENV and VER.
# Installs skip pip's wheel cache (a cached torch wheel doubles the disk it takes: CI once ran
# out of space) and retry interrupted downloads (the 3.12 torch wheel is ~530 MB from PyPI).
PY=${PYTHON:-$(scripts/find_python.sh 3.11)}
VER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV=.venv-$VER
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip's warnings about this machine's absent local indexes are noise; its exit status is kept.
pip_install() {
  "$VENV/bin/python" -m pip install -q --no-cache-dir "$@" 2>&1 \
    | { grep -v "is ignored: it is neither" || true; }
}
# Up to 3 tries, each resuming an interrupted download many times (pip >= 25.1 knows
# --resume-retries; older pips, before the upgrade below, get plain retries).
pip_install_retrying() {
  local resume="" try
  "$VENV/bin/python" -m pip install --help 2>/dev/null | grep -q -- --resume-retries && resume="--resume-retries 30"
  for try in 1 2 3; do
    pip_install --retries 10 --timeout 60 $resume "$@" && return 0
    echo "pip install $* failed (try $try of 3)" >&2
    sleep 10
  done
  return 1
}
pip_install_retrying --upgrade pip
pip_install_retrying "torch==2.13.0"
pip_install_retrying -e ".[test]"
