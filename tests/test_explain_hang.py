"""A stuck run: the stacks of a live process, dumped by py-spy or faulthandler, with no error.

Each log is printed for real: a torch.distributed rank waiting in a barrier its peer never enters,
dumped by py-spy (the tool `ray stack` runs); faulthandler's dump_traceback_later on a process that
waits forever; and, to keep the hang apart from what it is not, faulthandler's report of a real crash
and a dump followed by a real exception.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from matching import terminal
from matching.catalog import CatalogError
from matching.explain import Matcher, explain_text

from .conftest import run_python

PY_SPY = Path(sys.executable).with_name("py-spy")   # ray[default] installs it into the environment

RANK = """import os, sys, time
import torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
print("rank", rank, "joined", flush=True)
if rank == 0:
    dist.barrier()      # its peer never enters it
time.sleep(600)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dump_when(pid: int, words: str, seconds: float = 90) -> str:
    """py-spy's dump of a live process, once its stacks show `words` (the process got there)."""
    end, out = time.monotonic() + seconds, ""
    while time.monotonic() < end:
        r = subprocess.run([str(PY_SPY), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
        if "Permission denied" in r.stderr or "EPERM" in r.stderr:
            pytest.skip(f"py-spy may not attach to a process here: {r.stderr.strip()[:120]}")
        out = r.stdout
        if words in out:
            return out
        time.sleep(0.5)
    raise AssertionError(f"the process never showed {words!r} in its stacks:\n{out}")


@pytest.fixture(scope="module")
def barrier_dump(tmp_path_factory) -> str:
    """Two real gloo ranks; rank 0 waits in dist.barrier() for rank 1, which never calls it."""
    assert PY_SPY.exists(), "py-spy comes with ray[default]: the test environment holds it"
    tmp = tmp_path_factory.mktemp("hang")
    script = tmp / "rank.py"
    script.write_text(RANK)
    port = str(_free_port())
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), port], cwd=tmp, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in (0, 1)]
    try:
        yield _dump_when(procs[0].pid, "barrier")
    finally:
        for p in procs:   # only the two ranks this test started
            p.kill()
            p.wait()


def first(text: str):
    found = explain_text(text)
    assert found, "no finding"
    return found[0]


def test_a_rank_stuck_in_a_barrier_dumped_by_py_spy_is_a_stuck_run(barrier_dump):
    assert barrier_dump.startswith("Process ") and "distributed_c10d.py" in barrier_dump
    top = first(barrier_dump)
    assert (top.rule, top.category) == ("generic-stuck-process", "other")
    shown = "\n".join(ln.text for ln in top.lines)
    assert "Thread " in shown and "MainThread" in shown


def test_the_dump_under_a_pasted_command_and_prompt_is_still_read(barrier_dump):
    pasted = "$ py-spy dump --pid 4242\n" + barrier_dump + "$ \n"
    assert first(pasted).rule == "generic-stuck-process"


def test_faulthandler_dump_of_a_waiting_process_is_a_stuck_run(tmp_path):
    out = run_python("import faulthandler, threading\n"
                     "def wait_for_batch():\n"
                     "    threading.Event().wait()\n"
                     "faulthandler.dump_traceback_later(1, exit=True)\n"
                     "wait_for_batch()\n", tmp_path).stdout
    assert out.startswith("Timeout (0:00:01)!")
    top = first(out)
    assert (top.rule, top.category) == ("generic-stuck-process", "other")
    assert any("most recent call first" in ln.text for ln in top.lines)


def test_faulthandler_frames_pasted_without_their_header_are_a_stuck_run(tmp_path):
    out = run_python("import faulthandler, threading\n"
                     "faulthandler.dump_traceback_later(1, exit=True)\n"
                     "threading.Event().wait()\n", tmp_path).stdout
    frames = "".join(ln for ln in out.splitlines(keepends=True) if ln.startswith("  File "))
    assert frames and ", in " not in frames   # faulthandler's frames: no comma before "in"
    assert first(frames).rule == "generic-stuck-process"


def test_a_dump_the_run_went_on_after_is_no_stuck_run(barrier_dump):
    steps = "".join(f"step:{i} - actor/pg_loss:0.01 - critic/score/mean:0.5\n" for i in (7, 8))
    assert explain_text(barrier_dump + steps) == []


def test_a_watchdog_dump_the_run_went_on_after_is_nothing(tmp_path):
    out = run_python("import faulthandler, time\n"
                     "faulthandler.dump_traceback_later(0.2)\n"
                     "time.sleep(0.6)\n"
                     "for epoch in range(3):\n"
                     "    print(f'epoch {epoch} loss {0.5 / (epoch + 1):.3f}', flush=True)\n"
                     "print('done')\n", tmp_path).stdout
    assert out.startswith("Timeout (0:00:00.") or out.startswith("Timeout (0:00:00)!"), out[:80]
    assert "most recent call first" in out and out.rstrip().endswith("done")
    assert explain_text(out) == []


def test_a_thread_header_with_no_frame_is_nothing():
    assert explain_text('loading shards\nThread 4242 (idle): "pin_memory"\n') == []


def test_faulthandler_shows_the_main_thread_it_lists_last(tmp_path):
    out = run_python("import faulthandler, threading\n"
                     "def pin_memory():\n"
                     "    threading.Event().wait()\n"
                     "threading.Thread(target=pin_memory, daemon=True).start()\n"
                     "faulthandler.dump_traceback_later(1, exit=True)\n"
                     "threading.Event().wait()\n", tmp_path).stdout
    headers = [ln for ln in out.splitlines() if ln.startswith("Thread 0x")]
    assert len(headers) == 2 and "pin_memory" in out.split(headers[1])[0]   # the helper's stack comes first
    top = first(out)
    assert top.rule == "generic-stuck-process" and top.lines[0].text == headers[-1]


def test_a_fatal_error_faulthandler_reports_is_no_hang(tmp_path):
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c",
                        "import ctypes; ctypes.pythonapi.Py_FatalError(b'custom stop')"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert "Fatal Python error: " in r.stderr and "(most recent call first)" in r.stderr
    assert all(f.rule != "generic-stuck-process" for f in explain_text(r.stderr))


def test_faulthandler_report_of_a_crash_is_the_crash_not_a_hang(tmp_path):
    r = subprocess.run([sys.executable, "-X", "faulthandler", "-c", "import ctypes; ctypes.string_at(0)"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode != 0 and "Fatal Python error: Segmentation fault" in r.stderr
    assert "(most recent call first)" in r.stderr
    top = first(r.stderr)
    assert (top.rule, top.category) == ("generic-native-crash", "other")


def test_an_exception_after_a_dump_is_the_failure(tmp_path):
    out = run_python("import faulthandler, sys\n"
                     "faulthandler.dump_traceback(file=sys.stdout)\n"
                     "import no_such_module_here\n", tmp_path).stdout
    assert "(most recent call first)" in out and "ModuleNotFoundError" in out
    assert first(out).category == "versions"   # the missing module, whichever rule names it


@pytest.mark.parametrize("extra", ['dump_frames = "^ "\nlines = ["x"]\n', 'dump_frames = "^ "\ncut = true\n',
                                   '\n'])   # no dump_frames
def test_a_dump_class_takes_frames_and_no_lines(tmp_path, extra):
    path = tmp_path / "generic.toml"
    path.write_text('[[class]]\nid = "x"\ncategory = "other"\ntitle = "t"\ncause = "c"\nfix = "f"\n'
                    'confidence = 0.2\nreferences = ["https://x"]\ndump = "^Thread"\n' + extra)
    with pytest.raises(CatalogError, match="a `dump` class"):
        terminal.load_generic(path)


def test_the_rules_page_says_what_a_dump_is(doctor):
    page = doctor("rules", "generic-stuck-process")
    assert page.returncode == 0
    assert "When the log holds nothing else" in page.stdout and "most recent call first" in page.stdout
    assert "py-spy" in page.stdout


def test_a_dump_class_without_dump_lines_still_reads_a_dump(tmp_path):
    path = tmp_path / "generic.toml"
    path.write_text('[[class]]\nid = "x"\ncategory = "other"\ntitle = "t"\ncause = "c"\nfix = "f"\n'
                    'confidence = 0.2\nreferences = ["https://x"]\ndump = "^Thread \\\\d+ "\n'
                    'dump_frames = "^\\\\s+\\\\w+ \\\\("\n')
    layer = terminal.load_generic(path)
    found = explain_text('step 3 of 9\nThread 7 (idle): "MainThread"\n    wait (threading.py:327)\n', matcher=Matcher([], layer))
    assert [f.rule for f in found] == ["x"]
