#!/usr/bin/env bash
# The SGLang Model Gateway (smg: a Rust router in a manylinux wheel, run by its Python CLI, `smg launch`) in an
# environment of its own, .venv-smg: it needs none of the engine's packages. Every package comes from locks/smg.txt
# (smg 1.13.0, the newest release on the package index when it was locked), each file checked against the lock's
# hashes; edit locks/smg.in and run `make lock` to change it.
# A layer's setup script (make setup-smg): SMG_VENV may override where.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=${SMG_VENV:-.venv-smg}; lock=$LOCKS_DIR/smg.txt
version=$(lock_pin "$lock" smg)
if [ -n "${SMG_VERSION:-}" ] && [ "$SMG_VERSION" != "$version" ]; then
  echo "setup-smg: SMG_VERSION=$SMG_VERSION, but locks/smg.txt pins $version: set it in locks/smg.in and run \`make lock\`" >&2
  exit 1
fi
say "smg: $venv from $PY ($(pyver "$PY")) with smg==$version (locks/smg.txt)"
run "$PY" -m venv "$venv"
pip_locked "$venv/bin/python" "$lock" -q
if ! dry; then
  # `smg --version` prints the gateway's version from its Rust extension (smg/cli.py, main: before any subcommand),
  # so it proves the extension loads on this host
  "$venv/bin/smg" --version >/dev/null || { echo "setup-smg: smg does not start from $venv" >&2; exit 1; }
  say "smg: $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("smg"))') in $venv"
fi
