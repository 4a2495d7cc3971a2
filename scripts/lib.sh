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
