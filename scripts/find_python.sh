#!/usr/bin/env bash
# Print a working interpreter for version $1 (e.g. 3.12): PATH first, then pyenv's install dir.
# pyenv shims exist for every installed version but fail unless that version is "global", so each
# candidate is actually run.
v=$1
for cand in "python$v" "$HOME/.pyenv/versions/$v"*/bin/python "/usr/bin/python$v" "/usr/local/bin/python$v"; do
  if "$cand" -c 'import sys' >/dev/null 2>&1; then
    command -v "$cand" 2>/dev/null || echo "$cand"; exit 0
  fi
done
echo "no Python $v found" >&2; exit 1
