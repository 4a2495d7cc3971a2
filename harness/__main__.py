"""`python -m harness`: the same as the `layerbench` command."""

import sys

from harness.cli.main import main

code = main()
# CPython (3.11, measured) run with `-m`: a Ctrl-C that landed while code compiled from a string was running
# (dataclass and namedtuple creation exec such strings while modules import) leaves the interpreter marked
# "interrupted and unhandled" even though main() handled it, and at exit Python kills itself with SIGINT
# instead of exiting 130. Running any string of code clears that mark.
exec("pass")  # noqa: S102
sys.exit(code)
