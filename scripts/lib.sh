# Shared by the setup scripts (sourced). DRY_RUN=1: print each step that would change something, and why,
# and change nothing. PY: the Python that makes the environments (the Makefile passes its PY=).
PY=${PY:-}
if [ -z "$PY" ]; then
  # a version manager's shim can be on PATH for a Python it does not run: ask each one to start
  for p in python3.12 python3.11 python3.10; do "$p" -c '' >/dev/null 2>&1 && { PY=$p; break; }; done
fi
[ -n "$PY" ] || { echo "setup: no python3.12, python3.11 or python3.10 on PATH: install one, or set PY=" >&2; exit 1; }
"$PY" -c '' >/dev/null 2>&1 || { echo "setup: PY=$PY does not run here" >&2; exit 1; }

dry() { [ -n "${DRY_RUN:-}" ] && [ "${DRY_RUN}" != 0 ]; }

# run CMD...: run it, or under DRY_RUN print it
run() {
  if dry; then printf '  would run: %s\n' "$*"; else "$@"; fi
}

# say TEXT: what a step does and why (printed in both modes)
say() { printf '%s\n' "$*"; }

pyver() { "$1" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'; }

# The lock files under locks/ (make lock writes them; each one's header says how it is used).
LOCKS_DIR=${LOCKS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/locks}

# lock_pin LOCK NAME: the version LOCK pins NAME to
lock_pin() { "$PY" "$(dirname "${BASH_SOURCE[0]}")/lockfile.py" pin "$1" "$2"; }

# pip_locked PYTHON LOCK [--from FILE] [PIP-INSTALL-ARGS...]: pip install --require-hashes from LOCK (or from FILE,
# a subset of it). pip downloads and checks every file before it installs any, so a file whose hash the lock does
# not list stops the install before it starts (a pinned pip, installed first, aside), with one message naming what
# to do.
pip_locked() {
  local py=$1 lock=$2 req=$2 err rc=0 pkgs
  shift 2
  if [ "${1:-}" = --from ]; then req=$2; shift 2; fi
  if dry; then printf '  would run: %s -m pip install --require-hashes -r %s %s\n' "$py" "$lock" "$*"; return 0; fi
  err=$(mktemp)
  # a lock that pins pip: that pip first, alone, and the rest with it (the venv's own pip is older and slower)
  if [ "$req" = "$lock" ] && "$PY" "$(dirname "${BASH_SOURCE[0]}")/lockfile.py" pick "$lock" "$err.pip" pip; then
    "$py" -m pip install --require-hashes --no-deps -r "$err.pip" "$@" 2>"$err" || rc=$?
  fi
  rm -f "$err.pip"
  [ "$rc" != 0 ] || "$py" -m pip install --require-hashes -r "$req" "$@" 2>"$err" || rc=$?
  if [ "$rc" != 0 ] && grep -q -e "DO NOT MATCH THE HASHES" -e "Hashes are required in --require-hashes mode" \
      -e "require-hashes mode, all requirements must have their versions pinned" "$err"; then
    # pip names each file it refused, indented, as `name==version from URL` (pip's HashMismatch / HashMissing)
    pkgs=$(grep -oE '^ +[A-Za-z0-9._-]+(\[[^]]*\])?==[^ ]+' "$err" | awk '{print $1}' | sort -u | paste -sd' ' -) || true
    echo "setup: lock ${lock#"$PWD/"} does not match what the index served${pkgs:+ ($pkgs)}: run \`make lock\` or check your index (\`pip config list\` shows which one pip reads)" >&2
  else
    cat "$err" >&2
  fi
  rm -f "$err"
  return "$rc"
}
