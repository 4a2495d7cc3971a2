"""perf for native processes: perf script's samples split by process into collapsed stacks (text recorded on this
project's host with perf 6.1, `perf script -F pid,tid,ip,sym,dso` of a `perf record -e cpu-clock -g -a`), the
reason a host refuses it, and a real native process (coreutils' `yes`) profiled beside a Python one in one
window."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from harness.load import perf
from harness.load.profiler import Profiler, pyspy

# two processes' samples as perf 6.1 printed them here: a pid/tid line, then frames innermost first
RECORDED = """14012/14012 
\t          18a7e2 PyLong_FromLong (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)

14001/14001 
\t          2bb344 gc_collect_main (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)
\t               1 [unknown] ([unknown])

14012/14013 
\t          24a322 builtin_sum+0x12 (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)
\t          1aff51 _PyEval_EvalFrameDefault (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)

14012/14012 
\t          18a7e2 PyLong_FromLong (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)
"""


# a freshly booted host's small pids, as perf 6.1 printed them here: right-aligned, so the line starts with spaces
SMALL_PIDS = """ 8024/8024  
\t            5249 [unknown] (/usr/bin/yes)

    0/0     
\tffffffff82240ddb pv_native_safe_halt ([kernel.kallsyms])
\tffffffff822428f5 default_idle ([kernel.kallsyms])

 8024/8024  
\tffffffff8223b5a6 do_syscall_64 ([kernel.kallsyms])
\t           f8350 __GI___libc_write (/usr/lib/x86_64-linux-gnu/libc.so.6)
"""


def test_a_pid_under_10000_is_read_from_its_right_aligned_line():
    got = perf.collapse(SMALL_PIDS, {8024, 0})
    assert got[8024] == {("[unknown] (yes)",): 1,
                         ("__GI___libc_write (libc.so.6)", "do_syscall_64 ([kernel.kallsyms])"): 1}
    assert got[0] == {("default_idle ([kernel.kallsyms])", "pv_native_safe_halt ([kernel.kallsyms])"): 1}


def test_perf_scripts_samples_are_split_by_process_outermost_frame_first():
    got = perf.collapse(RECORDED, {14012})
    assert set(got) == {14012}  # 14001 was not asked for; a thread (14013) counts for its process
    lib = "libpython3.11.so.1.0"
    assert got[14012] == {(f"PyLong_FromLong ({lib})",): 2,
                          (f"_PyEval_EvalFrameDefault ({lib})", f"builtin_sum ({lib})"): 1}
    assert perf.collapse(RECORDED, {14001})[14001] == {("[unknown] ([unknown])", f"gc_collect_main ({lib})"): 1}


def test_a_host_that_keeps_perf_from_every_cpu_says_what_to_change(monkeypatch, tmp_path):
    paranoid = tmp_path / "perf_event_paranoid"
    paranoid.write_text("2\n")
    monkeypatch.setattr(perf, "PARANOID", paranoid)
    monkeypatch.setattr(perf, "perf_binary", lambda: "/usr/bin/perf")
    monkeypatch.setattr(perf, "_caps", lambda: 0)
    why = perf.refused()
    assert why and "perf_event_paranoid is 2" in why and "PERFMON" in why
    paranoid.write_text("-1\n")
    assert perf.refused() is None
    paranoid.write_text("2\n")
    monkeypatch.setattr(perf, "_caps", lambda: 1 << perf.CAP_PERFMON)
    assert perf.refused() is None
    monkeypatch.setattr(perf, "perf_binary", lambda: None)
    assert "not installed" in perf.refused()


def test_a_native_process_is_sampled_by_perf_and_a_python_one_by_py_spy(tmp_path):
    if (why := perf.refused()) is not None or pyspy() is None:
        pytest.fail(f"this host cannot run the profilers make test installs: {why or 'no py-spy'}")
    native = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
    python = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 30: "
                               "sum(range(1000))"])
    try:
        assert not perf.is_python(native.pid) and perf.is_python(python.pid)
        prof = Profiler(tmp_path, pyspy() or "py-spy", rate=50)
        prof.start({native.pid: "yes", python.pid: "busy"}, "w")
        time.sleep(1.5)  # the window: both processes run on a CPU through it

        got = {s.label: s for s in prof.stop()}
    finally:
        for p in (native, python):
            p.kill()
            p.wait()
    assert got["yes"].why_not is None and got["yes"].path is not None, got["yes"]
    frames = got["yes"].path.read_text()
    assert "(yes)" in frames or "libc" in frames, frames[:500]
    assert got["busy"].why_not is None and "<module>" in got["busy"].path.read_text()
    assert prof.own_cpu_s > 0 and not list(tmp_path.glob("*.perf.data"))
