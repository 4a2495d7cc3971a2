"""A private network namespace for a command whose deployment cannot bind to loopback alone (Ray Serve's HAProxy
ingress binds every replica's HTTP port and HAProxy's stats and metrics ports on all interfaces): the whole
command, both sides and the load client, runs again in a new network namespace that holds only a loopback
interface, so what binds to 0.0.0.0 there is reachable from nowhere else. Both sides and the load client share
that one loopback, as they would share the host's: the comparison stays fair.

util-linux's `unshare --net` makes the namespace (as root; otherwise with `--map-root-user`, which needs
unprivileged user namespaces: kernel.unprivileged_userns_clone, user.max_user_namespaces) and `ip link set lo up`
brings its loopback up (a new namespace's starts down; ip-netns(8)). The command execs in place, keeping its pid, so
Ctrl-C and the process group behave as before. Nothing in it can reach the network: the model was resolved
before, and the command runs again with HF_HUB_OFFLINE=1, reading it from the cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.errors import LayerbenchError

MARK = "LAYERBENCH_PRIVATE_NETWORK"  # set in the re-executed command, so it does not enter a namespace twice
# this process's network namespace's interfaces, one per line after two of headers (proc(5): /proc/net/dev is
# /proc/self/net/dev); /sys/class/net would show the namespace sysfs was mounted in, not this process's
NET = Path("/proc/self/net/dev")
# set by harness.cli.main.main when it runs as the program (`layerbench`, `python -m harness`), not called with
# arguments by a test or a script: only a program can be run again in place
AS_COMMAND = False


def loopback_only() -> bool:
    """This process's network namespace has no interface but loopback: a socket bound to 0.0.0.0 or :: here is
    reachable only from inside it."""
    try:
        names = {line.split(":", 1)[0].strip() for line in NET.read_text().splitlines()[2:] if ":" in line}
    except OSError:
        return False
    return names == {"lo"}


def _unshare() -> list[str]:
    tool, ip = shutil.which("unshare"), shutil.which("ip")
    if tool is None or ip is None:
        raise LayerbenchError("a private network namespace needs util-linux's `unshare` and iproute2's `ip` "
                              "(Debian: apt-get install util-linux iproute2)")
    cmd = [tool, "--net", *(["--map-root-user"] if os.geteuid() != 0 else [])]
    probe = subprocess.run([*cmd, "--", ip, "link", "set", "lo", "up"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        raise LayerbenchError("could not make a private network namespace (`" + " ".join(cmd) + "`): "
                              f"{probe.stderr.strip() or probe.returncode}; as a user this needs unprivileged user "
                              "namespaces (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0), "
                              "or run as root")
    return [*cmd, "--", "sh", "-c", f'"{ip}" link set lo up && exec "$@"', "sh"]


def enter(why: str) -> None:
    """Run this command again, in place, inside a private network namespace; returns only when it already runs in
    one (MARK set and only loopback here)."""
    if os.environ.get(MARK) == "1":  # run again once: a namespace that is not what it should be is an error
        if loopback_only():
            return
        raise LayerbenchError(f"{why}: the private network namespace this command ran again in has interfaces "
                              f"besides loopback ({NET})")
    if not AS_COMMAND:  # main() called by a test or a script: replacing the process would end its caller
        raise LayerbenchError(f"{why}: this runs only as a command (`layerbench ...`), which first enters a "
                              "private network namespace")
    cmd = [*_unshare(), sys.executable, "-m", "harness", *sys.argv[1:]]
    print(f"layerbench: {why}: running again in a private network namespace (loopback only, no network)",
          file=sys.stderr, flush=True)
    os.execvpe(cmd[0], cmd, {**os.environ, MARK: "1", "HF_HUB_OFFLINE": "1"})
