"""The generic layer under the rules (matching/terminal.py, knowledge/generic.toml), cause over
consequence across nodes, and bad input (a corrupt or truncated .gz, a 10 MB line).

Failures are produced for real where they can be: a real interpreter raising a real chained
exception, logging's own output of a handled one, a real gzip file cut or damaged.
"""
from __future__ import annotations

import functools
import textwrap

import gzip
import re
import shutil
import subprocess
import sys
import time

import pytest

from matching import terminal
from matching.catalog import CatalogError
from matching.explain import Matcher, explain_paths, explain_text

from .conftest import ROOT, run_doctor, run_python
from .fresh import can_unshare

FIX = ROOT / "tests" / "fixtures" / "explain"


def body(name: str) -> str:
    return (FIX / name).read_text().split("\n", 1)[1]


def python_output(code: str, tmp_path, name="job.py") -> str:
    """What a real interpreter prints running `code` (stdout and stderr, as a log has them)."""
    return run_python(code, tmp_path, name).stdout


@functools.lru_cache(maxsize=1)
def layer_alone() -> Matcher:
    """The generic layer without the rules: what it finds by itself (rules written later may name
    the same failures first). Built once: a Matcher holds no state of a scan."""
    return Matcher([], terminal.generic())


def layer_verdict(text: str) -> tuple[str, str]:
    """(class id, category) of the generic layer's first finding on `text`."""
    top = explain_text(text, matcher=layer_alone())[0]
    return top.rule, top.category


def with_ray_prefix(text: str, who: str) -> str:
    return "".join(f"({who}) {ln}\n" for ln in text.splitlines())


# ---------------------------------------------------------------------------------------------
# Classification


def test_chain_names_its_innermost_cause(tmp_path):
    # torch_npu's shape: a backend that cannot load its library, re-raised as a RuntimeError
    out = python_output(
        "import ctypes\n"
        "try:\n    ctypes.CDLL('libhccl_doctor_test.so')\n"
        "except OSError as exc:\n    raise RuntimeError('Failed to load the backend extension: torch_npu') from exc\n",
        tmp_path)
    assert "direct cause" in out
    top = explain_text(out)[0]  # a rule or the layer: the cause, not the consequence rule on the end
    assert top.category == "versions" and top.rule != "torch-npu-autoload-failed"
    assert any("libhccl_doctor_test.so: cannot open shared object file" in ln.text for ln in top.lines)
    top = explain_text(out, matcher=layer_alone())[0]
    assert (top.rule, top.category, top.generic) == ("generic-shared-library-missing", "versions", True)
    assert any("libhccl_doctor_test.so: cannot open shared object file" in ln.text for ln in top.lines)
    assert any("RuntimeError: Failed to load" in ln.text for ln in top.lines)  # the chain's end too


def test_during_handling_chain_and_unknown_exception(tmp_path):
    out = python_output(
        "try:\n    {}['reward']\nexcept KeyError:\n    1 / 0\n", tmp_path)
    assert "During handling of the above exception" in out
    top = explain_text(out)[0]
    # neither is known: the run's last exception, with the chain folded into one finding
    assert top.rule == "generic-python-exception" and top.category == "other"
    assert top.confidence < 0.6
    assert any("ZeroDivisionError" in ln.text for ln in top.lines)


@pytest.mark.parametrize("prefix", ["[rank3]: ", "ERROR 07-28 15:07:22 [core.py:632] ",
                                    "(WorkerDict pid=7, ip=10.0.0.2) "])
def test_frames_are_read_through_launcher_prefixes(tmp_path, prefix):
    out = python_output("import torch\nfrom verl import DataProto\n"
                        "DataProto.from_dict(tensors={'input_ids': torch.zeros(6, 4)}).chunk(4)\n", tmp_path)
    # the layer alone: verl-dataproto-uneven-chunk, a rule written since, names it first
    top = explain_text("".join(prefix + ln + "\n" for ln in out.splitlines()), matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-config-error", "config")  # raised in verl/protocol.py
    assert any("verl/protocol.py" in ln.text for ln in top.lines)


@pytest.mark.parametrize("number", ["{} [rank0]: ", "{:6d}\t", "{} "])
def test_a_paste_with_its_line_numbers_is_read(tmp_path, number):
    # a log copied from GitHub's log viewer or `cat -n`: each line opens with its number
    out = python_output("import torch\nfrom verl import DataProto\n"
                        "DataProto.from_dict(tensors={'input_ids': torch.zeros(6, 4)}).chunk(4)\n", tmp_path)
    pasted = "".join(number.format(i) + ln + "\n" for i, ln in enumerate(out.splitlines(), 480))
    top = explain_text(pasted, matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-config-error", "config")
    assert any("verl/protocol.py" in ln.text for ln in top.lines)


def test_a_logged_and_handled_traceback_is_not_a_failure(tmp_path):
    # logging's prefix on the Traceback header: the program logged the traceback and went on
    logged = python_output(
        "import logging, traceback\nlogging.basicConfig(format='%(levelname)s:%(asctime)s:%(message)s')\n"
        "try:\n    int('x')\nexcept ValueError:\n    logging.error(traceback.format_exc())\n", tmp_path)
    assert "ERROR:" in logged.split("Traceback")[0].splitlines()[-1]
    assert explain_text(logged) == []
    # logger.exception, then the next training step
    went_on = python_output(
        "import logging\nlogging.basicConfig()\n"
        "try:\n    int('x')\nexcept ValueError:\n    logging.exception('could not parse the action')\n"
        "print('step:3 - reward:0.5')\n", tmp_path)
    assert went_on.index("Traceback") < went_on.index("step:3")
    assert explain_text(went_on) == []
    uncaught = python_output("int('x')\n", tmp_path)
    assert explain_text(uncaught)[0].rule == "generic-python-exception"


def test_an_exception_followed_by_training_steps_was_not_terminal(tmp_path):
    out = python_output("int('x')\n", tmp_path)
    assert explain_text(out)  # alone, it is the run's end
    assert explain_text(out + "step:7 - actor/loss:0.12 - critic/score:0.4\n") == []


def test_warnings_are_not_failures(tmp_path):
    out = python_output("import warnings\nwarnings.warn('flash_attn is not installed: ImportError')\n"
                        "warnings.warn('libnuma.so.1: cannot open shared object file', RuntimeWarning)\n",
                        tmp_path)
    assert "UserWarning" in out and explain_text(out) == []


@pytest.mark.parametrize("fixture,category", [
    ("generic-import-source-tree.log", "imports"), ("generic-missing-module.log", "versions"),
    ("generic-data-file-not-found.log", "data"), ("generic-path-not-found.log", "workdir"),
    ("generic-data-schema.log", "data"), ("generic-config-error--2.log", "config"),
    ("generic-pip-resolution.log", "versions"), ("generic-killed-by-signal.log", "memory"),
    ("generic-cuda-error.log", "versions"), ("generic-nccl-error.log", "network"),
    ("generic-version-mismatch.log", "versions"), ("generic-api-mismatch.log", "versions"),
    ("generic-ray-cluster.log", "cluster"), ("generic-connection--2.log", "network"),
    ("generic-path-permission.log", "other"), ("generic-native-crash--2.log", "other"),
    ("generic-pip-resolution--3.log", "versions"),
])
def test_generic_categories_follow_the_issue(fixture, category):
    assert explain_paths([str(FIX / fixture)])[0].category == category


def test_families_give_the_member_meaning(tmp_path):
    found = explain_text("EL0004: Failed to allocate memory.\n", matcher=layer_alone())  # npu-oom's, with rules
    assert (found[0].rule, found[0].category) == ("generic-cann-error-code", "cluster")
    assert "driver" in found[0].title
    oom = explain_text("aclrtMalloc failed, runtime result = 207001\n")[0]
    assert (oom.rule, oom.category) == ("generic-acl-runtime-result", "memory")
    # streams used up where torch_npu begins a graph capture: the capture sizes (vllm-ascend's FAQ), not memory
    streams = explain_text("capture_begin:../torch_npu/csrc/core/npu/NPUGraph.cpp:230 NPU function error: "
                           "c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207008\n")[0]
    assert (streams.rule, streams.category) == ("generic-acl-runtime-result", "config")


# torch's device count failing (c10/cuda/CUDAFunctions.cpp): the cudaError_t's number and string say why
@pytest.mark.parametrize("error,category", [
    ("803: system has unsupported display driver / cuda driver combination", "versions"),
    ("804: forward compatibility was attempted on non supported HW", "versions"),
    ("802: system not yet initialized", "cluster"),
    ("999: unknown error", "cluster"),
])
def test_torch_counting_no_devices_is_read_by_its_cuda_error(error, category):
    text = ("Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/dist-packages/torch/cuda/__init__.py", line 319, in _lazy_init\n'
            "    torch._C._cuda_init()\n"
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
            f"calling NumCudaDevices() that might have already set an error? Error {error}\n")
    for matcher in (layer_alone(), None):
        top = explain_text(text, matcher=matcher)[0]
        assert (top.rule, top.category) == ("generic-cuda-error", category)


# ---------------------------------------------------------------------------------------------
# Cause over consequence, across nodes and pids


def test_a_cause_on_another_node_beats_a_rule_matched_consequence(tmp_path):
    dead = with_ray_prefix(body("ray-actor-died.log"), "TaskRunner pid=11, ip=10.0.0.1")
    cause = with_ray_prefix(body("generic-data-file-not-found.log"), "WorkerDict pid=42, ip=10.0.0.2")
    a, b = tmp_path / "node1.log", tmp_path / "node2.log"
    a.write_text(dead)
    b.write_text(cause)
    found = explain_paths([str(a), str(b)])
    assert found[0].rule == "generic-data-file-not-found" and found[0].lines[-1].node == "10.0.0.2"
    assert "ray-actor-died" in [f.rule for f in found[1:]]
    # one log, the consequence printed first: the same
    found = explain_text(dead + cause)
    assert found[0].rule == "generic-data-file-not-found"


def _engine_run(tmp_path, died: str) -> str:
    """What a real interpreter prints when its engine process dies of an error only the terminal
    class knows, and it then raises `died` (an exception type and message) about it."""
    kind, message = died.split(": ", 1)
    code = (
        "import subprocess, sys\n"
        "r = subprocess.run([sys.executable, '-c', 'def busy_loop(state):\\n    return 1 / state\\nbusy_loop(0)'])\n"
        "print('INFO engine restarted, serving requests')\n"
        f"class {kind}(Exception):\n    pass\n"
        f"if r.returncode:\n    raise {kind}({message!r})\n")
    out = python_output(code, tmp_path)
    assert out.index("ZeroDivisionError") < out.index(died)
    return out


def test_a_consequence_that_points_back_leaves_the_run_to_the_exception_before_it(tmp_path):
    # vLLM's client: "See root cause above": the engine's own error is the run's cause
    out = _engine_run(tmp_path, "EngineDeadError: Engine core initialization failed. See root cause above.")
    for matcher in (layer_alone(), None):
        found = explain_text(out, all=True, matcher=matcher)
        assert found[0].rule == "generic-python-exception" and not found[0].consequence, found
        assert found[0].lines[-1].text.startswith("ZeroDivisionError")
    # Ray's actor death says no such thing: an exception before it may have been survived, and the
    # death (a rule's consequence) stays the run's end
    out = _engine_run(tmp_path, "ActorDiedError: The actor died unexpectedly before finishing this task.")
    assert explain_text(out)[0].rule == "ray-actor-died"


@pytest.fixture(scope="module")
def clients_joined(tmp_path_factory):
    """A real DistStoreError: rank 0 serves the store and waits for a rank 1 that never comes."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([sys.executable, str(FIX / "repro" / "store.py"), "0", str(port)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert "clients joined" in r.stdout, r.stdout[-2000:]
    return r.stdout


def test_store_waiting_for_clients_is_a_consequence_of_the_cause_on_another_node(tmp_path, clients_joined):
    # alone, it is still reported: a peer failed (the layer's own class; with the rules,
    # torch-dist-store-clients-missing names it, as a consequence)
    alone = explain_text(clients_joined, matcher=layer_alone())
    assert (alone[0].rule, alone[0].category) == ("generic-peer-failure", "cluster")
    assert explain_text(clients_joined)[0].consequence
    head, peer = tmp_path / "head.log", tmp_path / "worker.log"
    head.write_text(clients_joined)
    peer.write_text(body("generic-config-error--2.log"))  # why rank 1 never joined
    found = explain_paths([str(head), str(peer)])
    # the peer's cause (a rule written since, verl-rollout-tp-not-divisible, names it before the layer)
    assert found[0].category == "config" and not found[0].consequence and found[0].lines[0].file == str(peer)
    peer.write_text(body("memory-cuda-oom.log"))          # a rule-named cause
    assert explain_paths([str(head), str(peer)])[0].rule == "memory-cuda-oom"


def test_rule_causes_stay_above_generic_ones():
    text = body("generic-python-exception.log") + body("verl-batch-not-divisible.log")
    assert explain_text(text)[0].rule == "verl-batch-not-divisible"


# ---------------------------------------------------------------------------------------------
# Bad input


def _gz(tmp_path, name="run.log.gz") -> bytes:
    data = gzip.compress((body("memory-cuda-oom.log") * 2000).encode())
    (tmp_path / name).write_bytes(data)
    return data


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "header-only"])
def test_cli_on_a_broken_gzip_is_one_line_exit_2(tmp_path, damage):
    data = _gz(tmp_path)
    if damage == "truncated":
        bad = data[: len(data) // 2]
    elif damage == "corrupt":
        mid = len(data) // 2
        bad = data[:mid] + bytes(b ^ 0x5A for b in data[mid:mid + 64]) + data[mid + 64:]
    else:
        bad = data[:10]
    log = tmp_path / f"{damage}.log.gz"
    log.write_bytes(bad)
    with pytest.raises(Exception):  # the file really is broken for gzip itself
        gzip.decompress(bad)
    r = run_doctor("explain", str(log))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "gzip" in r.stderr and str(log) in r.stderr
    assert r.stdout == ""
    r = run_doctor("explain", "--json", str(log))
    assert r.returncode == 2 and r.stdout == ""


def test_cli_whole_gzip_still_explains(tmp_path):
    _gz(tmp_path)
    r = run_doctor("explain", str(tmp_path / "run.log.gz"))
    assert r.returncode == 0 and "memory-cuda-oom" in r.stdout


@pytest.mark.parametrize("filler", [b"x", b"ERROR ", b'{"token_ids": [151643, 872, 25], "text": "a b"} '])
@pytest.mark.parametrize("engine", ["hyperscan", "re2"])
def test_a_10mb_line_ending_in_cuda_oom_keeps_its_tail(tmp_path, monkeypatch, filler, engine):
    if engine == "re2":
        monkeypatch.setenv("DOCTOR_PREFILTER", "re2")
    log = tmp_path / "huge.log"
    with open(log, "wb") as fh:
        fh.write(b"step:1 - loss:0.4\n")
        fh.write(filler * ((10 << 20) // len(filler)))
        fh.write(b" CUDA out of memory\n")
    assert log.stat().st_size > 10 << 20
    r = run_doctor("explain", "--json", str(log))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    import json
    top = json.loads(r.stdout)["findings"][0]
    assert top["category"] == "memory" and top["lines"][0]["n"] == 2
    assert top["lines"][0]["text"].endswith("CUDA out of memory")
    assert len(top["lines"][0]["text"]) < 1000  # head ... tail, not 10 MB


# ---------------------------------------------------------------------------------------------
# Off the hot path, and the data


def test_many_exceptions_keep_the_layer_bounded_and_find_the_odd_one():
    noise = "".join(f"ValueError: step {i} - extract action failed\n" for i in range(200_000))
    half = noise.index("\n", len(noise) // 2) + 1
    text = noise[:half] + "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.parquet'\n" \
        + noise[half:]
    t0 = time.monotonic()
    from matching.explain import Scan
    import io
    scan = Scan(layer_alone())
    scan.feed_stream(io.BytesIO(text.encode()))
    col = scan.collector
    kept = len(col.raws())
    assert kept <= terminal.FIRST_EVENTS + terminal.PER_TYPE * terminal.MAX_TYPES + terminal.LAST_EVENTS
    found = scan.findings()
    assert found[0].rule == "generic-data-file-not-found"  # the first of its type is always kept
    assert time.monotonic() - t0 < 30


def test_every_generic_class_has_a_rules_page_and_is_listed():
    listing = run_doctor("explain", "--list")
    assert listing.returncode == 0
    for c in terminal.generic().classes:
        assert c.id in listing.stdout
        assert c.id.startswith("generic-") and c.confidence < 0.6
    page = run_doctor("rules", "generic-nccl-error")
    assert page.returncode == 0
    for text in ("## The codes", "ncclRemoteError", "network", "## How to fix it",
                 "github.com/NVIDIA/nccl"):
        assert text in page.stdout
    page = run_doctor("rules", "generic-config-error")
    assert "verl/" in page.stdout and "AssertionError" in page.stdout
    page = run_doctor("rules", "generic-ray-cluster")  # its `also` types are on its page too
    assert "Or the exception: NodeDiedError" in page.stdout


@pytest.mark.parametrize("snippet,message", [
    ('[[class]]\nid = "x"\ncategory = "gpu"\ntitle = "t"\ncause = "c"\nfix = "f"\nconfidence = 0.3\n'
     'references = ["https://x"]\nexceptions = ["KeyError"]\n', "unknown category"),
    ('[[class]]\nid = "x"\ncategory = "data"\ntitle = "t"\ncause = "c"\nfix = "f"\nconfidence = 0.9\n'
     'references = ["https://x"]\nexceptions = ["KeyError"]\n', "below a rule"),
    ('[[class]]\nid = "x"\ncategory = "data"\ntitle = "t"\ncause = "c"\nfix = "f"\nconfidence = 0.3\n'
     'references = ["https://x"]\nlines = ["(a)\\\\1"]\n', "not valid RE2"),
    ('[[class]]\nid = "x"\ncategory = "data"\ntitle = "t"\ncause = "c"\nfix = "f"\nconfidence = 0.3\n'
     'references = ["https://x"]\nexceptions = ["KeyError"]\nbogus = 1\n', "unknown field"),
    ('[[class]]\nid = "x"\ncategory = "data"\ntitle = "t"\ncause = "c"\nfix = "f"\nconfidence = 0.3\n'
     'references = ["https://x"]\nexceptions = ["KeyError"]\nalso = [{ words = "x" }]\n', "also"),
    ('[[family]]\nid = "x"\ntitle = "t"\ncause = "c"\nfix = "f"\nconfidence = 0.3\nreferences = ["https://x"]\n'
     'last = true\npattern = "(?P<text>.+)"\nlines = ["x"]\nmembers = []\n', "a `last` family"),
    ('[peers]\neffects = ["netwrok"]\n[[class]]\nid = "x"\ncategory = "data"\ntitle = "t"\ncause = "c"\nfix = "f"\n'
     'confidence = 0.3\nreferences = ["https://x"]\nexceptions = ["KeyError"]\n', "peers: unknown category 'netwrok'"),
])
def test_generic_loader_rejects_bad_classes(tmp_path, snippet, message):
    path = tmp_path / "generic.toml"
    path.write_text(snippet)
    with pytest.raises(CatalogError, match=message):
        terminal.load_generic(path)


HEALTHY_NOISE = [
    # NCCL's own INFO line of a healthy start (no network plugin installed): not a missing library
    "testpc115159:2736635:2736635 [2] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared "
    "object file: No such file or directory No plugin found (libnccl-net.so), using internal implementation",
    "(TaskRunner pid=42) step:3 - response_length/mean:107000 - decode_tokens: 207001",
    "INFO 05-12 11:36:01 [launcher.py:80] Shutting down FastAPI HTTP server; worker exited with code -15",
    "[2025-11-19 19:22:11] [WARNING] torch_npu: EZ9999: warmup op cache miss, compiling",
]


@pytest.mark.parametrize("line", HEALTHY_NOISE)
def test_healthy_noise_is_no_finding_of_the_layer(line):
    assert explain_text("step:1 - loss:0.5\n" + line + "\n", matcher=layer_alone()) == []


@pytest.mark.parametrize("line", HEALTHY_NOISE)
def test_healthy_noise_is_no_finding(line):
    assert explain_text("step:1 - loss:0.5\n" + line + "\n") == []


# ---------------------------------------------------------------------------------------------
# The forms real logs print a failure in (tuning part of the corpus: excerpts, Ray, pip/uv, shells)

RAY_TASK = """import os, traceback
import ray.exceptions
os.makedirs('{where}', exist_ok=True)
open('{where}/{module}.py', 'w').write({body!r})
import sys; sys.path.insert(0, '{where}')
import {module}
try:
    {module}.run()
except Exception as exc:  # what a Ray worker sends back; ray.get raises it (worker.py: as_instanceof_cause)
    err = ray.exceptions.RayTaskError('run', traceback.format_exc(), exc, proctitle='ray::WorkerDict.run',
                                      pid=4242, ip='10.0.0.2', actor_repr='<WorkerDict object>')
def get():
    raise err.as_instanceof_cause()
get()
"""


def ray_task_error(tmp_path, module: str, body: str) -> str:
    """Ray's own RayTaskError (ray.exceptions, no cluster needed) of a remote exception, as ray.get
    raises and Python prints it: the remote traceback under Ray's `ray::f() (pid=...)` header."""
    out = python_output(RAY_TASK.format(where=tmp_path / "pkg", module=module, body=body), tmp_path)
    assert "RayTaskError(" in out and "ray::WorkerDict.run()" in out and "(pid=4242" in out, out[-2000:]
    return out


def test_ray_header_stops_the_remote_traceback(tmp_path):
    # before: the frames above the wrapper (ray/_private/worker.py's get) were read as the remote
    # exception's own, and a reward KeyError came out as "Ray could not reach its cluster"
    out = ray_task_error(tmp_path, "reward", "def run():\n    return {}['ground_truth']\n")
    top = explain_text(out, matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-data-schema", "data"), [ln.text for ln in top.lines]
    import io
    from matching.explain import Scan
    scan = Scan(layer_alone())
    scan.feed_stream(io.BytesIO(out.encode()))
    key_error = next(e for e in terminal.events(scan.collector, terminal.generic())
                     if e.chain and e.chain[-1].type == "KeyError")
    # the remote frames only: not the driver's `get` above Ray's header
    assert [f for _, _, f in key_error.chain[-1].frames] == ["<module>", "run"] and key_error.header


def test_a_wrapper_alone_is_classed_by_the_type_it_names(tmp_path):
    out = ray_task_error(tmp_path, "trainer", "def run():\n    import verl_doctor_absent_module\n")
    # the remote part not in this log (a truncated paste, another node's worker log): the wrapper only
    head = out[:out.index("RayTaskError(")]
    wrapper = out[len(head):].splitlines()[0]
    top = explain_text(head + wrapper + "\n", matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-missing-module", "versions")
    found = explain_text(head + wrapper + "\n")  # with the rules: the cause first, the wrapper still listed
    assert found[0].category == "versions" and "ray-task-error" in [f.rule for f in found]


def test_a_traceback_excerpt_without_its_header_is_still_the_run_end(tmp_path):
    out = python_output("def step(batch):\n    return batch.shape[1]\nstep(())\n", tmp_path)
    excerpt = out[out.index("  File "):]                   # users paste from the frames on
    assert "Traceback" not in excerpt
    top = explain_text(excerpt)[0]
    assert (top.rule, top.category) == ("generic-python-exception", "other")
    assert any("AttributeError" in ln.text for ln in top.lines)


@pytest.mark.parametrize("prefix", ["[rank0]:[rank0]: ", "#42 15.84 ", "      "])
def test_frames_and_exception_through_tee_docker_and_pip_indent(tmp_path, prefix):
    # torchrun's tee'd output logged again; docker build --progress=plain; pip/uv indent a build's output
    out = python_output("from verl.trainer.ppo.ray_trainer import compute_response_mask\n"
                        "import verl.utils.config as c\nc.validate_config(None, True, True)\n", tmp_path)
    last = out.strip().splitlines()[-1]
    assert "Error" in last, out[-1500:]
    top = explain_text("".join(prefix + ln + "\n" for ln in out.splitlines()), matcher=layer_alone())[0]
    assert top.generic and any(last.split(":")[0] in ln.text for ln in top.lines)


def test_an_exception_ignored_in_del_is_not_the_failure(tmp_path):
    out = python_output(
        "class Engine:\n    def __init__(self, stage):\n        self._configure(stage)\n        self.optimizer = 1\n"
        "    def _configure(self, stage):\n        assert stage != 3, 'autotp with zero_stage=3 is not supported'\n"
        "    def __del__(self):\n        self.optimizer\n"
        "Engine(3)\n", tmp_path)
    assert out.index("AssertionError") < out.index("Exception ignored in") < out.index("AttributeError")
    top = explain_text(out, matcher=layer_alone())[0]
    # the assert in a _configure step, not the AttributeError __del__ raised while the object died
    assert (top.rule, top.category) == ("generic-config-error", "config")
    assert any("AssertionError" in ln.text for ln in top.lines)


@pytest.mark.parametrize("line,category", [
    # HCCL's registry (hicann/hcomm hcomm_g_msg): each code's message, its class in its errTitle
    ("EI0004: Failed to parse the ranktable file /home/rank_table.json. Reason: device id repeat for one server.",
     "config"),                                                       # File_Operation_Error_Parse
    ("EI0001: Value 60000 for environment variable HCCL_CONNECT_TIMEOUT is invalid. Expected value: [120, 7200].",
     "config"),                                                       # Config_Error_Invalid_Environment_Variable
    ("EI0008: The cann-hccl versions are inconsistent. The local 8.1.RC1, while the remote 8.0.0.",
     "versions"),                                                     # Package_Error_Incorrect_HCCL_Version
    ("EI0011: Failed to allocate 209715200 bytes of NPU memory.", "memory"),  # Resource_Error_Insufficient_Device_Memory
    ("EI0007: Failed to allocate resource notify with info num=8. Reason: Resources are exhausted.",
     "memory"),                                                       # Resource_Error
    ("EI0006: Getting socket times out. Reason: 1. The remote does not initiate a connect request.",
     "network"),                                                      # Communication_Error_Get_Socket
])
def test_hccl_codes_fall_in_the_class_their_registry_gives(line, category):
    found = explain_text(line + "\n", matcher=layer_alone())[0]
    assert (found.rule, found.category) == ("generic-cann-error-code", category)


def test_shell_cannot_find_the_script_and_the_exit_ranks_after_it(tmp_path):
    r = subprocess.run(["/bin/bash", str(tmp_path / "examples" / "run.sh")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 127 and r.stdout.startswith("/bin/bash: ")
    # a job runner's summary (the exit code) printed before the shell's own line
    text = "Job entrypoint command failed with exit code 127, last available logs:\n" + r.stdout
    found = explain_text(text, matcher=layer_alone())
    assert (found[0].rule, found[0].category) == ("generic-path-not-found", "workdir")
    assert [f.rule for f in found][-1] == "generic-nonzero-exit"


@pytest.mark.parametrize("text,cid,category", [
    # CANN's error registry prints "errTitle(ErrCode): message" (hicann/ge error_registry.cc)
    ("RuntimeError: call aclnnMegaMoe failed, detail:Execution_Error(EZ1009): Failed to execute operator "
     "MegaMoe_1. Reason: Failed to execute tiling function.", "generic-cann-error-code", "other"),
    # Ray's C++ log line "[%Y-%m-%d %H:%M:%S,%e %L %P %t] %v", 'C' for FATAL (src/ray/util/logging.cc)
    ("[2026-12-01 09:30:00,123 C 4242 4242] actor_manager.cc:55:  Check failed: it != actor_handles_.end() "
     "Cannot find an actor handle of id, 01000000.", "generic-ray-cluster", "cluster"),
    # uv's diagnostics ("{kind} `{dist}`" through miette) and its resolver's header
    ("  × Failed to build `llvmlite==0.36.0`", "generic-pip-resolution", "versions"),
    ("  × No solution found when resolving dependencies:", "generic-pip-resolution", "versions"),
    # pip < 20.3 (utils/subprocess.py)
    ("ERROR: Command errored out with exit status 1: python setup.py egg_info Check the logs for full "
     "command output.", "generic-pip-resolution", "versions"),
    # torch < 2.1's shared-memory segment that cannot grow (aten/src/ATen/MapAllocator.cpp): /dev/shm, not the disk
    ("RuntimeError: unable to write to file </torch_739_144252761_4>: No space left on device (28)",
     "generic-out-of-memory", "memory"),
    # DeepSpeed's launcher reporting a rank's end (deepspeed/launcher/launch.py sigkill_handler)
    ("[2026-12-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
     "'--local_rank=1'] exits with return code = -9", "generic-killed-by-signal", "memory"),
    ("[2026-12-01 10:00:00,000] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
     "'--local_rank=1'] exits with return code = 1", "generic-nonzero-exit", "other"),
    # UCX's fatal-signal handler (src/ucs/debug/debug.c: "Caught signal %d (%s)"), in NCCL and MPI images
    ("[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)",
     "generic-out-of-memory", "memory"),
    ("[node1:2211 :0:2230] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)",
     "generic-native-crash", "other"),
    # Open MPI's fatal-signal handler (opal/util/stacktrace.c: "[%s:%05d] Signal: %s (%d)"), as mpirun shows it
    ("[mbay-csp2:627483] *** Process received signal ***\n[mbay-csp2:627483] Signal: Segmentation fault (11)\n"
     "[mbay-csp2:627483] Signal code:  (-6)", "generic-native-crash", "other"),
    ("[node1:00042] Signal: Bus error (7)", "generic-native-crash", "memory"),       # SIGBUS: the shared memory
    # NCCL's trace of an error result on its way up (src/include/checks.h), before and after 2.2x added the function
    ("node1:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2", "generic-nccl-error", "network"),
    ("node1:2330:2658 [2] NCCL INFO transport/net.cc:1012 (ncclTransportP2pSetup) -> 6", "generic-nccl-error", "network"),
    ("node1:2330:2658 [2] NCCL INFO enqueue.cc:1500 -> 1", "generic-nccl-error", "other"),
    # ms-swift's inference length check (llm/utils/utils.py), its words run together
    ("AssertionError: Current sentence length exceedsthe model max_length: 2048", "generic-sequence-too-long", "data"),
    # debuggers' reports of the signal (gdb infrun.c print_signal_received_reason; lldb's thread stop reason)
    ("Program received signal SIGILL, Illegal instruction.", "generic-native-crash", "versions"),
    ("* thread #1, name = 'python3', stop reason = signal SIGSEGV: invalid address (fault address: 0x0)",
     "generic-native-crash", "other"),
    # glog's / absl's failure signal handler
    ("*** SIGILL received at time=1733050000 on cpu 3 ***", "generic-native-crash", "versions"),
    # a check that names the software version it needs (TransformerEngine pytorch/fp8.py), other words between;
    # a setting's bound in the same words stays the configuration's
    ("AssertionError: FP8 block scaled GEMM requires Hopper and CUDA >= 12.9.", "generic-version-mismatch", "versions"),
    ("AssertionError: this recipe requires ppo_mini_batch_size >= 2", "generic-config-error", "config"),
    ("AssertionError: requires gpu_memory_utilization >= 0.5", "generic-config-error", "config"),
    ("RuntimeError: flash_attn requires torch > 2.0", "generic-version-mismatch", "versions"),
    # a settings check about the config's own variables (accelerate utils/dataclasses.py)
    ("ValueError: When using `deepspeed_config_file`, the following accelerate config variables will be ignored:",
     "generic-config-error", "config"),
])
def test_error_line_forms_from_their_printing_source(text, cid, category):
    top = explain_text("step:0 - starting\n" + text + "\n", matcher=layer_alone())[0]
    assert (top.rule, top.category) == (cid, category)


def test_a_member_of_an_exception_group_is_read_behind_its_bars(tmp_path):
    (tmp_path / "rl_dataset.py").write_text("def load(row):\n    return row['prompt']\n")
    out = python_output(
        "import rl_dataset\nerrs = []\nfor row in [{}]:\n    try:\n        rl_dataset.load(row)\n"
        "    except KeyError as exc:\n        errs.append(exc)\nraise ExceptionGroup('reading the dataset', errs)\n",
        tmp_path)
    assert "    | KeyError: 'prompt'" in out
    assert layer_verdict(out) == ("generic-data-schema", "data")


def test_argparse_rejects_the_launch(tmp_path):
    out = python_output("import argparse\np = argparse.ArgumentParser(prog='main_ppo.py')\n"
                        "p.add_argument('--nnodes', type=int)\np.parse_args(['--nnodes', '2', '--n_gpus', '8'])\n",
                        tmp_path)
    assert "main_ppo.py: error: unrecognized arguments: --n_gpus 8" in out
    assert layer_verdict(out) == ("generic-config-error", "config")


@pytest.mark.parametrize("shell", ["bash", "sh"])
def test_a_command_the_shell_cannot_find(shell):
    r = subprocess.run([shell, "-c", "torchrun_doctor_absent --nproc_per_node 8 train.py"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 127 and "not found" in r.stdout
    top = explain_text(r.stdout, matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-missing-module", "versions")


def test_a_wrapper_type_beats_an_exit_status_printed_after_it(tmp_path):
    out = ray_task_error(tmp_path, "trainer", "def run():\n    import verl_doctor_absent_module\n")
    head = out[:out.index("RayTaskError(")]
    wrapper = out[len(head):].splitlines()[0]
    text = head + wrapper + "\nJob 'raysubmit_1' failed: entrypoint command failed with exit code 1\n"
    found = explain_text(text, matcher=layer_alone())
    assert [f.rule for f in found][:2] == ["generic-missing-module", "generic-nonzero-exit"]


# ---------------------------------------------------------------------------------------------
# Classes by what the failure is, wherever it was raised (a class's `also` tables)


def test_a_settings_check_outside_the_config_code_is_config(tmp_path):
    # torch's own assert (nn/modules/activation.py): not in verl's config code, but a settings check
    out = python_output("import torch\ntorch.nn.MultiheadAttention(embed_dim=10, num_heads=3)\n", tmp_path)
    assert "AssertionError: embed_dim must be divisible by num_heads" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-config-error", "config")


VLLM_KV = ("def check(needed, available):\n    raise ValueError(\n"
           "        f\"To serve at least one request with the model's max seq len (32768), ({needed:.2f} GiB KV cache \"\n"
           "        f\"is needed, which is larger than the available KV cache memory ({available:.2f} GiB). Try \"\n"
           "        \"increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\")\n")


def test_vllm_refusing_a_kv_cache_that_does_not_fit_is_memory(tmp_path):
    # the message of vllm/v1/core/kv_cache_utils.py (check_enough_kv_cache_memory), raised from there
    mod = tmp_path / "site-packages" / "vllm" / "v1" / "core"
    mod.mkdir(parents=True)
    (mod / "kv_cache_utils.py").write_text(VLLM_KV)
    out = python_output(f"import sys\nsys.path.insert(0, {str(mod)!r})\nimport kv_cache_utils\n"
                        "kv_cache_utils.check(16.0, 4.85)\n", tmp_path)
    assert "vllm/v1/core/kv_cache_utils.py" in out and "available KV cache memory" in out
    assert layer_verdict(out) == ("generic-out-of-memory", "memory")


@pytest.mark.parametrize("text", [
    # vllm/worker/worker.py (raise_if_cache_size_invalid), vLLM 0.8-0.10
    "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    "initializing the engine.",
    # vllm's MemorySnapshot check at startup (vllm/v1/worker/gpu_worker.py, vllm/utils)
    "ValueError: Free memory on device (3.27/15.98 GiB) on startup is less than desired GPU memory "
    "utilization (0.9, 14.39 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
])
def test_vllm_memory_refusals_from_their_printing_source(text):
    top = explain_text("step:0 - starting\n" + text + "\n", matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-out-of-memory", "memory")


@pytest.mark.parametrize("raise_,cid,category", [
    ("NodeDiedError('Task failed because node 7b1f has died')", "generic-ray-cluster", "cluster"),
    ("ActorUnschedulableError('the placement group was removed')", "generic-ray-cluster", "cluster"),
    ("ObjectStoreFullError('Failed to put object: the object store is full')", "generic-out-of-memory", "memory"),
    ("OutOfDiskError('Local disk is full')", "generic-path-permission", "other"),
])
def test_rays_own_errors_are_classed_by_their_type(tmp_path, raise_, cid, category):
    # raised from the driver's own code: no Ray frame to place them, the type says what failed
    out = python_output(f"import ray.exceptions\ndef fit():\n    raise ray.exceptions.{raise_}\nfit()\n", tmp_path)
    assert "ray.exceptions." + raise_.split("(")[0] in out, out[-1500:]
    assert layer_verdict(out) == (cid, category)


def test_a_store_that_cannot_be_reached_is_network(tmp_path):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = python_output("import datetime\nimport torch.distributed as dist\n"
                        f"dist.TCPStore('127.0.0.1', {port}, 2, False, timeout=datetime.timedelta(seconds=2))\n",
                        tmp_path)
    assert "torch.distributed.DistNetworkError: " in out, out[-1500:]
    assert layer_verdict(out) == ("generic-connection", "network")


def test_gloo_without_the_interface_it_was_told_is_network(tmp_path):
    out = python_output("import os, tempfile\nos.environ['GLOO_SOCKET_IFNAME'] = 'doctor0'\n"
                        "import torch.distributed as dist\n"
                        "dist.init_process_group('gloo', init_method='file://' + tempfile.mktemp(), rank=0, world_size=1)\n",
                        tmp_path)
    assert "Unable to find address for: doctor0" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-connection", "network")


def test_a_grpc_server_whose_port_is_taken_is_network(tmp_path):
    # what Ray's raylet and GCS print when another process holds their port: gRPC's core logs the
    # bind failure, and grpcio raises after it
    out = python_output("import socket\nfrom concurrent import futures\nimport grpc\n"
                        "held = socket.socket()\nheld.bind(('0.0.0.0', 0))\nheld.listen()\n"
                        "server = grpc.server(futures.ThreadPoolExecutor(max_workers=1), options=[('grpc.so_reuseport', 0)])\n"
                        "server.add_insecure_port('0.0.0.0:%d' % held.getsockname()[1])\n", tmp_path)
    assert "RuntimeError: Failed to bind to address" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-connection", "network")
    core = [ln for ln in out.splitlines() if "No address added out of total" in ln]
    assert core, out[-1500:]
    # the core's line alone, as a raylet.err holds it with no Python around it
    assert layer_verdict("\n".join(core) + "\n") == ("generic-connection", "network")


def test_a_conversation_the_chat_template_rejects_is_data(tmp_path):
    out = python_output(
        "from transformers.utils.chat_template_utils import render_jinja_template\n"
        "T = (\"{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}\"\n"
        "     \"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\"\n"
        "     \"{% endif %}{{ m['content'] }}{% endfor %}\")\n"
        "render_jinja_template(conversations=[[{'role': 'assistant', 'content': 'hi'}]], chat_template=T)\n",
        tmp_path)
    assert "jinja2.exceptions.TemplateError: Conversation roles must alternate" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-data-schema", "data")


@pytest.mark.parametrize("path,cid,category", [
    ("data/gsm8k/train.parquet", "generic-path-not-found", "workdir"),        # relative: the launch dir
    ("/data/gsm8k/train.parquet", "generic-data-file-not-found", "data"),     # absolute: the data is not there
])
def test_a_missing_data_file_relative_or_absolute(tmp_path, path, cid, category):
    out = python_output(f"import pyarrow.parquet as pq\npq.read_table({path!r})\n", tmp_path)
    assert f"FileNotFoundError: {path}" in out, out[-1500:]
    assert layer_verdict(out) == (cid, category)


def test_a_dataset_the_data_libraries_cannot_find_is_data(tmp_path, monkeypatch):
    # datasets resolves a relative path against the launch directory before it looks (load.py), and a loader's own
    # check may raise ValueError (LLaMA-Factory data/loader.py): before, the first was workdir, the second a schema error
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    out = python_output("import datasets\ndatasets.load_dataset('./data/gsm8k_prepared')\n", tmp_path)
    assert f"FileNotFoundError: Couldn't find any data file at {tmp_path}/data/gsm8k_prepared" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-data-file-not-found", "data")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "loader.py").write_text(
        "import os\ndef load(path):\n    if not os.path.isfile(path):\n"
        "        raise ValueError(f'File {path} not found.')\n")
    out = python_output("import sys\nsys.path.insert(0, 'data')\nimport loader\nloader.load('data/mllm_dome.json')\n",
                        tmp_path)
    assert "ValueError: File data/mllm_dome.json not found." in out, out[-1500:]
    assert layer_verdict(out) == ("generic-data-file-not-found", "data")


@pytest.mark.parametrize("code", [
    # the lazy mapping of model types (models/auto/configuration_auto.py): transformers < 4.46's form
    "from transformers import CONFIG_MAPPING\nCONFIG_MAPPING['qwen9_doctor']\n",
    # an auto class that does not know the config (models/auto/auto_factory.py)
    "import transformers\ntransformers.AutoModelForCausalLM.from_config(transformers.CLIPVisionConfig())\n",
])
def test_transformers_not_knowing_the_model_is_versions(tmp_path, code):
    out = python_output(code, tmp_path)
    assert "KeyError: 'qwen9_doctor'" in out or "ValueError: Unrecognized configuration class" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-version-mismatch", "versions")


def test_a_traceback_a_hard_wrapped_paste_broke_keeps_its_frames(tmp_path):
    # a real TypeError raised in a dataset module, its frame lines wrapped at their spaces the way a hard-wrapped
    # paste (an issue's, a mail's) breaks them: `File`, `"path",`, `line N, in f` each alone
    (tmp_path / "recipe" / "dataset").mkdir(parents=True)
    (tmp_path / "recipe" / "dataset" / "rl_dataset.py").write_text(
        "def build_messages(row):\n    images = row.pop('images', None)\n    return len(images)\n")
    out = python_output("import sys\nsys.path.insert(0, '.')\nfrom recipe.dataset.rl_dataset import build_messages\n"
                        "build_messages({'prompt': 'hi'})\n", tmp_path)
    assert "TypeError: object of type 'NoneType' has no len()" in out, out[-1500:]
    width = max(len(m) for m in re.findall(r'"[^"]+",', out))     # a quoted path fits a line, `File` beside it does not
    wrapped = "\n".join(piece for ln in out.splitlines()
                        for piece in (textwrap.wrap(ln, width, break_long_words=False, break_on_hyphens=False)
                                      if ln.lstrip().startswith("File ") else [ln]))
    assert '\nline 3, in build_messages\n' in wrapped and "rl_dataset.py\",\n" in wrapped, wrapped
    assert layer_verdict(out) == ("generic-data-schema", "data")
    assert layer_verdict(wrapped) == ("generic-data-schema", "data")        # before: no frame, other
    # a quoted path above a line that is not CPython's `line N, in f` is no frame: a message stays a message
    assert layer_verdict("Traceback (most recent call last):\n\"/srv/run/dataset.py\",\nline 3 in build\n"
                         "TypeError: object of type 'NoneType' has no len()\n")[1] == "other"


def test_a_wrapper_naming_a_data_library_error_is_data(tmp_path):
    out = ray_task_error(tmp_path, "loader", "def run():\n    import pyarrow as pa\n    pa.array([1, 'one'])\n")
    head = out[:out.index("RayTaskError(")]
    wrapper = out[len(head):].splitlines()[0]
    assert "RayTaskError(ArrowInvalid): " in wrapper and "ray::WorkerDict.run()" in wrapper, wrapper
    top = explain_text(head + wrapper + "\n", matcher=layer_alone())[0]   # the remote part not in the log
    assert (top.rule, top.category) == ("generic-data-schema", "data")


@pytest.mark.parametrize("code,printed,cid,category", [
    # concurrent.futures' pool after a worker was killed from outside (SIGKILL, as the OOM killer does)
    ("import os, signal\nfrom concurrent.futures import ProcessPoolExecutor\n"
     "def die(_):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
     "if __name__ == '__main__':\n    with ProcessPoolExecutor(2) as ex:\n        ex.submit(die, 0).result()\n",
     "concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly",
     "generic-killed-by-signal", "memory"),
    # ... and what its submit() says once the pool is broken (one future at a time: which of the two a map
    # prints depends on whether the worker died before the last submit)
    ("import os, signal\nfrom concurrent.futures import ProcessPoolExecutor\n"
     "def die(_):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
     "if __name__ == '__main__':\n    with ProcessPoolExecutor(1) as ex:\n        try:\n            ex.submit(die, 0).result()\n"
     "        except Exception:\n            pass\n        ex.submit(die, 1)\n",
     "concurrent.futures.process.BrokenProcessPool: A child process terminated abruptly, the process pool is not usable anymore",
     "generic-killed-by-signal", "memory"),
    # http.client when the server closes the connection without answering
    ("import http.client, socket, threading\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen()\n"
     "def serve():\n    conn = s.accept()[0]\n    conn.recv(65536)\n    conn.close()\n"   # reads the request: a FIN, no reset
     "threading.Thread(target=serve, daemon=True).start()\n"
     "c = http.client.HTTPConnection(*s.getsockname())\nc.request('GET', '/')\nc.getresponse()\n",
     "http.client.RemoteDisconnected: Remote end closed connection without response", "generic-connection", "network"),
    # the names that are not "...Error": subprocess's timeout, queue's, zipfile's
    ("import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import time; time.sleep(5)'], timeout=0.2)\n",
     "subprocess.TimeoutExpired: Command", "generic-python-exception", "other"),
    ("import queue\nqueue.Queue().get(timeout=0.05)\n", "_queue.Empty", "generic-python-exception", "other"),
    ("import io, zipfile\nzipfile.ZipFile(io.BytesIO(b'not a zip'))\n", "zipfile.BadZipFile: File is not a zip file",
     "generic-python-exception", "other"),
])
def test_exceptions_python_names_otherwise_end_the_run_they_end(tmp_path, code, printed, cid, category):
    # before: "the log ends inside a traceback: the exception that ended the run is not in it", or no finding
    out = python_output(code, tmp_path)
    assert printed in out, out[-1500:]
    top = explain_text(out, matcher=layer_alone())[0]
    assert (top.rule, top.category) == (cid, category)
    assert any(printed in ln.text for ln in top.lines)


@pytest.mark.parametrize("line", ["  socket.timeout: 60", "queue.Empty: skip", "queue.Full: 128"])
def test_a_setting_named_like_pythons_odd_exceptions_is_no_failure(line):
    assert explain_text("config:\n" + line + "\nstep:1 - loss: 0.3\ntraining done\n") == []


def test_sockets_old_timeout_is_a_connection_failure():
    # socket.timeout was its own class before Python 3.10 ("socket.timeout: timed out"); 3.10 made it TimeoutError
    text = ("Traceback (most recent call last):\n  File \"/usr/lib/python3.8/socket.py\", line 669, in readinto\n"
            "    return self._sock.recv_into(b)\nsocket.timeout: timed out\n")
    assert layer_verdict(text) == ("generic-connection", "network")


def test_a_port_already_taken_is_network(tmp_path):
    out = python_output("import socket\na = socket.socket()\na.bind(('127.0.0.1', 0))\na.listen()\n"
                        "b = socket.socket()\nb.bind(a.getsockname())\n", tmp_path)
    assert "OSError: [Errno 98] Address already in use" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-connection", "network")


def test_an_operator_the_build_lacks_for_the_backend_is_versions(tmp_path):
    out = python_output("import torch\ntorch.ops.aten.cudnn_convolution(torch.zeros(1, 1, 3, 3), torch.zeros(1, 1, 1, 1),"
                        " [0, 0], [1, 1], [1, 1], 1, False, False, False)\n", tmp_path)
    assert "NotImplementedError: Could not run 'aten::cudnn_convolution' with arguments from the 'CPU' backend" in out
    assert layer_verdict(out) == ("generic-version-mismatch", "versions")


def test_a_model_path_taken_for_a_hub_id_is_workdir(tmp_path):
    out = python_output("from huggingface_hub.utils import validate_repo_id\n"
                        "validate_repo_id('/models/Qwen2.5-7B-Instruct')\n", tmp_path)
    assert "huggingface_hub.errors.HFValidationError: " in out or "HFValidationError: " in out, out[-1500:]
    assert layer_verdict(out) == ("generic-path-not-found", "workdir")


def test_an_architecture_vllm_does_not_know_is_versions_not_config():
    # vllm/model_executor/models/registry.py's message (0.8-0.23): "not supported" of a version, not a setting
    text = ("ValueError: Model architectures ['Qwen3MoeForCausalLM'] are not supported for now. Supported "
            "architectures: dict_keys(['AquilaModel', 'LlamaForCausalLM'])")
    top = explain_text("step:0 - starting\n" + text + "\n", matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-version-mismatch", "versions")


def test_fewer_devices_than_the_job_asks_for_is_cluster_not_config():
    # verl single_controller/ray/base.py (_check_resource_available), raised where config checks are
    text = ('  File "/usr/lib/python3/site-packages/verl/single_controller/ray/base.py", line 240, in '
            '_check_resource_available\n    raise ValueError(\n'
            "ValueError: Total available GPUs 4 is less than total desired GPUs 8")
    top = explain_text("step:0 - starting\n" + text + "\n", matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-ray-cluster", "cluster")


@pytest.mark.parametrize("line", [
    # NeMo-RL's RayVirtualCluster (nemo_rl/distributed/virtual_cluster.py), raised before the placement groups
    "ValueError: Not enough GPUs available. Requested 16 GPUs, but only 8 are available in the cluster.",
    "nemo_rl.distributed.virtual_cluster.ResourceInsufficientError: Not enough CPUs available. "
    "Requested 64 CPUs, but only 32 are available in the cluster."])
def test_a_framework_that_counts_the_clusters_devices_first_is_cluster(line):
    frame = '  File "/opt/nemo-rl/nemo_rl/distributed/virtual_cluster.py", line 189, in _init_placement_groups\n'
    top = explain_text("step:0 - starting\n" + frame + line + "\n", matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-ray-cluster", "cluster")
    # a tool's own count of one machine's free GPUs (no cluster in its words) is not the Ray cluster's
    single = "RuntimeError: Not enough GPUs available. Requested: 2, Available: 1"
    found = explain_text("step:0 - starting\n" + single + "\n", matcher=layer_alone())
    assert not found or found[0].rule != "generic-ray-cluster"


# ---------------------------------------------------------------------------------------------
# Forms of the tuning part's CI logs and excerpts (vllm-ascend's unit and e2e tests run under pytest)


def pytest_output(tmp_path, tb: str) -> str:
    """What a real pytest prints for two failing tests: a ValueError raised in a module under
    verl/trainer/config/, and an import of a package that is not installed."""
    cfg = tmp_path / "verl" / "trainer" / "config"
    cfg.mkdir(parents=True)
    for d in (cfg, cfg.parent, cfg.parent.parent):
        (d / "__init__.py").write_text("")
    (cfg / "algo.py").write_text("def check(n):\n    if n % 3:\n"
                                 "        raise ValueError(f'train_batch_size {n} does not split over 3 workers')\n")
    (tmp_path / "test_job.py").write_text("from verl.trainer.config.algo import check\n"
                                          "def test_cfg():\n    check(4)\n"
                                          "def test_imp():\n    import verl_doctor_absent_module\n")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--tb={tb}", "test_job.py"],
                       cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode == 1 and "E   ModuleNotFoundError: No module named 'verl_doctor_absent_module'" in \
        r.stdout.replace("E       ", "E   "), r.stdout[-2000:]
    return r.stdout


@pytest.mark.parametrize("tb", ["short", "long"])
def test_pytest_fail_marker_and_frames(tmp_path, tb):
    out = pytest_output(tmp_path, tb)
    found = [(f.rule, f.category) for f in explain_text(out, matcher=layer_alone())]
    assert ("generic-missing-module", "versions") in found
    if tb == "short":   # "path:N: in func" frames: the ValueError was raised in verl's config code
        assert found[0] == ("generic-config-error", "config"), found
    # pytest's short summary alone ("FAILED <node id> - <exception line>"), as a CI step's tail shows it
    summary = out[out.index("short test summary info"):]
    assert [(f.rule, f.category) for f in explain_text(summary, matcher=layer_alone())] == \
        [("generic-config-error", "config"), ("generic-missing-module", "versions")]   # the ValueError names a setting


def test_a_bare_exception_type_is_read(tmp_path):
    # ray/services.py (0.x) check_version_info: raise Exception("Version mismatch: ..."), message on many lines
    out = python_output("def check_version_info():\n    raise Exception('Version mismatch: The cluster was started with:"
                        "\\n    Ray: 2.40.0\\nThis process was started with:\\n    Ray: 2.41.0')\n"
                        "check_version_info()\n", tmp_path)
    assert "\nException: Version mismatch: " in out, out
    assert layer_verdict(out) == ("generic-version-mismatch", "versions")
    assert layer_verdict(with_ray_prefix(out, "raylet, ip=10.0.0.2")) == ("generic-version-mismatch", "versions")


def import_output(tmp_path, files: dict, code: str, pythonpath: str = "") -> str:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": pythonpath}
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    assert r.returncode == 1 and "Error" in r.stdout, r.stdout
    return r.stdout


def test_an_import_that_fails_in_a_source_tree_is_imports(tmp_path):
    # a project directory named like a package (torchtitan's datasets/ shadowing HF datasets): the
    # module the name was looked up in is that directory's file, not an installed one
    out = import_output(tmp_path, {"proj/datasets/__init__.py": "", "proj/hf.py": "from datasets import Dataset\n"},
                        "import hf", pythonpath=str(tmp_path / "proj"))
    assert f"from 'datasets' ({tmp_path}/proj/datasets/__init__.py)" in out
    assert layer_verdict(out) == ("generic-import-source-tree", "imports")
    # a directory without __init__.py: a namespace package, "unknown location"
    out = import_output(tmp_path, {"vllm_doc_ns/README": "x"}, "from vllm_doc_ns import LLM")
    assert "(unknown location)" in out
    assert layer_verdict(out) == ("generic-import-source-tree", "imports")
    # a checkout whose compiled part was never built: the import fails inside the package it names
    out = import_output(tmp_path, {"ck/vllm_doc/__init__.py": "import vllm_doc._C\n"}, "import vllm_doc",
                        pythonpath=str(tmp_path / "ck"))
    assert "No module named 'vllm_doc._C'" in out
    assert layer_verdict(out) == ("generic-import-source-tree", "imports")


@pytest.mark.parametrize("label", ["[rank{}]:", "[default{}]:"])
def test_interleaved_ranks_keep_their_own_tracebacks(tmp_path, label):
    # torchrun's tee'd output interleaves the ranks' lines; each rank's frames are its own
    tree = import_output(tmp_path, {"ck/vllm_doc/__init__.py": "import vllm_doc._C\n"}, "import vllm_doc",
                         pythonpath=str(tmp_path / "ck"))
    user = import_output(tmp_path, {"job/train.py": "import verl_doctor_absent_module\n"}, "import train",
                         pythonpath=str(tmp_path / "job"))
    a, b = tree.splitlines(), user.splitlines()
    mixed = [label.format(r) + " " + ln for pair in zip(a, b) for r, ln in zip((1, 0), pair)]
    mixed += [label.format(1) + " " + ln for ln in a[len(b):]] + [label.format(0) + " " + ln for ln in b[len(a):]]
    found = explain_text("\n".join(mixed) + "\n", matcher=layer_alone())
    assert ("generic-import-source-tree", "imports") in [(f.rule, f.category) for f in found], found
    assert all(ln.process == "rank 1" for ln in found[0].lines)


def test_a_package_absent_from_a_script_outside_any_install_is_versions(tmp_path):
    # before: any import error raised in a file outside site-packages (every user's own script) was "imports"
    out = import_output(tmp_path, {"job/train.py": "import verl_doctor_absent_module\n"}, "import train",
                        pythonpath=str(tmp_path / "job"))
    assert f'File "{tmp_path}/job/train.py"' in out
    assert layer_verdict(out) == ("generic-missing-module", "versions")
    # a path the paste elided shows no tree (novasky_ai_skyrl_864 in the tuning part)
    elided = ('  File ".../skyrl_agent/auto.py", line 6, in <module>\n'
              "    from skyrl_agent.agents.mapping import AGENT_GENERATOR_REGISTRY\n"
              "ModuleNotFoundError: No module named 'skyrl_agent.agents'\n")
    assert layer_verdict(elided) == ("generic-missing-module", "versions")
    page = run_doctor("rules", "generic-import-source-tree")   # its page says what msg: and tree: are
    assert page.returncode == 0 and "`tree:PATH` an import failing inside the package it names" in page.stdout


def test_an_argument_the_namespace_lacks_is_config(tmp_path):
    # a library entry point handed a Namespace without one of its options (vLLM's build_app, SkyRL#1016)
    out = python_output("import argparse\nargs = argparse.ArgumentParser().parse_args([])\n"
                        "def build_app(args):\n    return args.disable_fastapi_docs\nbuild_app(args)\n", tmp_path)
    assert "AttributeError: 'Namespace' object has no attribute 'disable_fastapi_docs'" in out
    assert layer_verdict(out) == ("generic-config-error", "config")
    # any other object without the attribute stays the run's unknown exception
    other = out.replace("'Namespace' object", "'LLMEngine' object")
    assert layer_verdict(other) == ("generic-python-exception", "other")


def test_a_sequence_longer_than_the_settings_take_is_data(tmp_path):
    # verl's own check (utils/torch_functional.py postprocess_data, truncation='error'), raised for real
    out = python_output("import torch\nfrom verl.utils.torch_functional import postprocess_data\n"
                        "ids = torch.ones(1, 10, dtype=torch.long)\n"
                        "postprocess_data(ids, torch.ones_like(ids), max_length=4, pad_token_id=0, truncation='error')\n",
                        tmp_path)
    assert "sequence_length=10 is larger than max_length=4" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-sequence-too-long", "data")
    # vLLM's (v1/engine/processor.py) raised in a _validate_* check: data before config
    vllm = ('  File "/usr/lib/python3/site-packages/vllm/v1/engine/processor.py", line 380, in _validate_model_input\n'
            "    raise ValueError(\n"
            "ValueError: The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make "
            "sure that `max_model_len` is no smaller than the number of text tokens.\n")
    assert layer_verdict(vllm) == ("generic-sequence-too-long", "data")


@pytest.mark.parametrize("text", [
    # ray-project/ray#18771 (tuning part): Ray < 2's placeholder for a function the worker could not unpickle
    "2021-09-20 15:55:08,782\tERROR worker.py:80 -- Unhandled error (suppress with RAY_IGNORE_UNHANDLED_ERRORS=1): "
    "ray::fit_model() (pid=487, ip=10.0.19.47)\nRuntimeError: This function was not imported properly.\n",
    # ray/_private/function_manager.py (Ray 2): the same for a function, and for an actor class
    "ray.exceptions.RayTaskError(RuntimeError): ray::loop() (pid=15680, ip=10.0.0.3)\nRuntimeError: The remote "
    "function failed to import on the worker. This may be because needed library dependencies are not installed "
    "in the worker environment:\n",
    "(pid=77, ip=10.0.0.3) RuntimeError: The actor with name RewardActor failed to import on the worker. This may "
    "be because needed library dependencies are not installed in the worker environment:\n",
])
def test_a_function_the_worker_cannot_import_is_cluster(text):
    assert layer_verdict(text) == ("generic-ray-cluster", "cluster")


def test_an_operator_an_extension_should_have_registered_is_versions(tmp_path):
    # torch's dispatcher bindings (torch/csrc/utils/python_dispatch.cpp), as torchvision's _meta_registrations
    # reach them when torchvision's ops library did not load (pytorch/torchtitan#2959, tuning part)
    out = python_output("import torch\ntorch._C._dispatch_has_kernel_for_dispatch_key('torchvision_doctor::nms', 'Meta')\n",
                        tmp_path)
    assert "RuntimeError: operator torchvision_doctor::nms does not exist" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-version-mismatch", "versions")


def test_a_package_whose_build_fails_under_pip_is_versions(tmp_path):
    # a real pip building a real sdist whose setup.py imports a module of its tree that raises (deepspeed's
    # setup.py importing op_builder, DeepSpeed#7544 in the tuning part); nothing is installed
    src = tmp_path / "dsx-0.1"
    src.mkdir()
    (src / "setup.py").write_text("import op_builder\n")
    (src / "op_builder.py").write_text("@_disable_dynamo_if_unsupported\ndef adam():\n    pass\n")
    subprocess.run(["tar", "czf", "dsx-0.1.tar.gz", "dsx-0.1"], cwd=tmp_path, check=True)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-w", str(tmp_path / "wheels"), str(tmp_path / "dsx-0.1.tar.gz")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode != 0 and "NameError: name '_disable_dynamo_if_unsupported'" in r.stdout, r.stdout[-2000:]
    assert "/pip-req-build-" in r.stdout or "/pip-install-" in r.stdout
    assert layer_verdict(r.stdout) == ("generic-pip-resolution", "versions")
    # the build's own exception alone (pip's report cut off), through docker build's progress prefix
    tb = r.stdout[r.stdout.index("Traceback"):r.stdout.index("NameError")] + "NameError: name 'x' is not defined\n"
    assert layer_verdict("".join("#42 15.84 " + ln + "\n" for ln in tb.splitlines())) == \
        ("generic-pip-resolution", "versions")
    # pip's diagnostic line alone
    assert layer_verdict("  error: subprocess-exited-with-error\n") == ("generic-pip-resolution", "versions")


def test_a_batch_without_the_key_the_step_reads_is_data(tmp_path):
    (tmp_path / "training_batch.py").write_text(
        "class TrainingInputBatch(dict):\n    def __getitem__(self, key):\n        return super().__getitem__(key)\n")
    out = python_output("from training_batch import TrainingInputBatch\n"
                        "def forward_micro_batch(mb):\n    return mb['pixel_values']\n"
                        "forward_micro_batch(TrainingInputBatch(input_ids=[1, 2]))\n", tmp_path)
    assert "KeyError: 'pixel_values'" in out
    assert layer_verdict(out) == ("generic-data-schema", "data")


@pytest.mark.parametrize("text", [
    # vllm-project/vllm-ascend#12907 (tuning part): the registry's "errTitle(ErrCode):" with the message below it
    "aclnnQuantMatmulWeightNz failed, error code is 161002\nAclNN_Parameter_Error(EZ1001):\nTensor scale not "
    "implemented for DT_FLOAT16,\n",
    # vllm-project/vllm-ascend#7426 (tuning part): the error manager's detail line without its "Inner Error!" head
    "EZ9999[PID: 25038] 2026-03-17-08:21:12.001.372 (EZ9999):  HCCL_BUFFSIZE is too SMALL, maxBs = 256, h = 2048,\n",
])
def test_cann_codes_in_the_error_managers_other_forms(text):
    assert layer_verdict(text) == ("generic-cann-error-code", "other")


def test_a_bare_exception_line_that_ends_the_run_is_its_failure():
    # an exception line without its traceback (a launcher's stderr, a pasted excerpt): before, "nothing matched"
    found = explain_text("step:1 - loss:0.5\nRuntimeError: the server went away\n", matcher=layer_alone())
    assert [(f.rule, f.category) for f in found] == [("generic-python-exception", "other")]
    # not when training went on after it, and not over a rule's finding in the same log
    assert explain_text("RuntimeError: the server went away\nstep:2 - loss:0.4\n", matcher=layer_alone()) == []
    hccl = body("hccl-notify-wait-timeout--3.log")          # a bare RuntimeError above a rule's lines
    assert explain_text(hccl)[0].rule == "hccl-notify-wait-timeout"


def test_a_log_that_ends_inside_a_traceback_says_so(tmp_path):
    out = python_output("def get_head():\n    return next(n for n in [] if n)\nget_head()\n", tmp_path)
    assert out.rstrip().endswith("StopIteration")
    cut = out[:out.rindex("StopIteration")]                     # the paste stopped before the exception line
    found = explain_text(cut, matcher=layer_alone())
    assert [(f.rule, f.category) for f in found] == [("generic-traceback-cut", "other")]
    assert "Traceback (most recent call last)" in found[0].lines[0].text
    assert explain_text(cut)[0].rule == "generic-traceback-cut"   # with the rules too: no "nothing matched"
    # the whole traceback is the exception's, and a traceback followed by its exception line is not cut
    assert layer_verdict(out) == ("generic-python-exception", "other")
    assert layer_verdict(cut + "  File \"x.py\", line 1, in f\nKeyError: 'prompt'\n")[0] != "generic-traceback-cut"
    # Ray's header of a remote traceback, cut the same way
    ray = "ray.exceptions.RayTaskError: ray::WorkerDict.generate() (pid=7, ip=10.0.0.2, actor_id=ab)\n" + \
        cut[cut.index("  File "):]
    assert layer_verdict(with_ray_prefix(ray, "TaskRunner pid=3")) != ("generic-traceback-cut", "other")
    ray_only = "(TaskRunner pid=3) Unhandled error: ray::WorkerDict.generate() (pid=7, ip=10.0.0.2)\n" + \
        with_ray_prefix(cut[cut.index("  File "):], "TaskRunner pid=3")
    assert layer_verdict(ray_only) == ("generic-traceback-cut", "other")
    page = run_doctor("rules", "generic-traceback-cut")
    assert page.returncode == 0 and "when the log ends on it" in page.stdout


def test_a_block_boundary_before_the_exception_line_keeps_its_frames(tmp_path, monkeypatch):
    # blocks are cut after a newline: when one falls right before the exception line, its traceback
    # lies in the block before, and the line's context must come from there (the kept tail)
    out = python_output("def collate(b):\n    return b['input_ids']\ncollate({})\n", tmp_path)
    log = "".join(f"INFO step {i} loss 0.5\n" for i in range(400)) + out
    from matching import explain as ex
    whole = explain_text(log, matcher=layer_alone())[0]
    assert any("in collate" in ln.text for ln in whole.lines)
    at = log.encode().index(b"KeyError: 'input_ids'")
    monkeypatch.setattr(ex, "BLOCK_BYTES", at + 5)  # the first block ends just before that line
    cut = explain_text(log, matcher=layer_alone())[0]
    assert [(ln.n, ln.text) for ln in cut.lines] == [(ln.n, ln.text) for ln in whole.lines]


def test_a_cut_traceback_shows_where_the_run_was(tmp_path, monkeypatch):
    # the innermost frame and its source line come from the log's end, past the header the layer
    # keeps; with small blocks the frames lie in later blocks than the header, the last one short
    code = "".join(f"def load{k}(d):\n    return load{k + 1}(d)\n" for k in range(40))
    out = python_output(code + "def load40(d):\n    return d['shard']\nload0({})\n", tmp_path)
    lines = out.splitlines(keepends=True)
    inner = max(i for i, ln in enumerate(lines) if ln.startswith('  File "'))
    assert "in load40" in lines[inner]
    cut = "".join(lines[:inner + 2])                  # the paste stopped after the innermost frame
    log = "".join(f"INFO loading weights {i}\n" for i in range(300)) + cut
    from matching import explain as ex
    for block, tail in ((ex.BLOCK_BYTES, terminal.TAIL_BYTES), (4096, terminal.TAIL_BYTES), (1500, 1000), (1500, 300)):
        monkeypatch.setattr(ex, "BLOCK_BYTES", block)
        monkeypatch.setattr(terminal, "TAIL_BYTES", tail)
        f = explain_text(log, matcher=layer_alone())[0]
        assert f.rule == "generic-traceback-cut"
        texts = [ln.text for ln in f.lines]
        assert "Traceback (most recent call last)" in texts[0], block
        assert texts[1:] == [lines[inner].rstrip("\n"), lines[inner + 1].rstrip("\n")], (block, texts)
        assert [ln.n for ln in f.lines[1:]] == [log.count("\n") - 1, log.count("\n")], block


def cut_before_exception(out: str) -> str:
    """A real interpreter's traceback as a paste that stopped before its exception line."""
    lines = out.rstrip("\n").splitlines(keepends=True)
    assert lines and not lines[-1].startswith(" "), out
    return "".join(lines[:-1])


@pytest.mark.parametrize("code,category,said", [
    # torch/_ops.py _OpNamespace.__getattr__: no loaded library registered the operator
    ("import torch\ntorch.ops.doctor_ns.missing_op\n", "versions", "torch operator"),
    # torch.distributed's rendezvous: the store the peers meet at does not answer (a closed port)
    ("import datetime, torch.distributed as dist\n"
     "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:9', rank=1, world_size=2,\n"
     "                        timeout=datetime.timedelta(seconds=1))\n", "network", "communication group"),
    # Hugging Face datasets reading a data file that is not there
    ("import datasets\ndatasets.load_dataset('json', data_files='train-missing.json')\n", "data", "dataset"),
    # a module named for a dataset, its sample access called by torch's DataLoader
    ("import torch.utils.data as tud\nfrom rl_dataset import RLHFDataset\n"
     "next(iter(tud.DataLoader(RLHFDataset(), batch_size=1)))\n", "data", "dataset"),
])
def test_a_cut_traceback_is_read_by_the_phase_its_innermost_frames_name(tmp_path, code, category, said):
    (tmp_path / "rl_dataset.py").write_text(
        "class RLHFDataset:\n    def __len__(self):\n        return 1\n"
        "    def __getitem__(self, i):\n        return {'prompt': self.rows[i]['prompt']}\n")
    out = python_output(code, tmp_path)
    assert "Traceback (most recent call last)" in out, out
    cut = cut_before_exception(out)
    found = explain_text(cut, matcher=layer_alone())[0]
    assert (found.rule, found.category) == ("generic-traceback-cut", category), cut[-600:]
    assert said in found.title and found.cause.startswith("it stopped")
    # with its exception line the run's own exception decides, not the phase
    assert layer_verdict(out)[0] != "generic-traceback-cut"


def test_a_cut_traceback_in_no_known_phase_stays_other(tmp_path):
    # the frames of a script whose directory is named "dataset" (a mount) are no dataset code
    d = tmp_path / "dataset"
    d.mkdir()
    out = python_output("def head():\n    return next(n for n in [] if n)\nhead()\n", d)
    assert layer_verdict(cut_before_exception(out)) == ("generic-traceback-cut", "other")
    # vLLM re-allocating on wake_up (verl#302, its machine-printed lines) and ray.init starting a node (ray#3899)
    assert layer_verdict(body("generic-traceback-cut--vllm-wake-up.log")) == ("generic-traceback-cut", "memory")
    assert layer_verdict(body("generic-traceback-cut--ipython.log")) == ("generic-traceback-cut", "cluster")


def frames_cut(*frames: tuple[str, str]) -> str:
    """A traceback of (path, function) frames, cut before its exception line."""
    return "Traceback (most recent call last):\n" + "".join(
        f'  File "{p}", line 10, in {f}\n    call()\n' for p, f in frames)


def test_a_phase_is_named_by_the_package_not_by_a_directory_that_looks_like_it():
    site = "/opt/venv/lib/python3.11/site-packages"
    # a Windows path is read like any other
    assert layer_verdict(frames_cut(("C:\\app\\train.py", "<module>"),
                                    ("C:\\venv\\Lib\\site-packages\\torch\\_ops.py", "__getattr__"))) == \
        ("generic-traceback-cut", "versions")
    # verl's own vllm_rollout/ directory is not vLLM: its wake_up over vLLM's weight loading is no memory phase
    assert layer_verdict(frames_cut(("/verl/verl/workers/rollout/vllm_rollout/vllm_rollout.py", "wake_up"),
                                    (f"{site}/vllm/model_executor/model_loader/loader.py", "load_weights"))) == \
        ("generic-traceback-cut", "other")
    # Ray's node shutting down is not ray.init starting one
    assert layer_verdict(frames_cut((f"{site}/ray/_private/node.py", "kill_all_processes"))) == \
        ("generic-traceback-cut", "other")
    assert layer_verdict(frames_cut((f"{site}/ray/_private/node.py", "start_head_processes"))) == \
        ("generic-traceback-cut", "cluster")


def test_a_directory_named_like_ray_is_not_ray():
    # generic-ray-cluster takes an exception raised in Ray's own files, not in a project's "xray/scripts/"
    exc = 'Traceback (most recent call last):\n  File "/home/u/xray/scripts/prep.py", line 3, in <module>\n' \
          "    load()\nValueError: bad row 3\n"
    assert layer_verdict(exc) == ("generic-python-exception", "other")
    ray = exc.replace("/home/u/xray/scripts/prep.py", "/usr/lib/python3.6/site-packages/ray/node.py")
    assert layer_verdict(ray) == ("generic-ray-cluster", "cluster")


def test_phases_belong_to_a_cut_class(tmp_path):
    path = tmp_path / "generic.toml"
    path.write_text('[[class]]\nid = "x"\ncategory = "data"\ntitle = "t"\ncause = "c"\nfix = "f"\nconfidence = 0.3\n'
                    'references = ["https://x"]\nexceptions = ["KeyError"]\n'
                    'phases = [{ frames = "x", category = "data", meaning = "m" }]\n')
    with pytest.raises(CatalogError, match="cut class"):
        terminal.load_generic(path)
    page = run_doctor("rules", "generic-traceback-cut")
    assert "torch/_ops" in page.stdout and "network" in page.stdout


def test_an_excerpt_of_frames_only_that_the_log_ends_in_is_a_cut_traceback(tmp_path):
    # a paste from the middle of a traceback: no header, no exception line, nothing else (before: "nothing matched")
    out = python_output("def load(d):\n    return d['shard']\ndef main():\n    load({})\nmain()\n", tmp_path)
    lines = out.splitlines(keepends=True)
    frames = [ln for ln in lines if not ln.startswith(("Traceback", "KeyError"))]
    assert frames and frames[0].startswith('  File "'), out
    found = explain_text("".join(frames), matcher=layer_alone())
    assert [(f.rule, f.category) for f in found] == [("generic-traceback-cut", "other")]
    inner = max(i for i, ln in enumerate(frames) if ln.startswith('  File "'))
    assert "in load" in frames[inner] and frames[inner].rstrip("\n") in [ln.text for ln in found[0].lines]
    assert explain_text("".join(frames))[0].rule == "generic-traceback-cut"      # with the rules too
    # with its exception line it is that exception's, and a log with more than frames is not read this way
    assert layer_verdict("".join(frames) + "KeyError: 'shard'\n")[0] != "generic-traceback-cut"
    assert explain_text("".join(frames) + "INFO step:2 done\n", matcher=layer_alone()) == []


def test_a_stack_printed_on_purpose_at_the_end_is_no_cut_traceback(tmp_path):
    # logging's stack_info prints frames under "Stack (most recent call last):" and the program goes on
    out = python_output("import logging\nlogging.basicConfig()\ndef f():\n    logging.warning('slow step', stack_info=True)\nf()\n",
                        tmp_path)
    assert "Stack (most recent call last):" in out and out.rstrip().splitlines()[-1].startswith("    "), out
    assert explain_text(out, matcher=layer_alone()) == []


def test_a_log_that_ends_in_a_line_longer_than_the_tail_keeps_no_frames_before_it(tmp_path, monkeypatch):
    # the file ends in that long line (a progress bar's carriage returns, a JSON dump), not in the frames
    out = python_output("def load(d):\n    return d['shard']\nload({})\n", tmp_path)
    frames = "".join(ln for ln in out.splitlines(keepends=True) if not ln.startswith(("Traceback", "KeyError")))
    from matching import explain as ex
    monkeypatch.setattr(ex, "BLOCK_BYTES", 1200)
    monkeypatch.setattr(terminal, "TAIL_BYTES", 600)
    assert explain_text("INFO start\n" * 200 + frames, matcher=layer_alone())[0].rule == "generic-traceback-cut"
    assert explain_text("INFO start\n" * 200 + frames + "x" * 1500 + "\n", matcher=layer_alone()) == []


def test_ipythons_traceback_is_read(tmp_path):
    # IPython's header names the type with no colon, its frames are "path in func(...)" (core/ultratb.py);
    # a notebook cell's output cut before its exception line (ray-project/ray#3899, tuning part)
    found = explain_text(body("generic-traceback-cut--ipython.log"), matcher=layer_alone())
    assert [(f.rule, f.category) for f in found] == [("generic-traceback-cut", "cluster")]
    assert "PermissionError" in found[0].lines[0].text and "ray/worker.py in init(" in found[0].lines[1].text
    # the exception line after the frames makes it that exception's, raised where the frames say
    full = body("generic-traceback-cut--ipython.log") + "\nPermissionError: [Errno 13] Permission denied: '/tmp/ray'\n"
    assert layer_verdict(full) == ("generic-path-permission", "other")


def test_a_type_of_an_errors_module_is_read_whatever_its_ending(tmp_path):
    # omegaconf.errors.MissingMandatoryValue ends in neither Error nor Exception: before, no event at all
    out = python_output("from omegaconf import OmegaConf\n"
                        "OmegaConf.create({'data': {'train_files': '???'}}).data.train_files\n", tmp_path)
    assert "omegaconf.errors.MissingMandatoryValue: Missing mandatory value: data.train_files" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-config-error", "config")


def test_torchelastic_error_record_names_the_exception(tmp_path):
    # the record torchelastic's ErrorHandler writes for a real RendezvousConnectionError, logged as indented JSON
    # (torch 1.x's error_handler logged it so when no error file was set; pytorch/pytorch#67547 in the tuning part)
    out = python_output(
        "import json, os, logging\n"
        "os.environ['TORCHELASTIC_ERROR_FILE'] = os.path.abspath('error.json')\n"
        "from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler\n"
        "from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError\n"
        "try:\n    raise RendezvousConnectionError('The connection to the C10d store has failed. See inner exception.')\n"
        "except RendezvousConnectionError as exc:\n    ErrorHandler().record_exception(exc)\n"
        "logging.basicConfig()\n"
        "logging.getLogger('torch.distributed.elastic.multiprocessing.errors.error_handler').error(\n"
        "    json.dumps(json.load(open('error.json')), indent=2))\n", tmp_path)
    assert '"message": "RendezvousConnectionError: The connection to the C10d store has failed.' in out, out[-1500:]
    assert layer_verdict(out) == ("generic-connection", "network")


def test_a_model_path_transformers_cannot_find_is_workdir():
    # transformers' utils/hub.py cached_file (its format string, as printed for a relative model path)
    text = ("OSError: models/Qwen2.5-7B-Instruct is not a local folder and is not a valid model identifier listed on "
            "'https://huggingface.co/models'\nIf this is a private repository, make sure to pass a token having "
            "permission to this repo either by logging in with `hf auth login` or by passing `token=<your_token>`\n")
    assert layer_verdict(text) == ("generic-path-not-found", "workdir")


def excerpt_from(out: str, marker: str) -> str:
    """What users paste: the output from the exception line on (no frames)."""
    return out[out.index(marker):]


def test_pyarrows_invalid_file_is_data(tmp_path):
    (tmp_path / "train.parquet").write_text("x")
    out = python_output(f"import pyarrow.parquet as pq\npq.read_table('{tmp_path}/train.parquet')\n", tmp_path)
    assert "pyarrow.lib.ArrowInvalid: " in out, out[-1500:]
    assert layer_verdict(out) == ("generic-data-schema", "data")          # before: no event at all
    assert layer_verdict(excerpt_from(out, "pyarrow.lib.ArrowInvalid")) == ("generic-data-schema", "data")


def test_hydra_and_omegaconf_errors_are_theirs_without_frames(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "ppo_trainer.yaml").write_text("actor:\n  lr: 1.0e-6\n")
    override = python_output("from hydra import initialize, compose\n"
                             "with initialize(version_base=None, config_path='conf'):\n"
                             "    compose('ppo_trainer', overrides=['actor.use_remove_padding=true'])\n", tmp_path)
    assert "ConfigCompositionException" in override, override[-1500:]
    assert layer_verdict(override) == ("generic-config-error", "config")
    assert layer_verdict(excerpt_from(override, "hydra.errors.ConfigCompositionException")) == \
        ("generic-config-error", "config")
    missing = python_output("from hydra import initialize, compose\n"
                            "with initialize(version_base=None, config_path='conf'):\n    compose('grpo_trainer')\n",
                            tmp_path)
    assert "hydra.errors.MissingConfigException: Cannot find primary config 'grpo_trainer'" in missing
    assert layer_verdict(excerpt_from(missing, "hydra.errors.MissingConfigException")) == \
        ("generic-path-not-found", "workdir")


def test_a_reward_function_without_the_data_source_is_data(tmp_path):
    out = python_output("from verl.utils.reward_score import default_compute_score\n"
                        "default_compute_score('doctor/unknown', 'x', 'y')\n", tmp_path)
    assert "NotImplementedError: Reward function is not implemented for data_source=" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-data-schema", "data")
    # the release that printed it unquoted, without frames (issue 12's own example)
    assert layer_verdict("NotImplementedError: Reward function is not implemented for data_source=gsm8k_doctor\n") == \
        ("generic-data-schema", "data")


@pytest.mark.parametrize("text,cid,category", [
    # transformers 4.x's lazy module (utils/import_utils.py _LazyModule._get_module), the ImportError on the next line
    ("RuntimeError: Failed to import transformers.models.qwen2.modeling_qwen2 because of the following error (look "
     "up to see its traceback):\ncannot import name 'is_torch_greater_or_equal' from 'transformers.utils'\n",
     "generic-missing-module", "versions"),
    # pip's PEP 668 refusal (pip/_internal/exceptions: ExternallyManagedEnvironment)
    ("error: externally-managed-environment\n\n× This environment is externally managed\n", "generic-pip-resolution",
     "versions"),
])
def test_import_and_install_refusals_from_their_printing_source(text, cid, category):
    assert layer_verdict(text) == (cid, category)


@pytest.mark.parametrize("text,cid,category", [
    # verl/workers/config/actor.py validate: a check that names the settings it compares, without frames
    ("ValueError: train_batch_size (16) must be >= actor.ppo_mini_batch_size (32)", "generic-config-error", "config"),
    # verl's own version requirements (models/mcore patching, rollout routing replay, the NPU profiler)
    ("AssertionError: Fused forward patching requires mecore >= 0.13.0", "generic-version-mismatch", "versions"),
    ("RuntimeError: rollout.enable_rollout_routing_replay=True requires vLLM >= 0.22.0 (installed: 0.11.0). Upgrade "
     "vLLM (e.g. `pip install -U 'vllm>=0.22.0'`) or disable enable_rollout_routing_replay.", "generic-version-mismatch",
     "versions"),
    ("RuntimeError: torch_npu==2.1 or higher is required to use mstx_domain_exclude", "generic-version-mismatch",
     "versions"),
])
def test_settings_and_version_requirements_named_in_the_message(text, cid, category):
    assert layer_verdict("step:0 - starting\n" + text + "\n") == (cid, category)


@pytest.mark.parametrize("code,category", [("7", "network"), ("11", "network"), ("1", "config"), ("3", "memory"),
                                           ("5", "versions"), ("15", "other")])
def test_hccl_result_codes_are_a_family(code, category):
    # torch_npu's HCCL_CHECK_ERROR (torch_npu/csrc/distributed/HCCLUtils.hpp), HcclResult from CANN's hccl_types.h
    text = ("RuntimeError: createHCCLComm:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:1508 HCCL function error: "
            f"HcclGetRootInfo(&hcclID), error code is {code}\n")
    assert layer_verdict(text) == ("generic-hccl-error", category)


@pytest.mark.parametrize("line,category", [
    # HCCL's own log: CHK_RET passes the HcclResult up unchanged and traces it (pub_inc/log.h "call trace: hcclRet -> %d")
    ("[ERROR] HCCL(705,python):2026-02-11-06:09:23.236.373 [config.cc:61] [737][CfgGetClusterInfo]call trace: hcclRet -> 1",
     "config"),
    ("[ERROR] HCCL(705,python):2026-02-11-06:09:23.236.373 [op_base.cc:61] [737][InitComm]call trace: hcclRet -> 9", "network"),
    # a rank table HCCL could not read (topoinfo_ranktable*.cc): the file's content or the device IPs it lists
    ("[ERROR] HCCL(705,python):2026-02-11-06:09:23.236.320 [topoinfo_ranktableConcise.cc:446] [737][Get][SingleDeviceIp]"
     "'device_ip' is not set correctly,must be set when multi Server or HCCL_INTRA_ROCE_ENABLE enabled", "config"),
    # the links, though a line names the device IPs it waits on
    ("[ERROR] HCCL(14830,python3.1):2026-02-09-11:31:31.825.623 [hccl_socket_manager.cc:816][14263][Wait][LinkEstablish]"
     "wait socket establish timeout, role[1] rank[1] device_ip[192.168.1.8] timeout[120 s]", "network"),
    # any other line of its own log: the links between the ranks
    ("[ERROR] HCCL(14830,python3.1):2026-02-09-11:31:31.825.623 [hccl_socket_manager.cc:816][14263][Wait][LinkEstablish]"
     "wait socket establish timeout, role[1] rank[1] timeout[120 s]", "network"),
    # a collective's task that timed out while it ran (CANN 8.5+ keywords): the ranks out of step, not a link
    ("[ERROR] HCCL(4021,python3.11):2026-03-02-10:04:11.102.377 [task_exception_handler.cc:771] [4090][TaskExecStage]"
     "[Timeout][Host]Task run failed, groupRank information is group:[10.0.0.1%eth0_60000_0_1772445851102], "
     "user define information[], rankSize[8], rankId[3].", "other"),
])
def test_hccls_own_error_lines_are_read_by_their_result_or_their_words(line, category):
    assert layer_verdict(line + "\n") == ("generic-hccl-error", category)


@pytest.mark.parametrize("line,cid,category", [
    # the HCCLCHECK / ACLCHECK macros of hccl_test and CANN's samples: printf("hccl interface return err %s:%d,
    # retcode: %d \n", ...); the run then prints its own "This is an error in init_hcclComm."
    ("hccl interface return err ./common/src/hccl_test_common.cc:503, retcode: 11 ", "generic-hccl-error", "network"),
    ("[ERROR] hccl interface return err sample.cc:88, retcode: 1", "generic-hccl-error", "config"),
    ("acl interface return err ./common/src/hccl_test_common.cc:412, retcode: 207018 ", "generic-acl-runtime-result",
     "memory"),
])
def test_the_check_macros_of_cann_samples_and_hccl_test_are_read_by_their_code(line, cid, category):
    text = "the minbytes is 8192, maxbytes is 67108864, iters is 20, warmup_iters is 5\n" + line + "\n"
    assert layer_verdict(text + "This is an error in init_hcclComm.\n") == (cid, category)


# the runtime's own log of a failed driver call names its result as ErrCode= with the result's description
@pytest.mark.parametrize("line,category", [
    ("[ERROR] RUNTIME(27271,python3.10):2026-02-27-16:24:15.595.677 [npu_driver.cc:1534]34603 DevMemAllocHugePageManaged:"
     "[drv api] halMemAlloc failed:size=2122688(bytes), type=2, moduleId=3, drvFlag=216172782123369479, drvRetCode=6, "
     "device_id=7, ErrCode=207001, desc=[driver error:out of memory], InnerCode=0x7020016", "memory"),
    ("[ERROR] RUNTIME(3093,python3.10):2026-02-27-16:30:02.114.201 [api_c.cc:127]3093 rtDevBinaryRegister:ErrCode=507032, "
     "desc=[program register num out of use], InnerCode=0x7090007", "other"),
])
def test_the_runtimes_errcode_is_read_by_its_range(line, category):
    assert layer_verdict(line + "\n") == ("generic-acl-runtime-result", category)


def test_a_checkpoint_torch_loads_only_as_weights_is_versions(tmp_path):
    out = python_output("import torch\nclass Box:\n    pass\n"
                        f"torch.save({{'b': Box()}}, '{tmp_path}/ck.pt')\ntorch.load('{tmp_path}/ck.pt')\n", tmp_path)
    assert "UnpicklingError: Weights only load failed." in out, out[-1500:]
    assert layer_verdict(out) == ("generic-version-mismatch", "versions")


def test_a_package_the_message_says_is_missing_is_versions():
    # vLLM's attention backend selector (a ValueError, not an ImportError)
    text = ("ValueError: Cannot use FlashAttention-2 backend because the flash_attn package is not found. Make sure "
            "that flash_attn was built and installed (on an ampere GPU).\n")
    assert layer_verdict("step:0 - starting\n" + text) == ("generic-missing-module", "versions")


def test_a_full_disk_printed_by_pip_is_workdir():
    import os
    text = f"ERROR: Could not install packages due to an OSError: [Errno 28] {os.strerror(28)}\n"
    assert layer_verdict(text) == ("generic-path-permission", "other")


def test_a_rank_waiting_for_rank0s_nccl_id_is_a_consequence(tmp_path):
    # ProcessGroupNCCL.cpp broadcastUniqueNCCLID: rank 1 got nothing from the store; rank 0's own error is the cause
    waiting = ("torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId "
               "from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout\n")
    assert layer_verdict(waiting) == ("generic-peer-failure", "cluster")
    a, b = tmp_path / "rank1.log", tmp_path / "rank0.log"
    a.write_text(waiting)
    b.write_text(body("generic-data-file-not-found.log"))
    from matching.explain import explain_report
    assert explain_report([str(a), str(b)], matcher=layer_alone()).findings[0].rule == "generic-data-file-not-found"


def test_a_package_asking_its_own_module_for_what_it_lacks_is_not_a_version_mismatch(tmp_path):
    files = {"lib/sp_doc/__init__.py": "", "lib/sp_doc/parallel_state.py": "def get_sequence_parallel_rank():\n    return 0\n",
             "lib/sp_doc/engine.py": "from sp_doc import parallel_state as mpu\ndef save():\n    return mpu.get_model_parallel_rank()\n",
             "lib/np_doc/__init__.py": "def __getattr__(name):\n    raise AttributeError(f\"module 'np_doc' has no attribute {name!r}\")\n"}
    # DeepSpeed#7649's shape (tuning part): the package's own engine calls its own mpu's missing function
    own = import_output(tmp_path, files, "import sp_doc.engine\nsp_doc.engine.save()", pythonpath=str(tmp_path / "lib"))
    assert "AttributeError: module 'sp_doc.parallel_state' has no attribute 'get_model_parallel_rank'" in own, own
    assert layer_verdict(own) == ("generic-python-exception", "other")
    # another package's code asking: two versions that do not go together (numpy's module __getattr__ raising)
    other = import_output(tmp_path, {"job/train.py": "import np_doc\ndef run():\n    return np_doc.product([2])\n"},
                          "import train\ntrain.run()", pythonpath=f"{tmp_path / 'lib'}:{tmp_path / 'job'}")
    assert "AttributeError: module 'np_doc' has no attribute 'product'" in other, other
    assert layer_verdict(other) == ("generic-api-mismatch", "versions")


def killed_by(signame: str) -> tuple[str, str]:
    """A real interpreter killed by the signal, as Python's faulthandler and as the shell report it."""
    code = f"import os, signal; os.kill(os.getpid(), signal.{signame})"
    fh = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=60).stdout
    sh = subprocess.run(["bash", "-c", f"{sys.executable} -c '{code}'\necho next"], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=60).stdout
    return fh, sh


def test_a_bus_error_is_shared_memory_run_out():
    # a real SIGBUS (before: a native crash, "other")
    fh, sh = killed_by("SIGBUS")
    assert "Fatal Python error: Bus error" in fh, fh
    assert layer_verdict(fh) == ("generic-out-of-memory", "memory")
    assert " Bus error " in sh, sh
    assert layer_verdict(sh) == ("generic-out-of-memory", "memory")
    # a segmentation fault stays a native crash
    assert layer_verdict(fh.replace("Bus error", "Segmentation fault")) == ("generic-native-crash", "other")


def test_nccl_info_lines_are_no_failure_unless_they_trace_an_error_result():
    ok = ("node1:2330:2658 [2] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
          "node1:2330:2658 [2] NCCL INFO Channel 00/02 :    0   1\n"
          "node1:2330:2658 [2] NCCL INFO init.cc:1400 -> 7 [Async thread]\n")   # 7: ncclInProgress, no error
    assert explain_text(ok, matcher=layer_alone()) == []


def test_a_local_package_beside_the_script_that_lacks_a_name_is_a_shadowing_tree(tmp_path):
    # a real directory named like an installed package (Hugging Face datasets) beside the file that
    # imports it: the script's directory comes first on sys.path, the local one is imported
    pkg = tmp_path / "datasets"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tasks.py").write_text("import helpers\ndef run():\n    return helpers.load('gsm8k')\n")
    (tmp_path / "helpers.py").write_text("import datasets\ndef load(name):\n    return datasets.load_dataset(name)\n")
    out = python_output("from datasets import tasks\ntasks.run()\n", tmp_path)
    assert "AttributeError: module 'datasets' has no attribute 'load_dataset'" in out, out
    assert explain_text(out)[0].rule == "generic-import-source-tree"       # over the rule for another release
    # without the local directory the installed package itself lacks the name: another release's API
    shutil.rmtree(pkg)
    out = python_output("import datasets\ndatasets.load_datasets_v9('gsm8k')\n", tmp_path)
    assert "has no attribute 'load_datasets_v9'" in out, out
    assert explain_text(out)[0].rule == "library-module-lacks-attribute"


def test_a_file_named_like_a_standard_module_that_the_standard_library_imports_shadows_it(tmp_path):
    # a real ./dis.py beside the script: inspect's `import dis` loads it, and it finds inspect half-initialized
    (tmp_path / "dis.py").write_text("import inspect\nSOURCE = inspect.getsource\n")
    out = python_output("import inspect\n", tmp_path)
    assert "inspect.py" in out and "dis.py" in out and "AttributeError" in out, out
    assert layer_verdict(out) == ("generic-import-source-tree", "imports")
    # a script of the same name that nothing in the standard library imported is no shadow
    out = python_output("import json\njson.no_such_name\n", tmp_path, name="code.py")
    assert layer_verdict(out) != ("generic-import-source-tree", "imports")
    # nor a script the standard library runs (cProfile's runctx, runpy): its frames are no module's top
    prof = tmp_path / "prof"   # away from the ./dis.py above
    prof.mkdir()
    (prof / "trace.py").write_text("import pyarrow\npyarrow.no_such_thing_x\n")
    out = subprocess.run([sys.executable, "-m", "cProfile", "trace.py"], cwd=prof, capture_output=True,
                         text=True, timeout=120).stderr
    assert "cProfile.py" in out and "trace.py" in out, out
    assert explain_text(out)[0].rule == "library-module-lacks-attribute"
    # a local package of a standard module's name (./email/), imported by the standard library (http.client)
    (prof / "email").mkdir()
    (prof / "email" / "__init__.py").write_text("import inspect\nX = inspect.no_such_name\n")
    out = python_output("import http.client\n", prof)
    assert "http/client.py" in out and "email/__init__.py" in out, out
    assert layer_verdict(out) == ("generic-import-source-tree", "imports")
    # IPython 7's frames ("/path/x.py in <module>()"): torch imported from its source checkout (pytorch#11222)
    assert explain_text(body("generic-import-source-tree--ipython.log"))[0].rule == "generic-import-source-tree"


def test_a_line_printed_at_info_level_counts_only_where_a_class_says_so(tmp_path):
    # the generic layer's data decides it (a class's `at_info`), not a pattern of its own in the code
    trace = "node1:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2\n"
    assert layer_verdict(trace) == ("generic-nccl-error", "network")
    text = terminal.GENERIC_FILE.read_text()
    assert "at_info = [" in text
    stripped = tmp_path / "generic.toml"
    # the same pattern as a plain line of the class: flagged, but an INFO line is no failure then
    as_line = text.replace('"]\n# the trace is printed at INFO level, which otherwise marks a line as no failure\nat_info = [', '",\n         ', 1)
    assert as_line != text
    stripped.write_text(as_line)
    g = terminal.load_generic(stripped)
    nccl = g.by_id("generic-nccl-error")
    assert g.at_info() == () and any("-> [1-6]" in p for p in nccl.lines) and terminal.generic().at_info()
    assert explain_text(trace, matcher=Matcher([], g)) == []


def test_an_illegal_instruction_is_a_build_for_another_cpu():
    # a real SIGILL: the signal family's member says which (before: faulthandler's form was no finding
    # at all, the shell's "Illegal instruction" neither)
    fh, sh = killed_by("SIGILL")
    assert "Fatal Python error: Illegal instruction" in fh, fh
    assert layer_verdict(fh) == ("generic-native-crash", "versions")
    assert "Illegal instruction" in sh, sh
    assert layer_verdict(sh) == ("generic-native-crash", "versions")
    found = explain_text(sh, matcher=layer_alone())[0]
    assert "SIGILL" in found.title and "lscpu" in found.fix
    # the same family keeps a segmentation fault and an abort "other"
    assert layer_verdict(fh.replace("Illegal instruction", "Segmentation fault")) == ("generic-native-crash", "other")
    assert layer_verdict(sh.replace("Illegal instruction", "Aborted")) == ("generic-native-crash", "other")


def test_hccls_own_error_log_line_is_network():
    # HCCL's documented fault (hicann/hccl docs/zh/user_guide/fault_diagnosis/cluster_info_nego.md, tuning part)
    text = ("[ERROR] HCCL(1041081,all_reduce_test):2025-11-21-01:20:01.624.966 [topoinfo_exchange_server.cc:314] "
            "[1041362][InitGroupStage][RanktableDetect]topo exchange server get socket timeout! timeout[120 s]\n")
    assert layer_verdict(text) == ("generic-hccl-error", "network")


def test_a_module_the_worker_cannot_unpickle_is_cluster():
    # ray-project/ray#1161 (tuning part): the actor class's module existed on the head machine only
    text = ("Traceback (most recent call last):\n"
            '  File "/home/ubuntu/anaconda3/envs/py35/lib/python3.5/site-packages/ray/actor.py", line 114, in '
            "fetch_and_register_actor\n    unpickled_class = pickle.loads(pickled_class)\n"
            "ImportError: No module named 'ppo_driver2'\n")
    assert layer_verdict(text) == ("generic-ray-cluster", "cluster")
    # the same import elsewhere in Ray's code is still a package missing
    assert layer_verdict(text.replace("ray/actor.py", "ray/util/collective.py")) == ("generic-missing-module", "versions")


def test_an_exception_inside_one_installed_package_called_by_another_is_versions(tmp_path):
    # libb's code fails on what liba hands it: two releases that do not go together. The same
    # failure called from the user's own script is that script's bug, the run's unknown exception.
    site = tmp_path / "env" / "lib" / "site-packages"
    for pkg, body in (("libb", "def run(cfg):\n    return cfg.max_len + 1\n"),
                      ("liba", "import libb\n\ndef go():\n    return libb.run(object())\n")):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text(body)
    head = f"import sys\nsys.path.insert(0, {str(site)!r})\n"
    out = python_output(head + "import liba\nliba.go()\n", tmp_path)
    assert "AttributeError: 'object' object has no attribute 'max_len'" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-api-mismatch", "versions")
    mine = python_output(head + "import libb\nlibb.run(object())\n", tmp_path, name="mine.py")
    assert layer_verdict(mine) == ("generic-python-exception", "other")


@pytest.mark.parametrize("rows, words", [
    ("[torch.zeros(5), torch.zeros(7)]", "stack expects each tensor to be equal size"),   # prompts not padded alike
    ("[{'image': None}, {'image': None}]", "batch must contain tensors"),                  # a field the rows lack
])
def test_samples_the_dataloader_cannot_batch_are_data(tmp_path, rows, words):
    out = python_output(f"import torch\nfrom torch.utils.data import DataLoader\nrows = {rows}\n"
                        "next(iter(DataLoader(rows, batch_size=2)))\n", tmp_path)
    assert words in out and "torch/utils/data/_utils/collate.py" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-data-schema", "data")


def test_a_name_that_does_not_resolve_is_network_whatever_the_type(tmp_path):
    # torch 1.x's TCPStore raised ValueError("host not found: " + gai_strerror) for MASTER_ADDR
    out = python_output("import socket\ntry:\n    socket.getaddrinfo('doctor-master.invalid', 29500)\n"
                        "except socket.gaierror as e:\n    raise ValueError(f'host not found: {e.strerror}') from None\n",
                        tmp_path)
    assert "ValueError: host not found: Name or service not known" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-connection", "network")


def test_an_interface_that_does_not_exist_is_network(tmp_path):
    # what a launcher meets looking up NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME by name
    out = python_output("import socket\nsocket.if_nametoindex('doctor0')\n", tmp_path)
    assert "OSError: no interface with this name" in out, out[-1500:]
    assert layer_verdict(out) == ("generic-connection", "network")


@pytest.mark.skipif(not can_unshare(), reason="needs a mount namespace (root) for a small /dev/shm")
def test_shared_memory_full_is_memory_not_a_full_disk(tmp_path):
    # a container's small /dev/shm, for real: tensors shared between processes live there
    (tmp_path / "share.py").write_text("import torch\ntorch.zeros(4 << 20).share_memory_()\n")
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        f"mount -t tmpfs -o size=1M tmpfs /dev/shm && {sys.executable} share.py"],
                       cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert r.returncode != 0 and "</torch_" in r.stdout and "No space left on device" in r.stdout, r.stdout[-1500:]
    assert layer_verdict(r.stdout) == ("generic-out-of-memory", "memory")


# ---------------------------------------------------------------------------------------------
# The log's closing error line (generic-error-line): read from its last lines, nothing flagged


@pytest.mark.parametrize("text,category", [
    # Slurm (src/common/log.c), a daemon that gives up
    ("slurmd: error: cpu cgroup controller is not available.\nslurmd: fatal: Unable to initialize jobacct_gather",
     "other"),
    # Ansible's default callback, as ascend-deployer runs it
    ('fatal: [10.0.0.9]: FAILED! => {"changed": false, "msg": "pull failed, check whether the docker proxy is set"}',
     "network"),
    # CANN's TBE compiler and CANN's log
    ("[ERROR] TBE Subprocess[task_distribute] raise error[], main process disappeared!", "other"),
    ("[ERROR] RUNTIME(3241,python):2026-11-30-10:01:02.123.456 [mem.cc:88] out of device memory", "memory"),
    # SkyPilot's launcher (sky/sky_logging.py), glog's FATAL, Open MPI's runtime
    ("E 10-09 17:42:55 provisioner.py:740] Failed to set up SkyPilot runtime on cluster.", "other"),
    ("F1130 10:01:02.123456  4242 raylet.cc:120] The raylet could not reach the GCS", "cluster"),
    ("[node1:12508] [[25215,0],1] ORTE_ERROR_LOG: Data unpack would read past end of buffer in file x.c at line 1",
     "other"),
    ("CRITICAL:sglang:the installed flashinfer version 0.1 is not compatible", "versions"),
    # MindIE's own format (it prints it: "[yyyy-mm-dd hh:mm:ss.uuuuuu] [processid] [threadid] [llm] [loglevel] [file:line]")
    ("[2026-05-14 18:06:16.762] [34] [281473586159104] [llm] [ERROR] [llm_manager_impl.cpp:846] Config manager init "
     "exception: NotImplementedError: unsupported model type: qwen3_vl_moe", "other"),
    ("[2026-05-14 18:06:16.762] [34] [281473586159104] [llm] [ERROR] [grpc_client.cpp:120] connect to 10.0.0.2:1025 "
     "failed: Connection refused", "network"),
])
def test_a_tools_closing_error_line_is_how_the_run_ended(text, category):
    top = explain_text("step:0 - starting\n" + text + "\n\nbye\n", matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-error-line", category)


def test_glogs_stack_after_its_fatal_line_does_not_push_it_out_of_the_last_lines():
    stack = "*** Check failure stack trace: ***\n" + "".join(f"    @     0x7f3a{i:08x}  (unknown)\n" for i in range(12))
    top = explain_text("F1130 10:01:02.123456  4242 object_manager.cc:120] Check failed: the GCS is unreachable\n"
                       + stack, matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-error-line", "network")


def test_rays_check_failure_is_a_fatal_line_though_its_message_starts_with_a_space():
    # RAY_CHECK streams " Check failed: " after glog's "] " (src/ray/util/logging.h): two spaces before the message
    top = explain_text("F0528 14:53:04.237076   138 service_based_accessor.cc:320]  Check failed: !local_node_id_.IsNil() "
                       "This node is disconnected.\n*** Check failure stack trace: ***\n"
                       "    @     0x55bb8f0f676d  google::LogMessage::Fail()\n", matcher=layer_alone())[0]
    assert top.rule == "generic-error-line" and top.title.endswith("This node is disconnected. (another failure)")


@pytest.mark.parametrize("detail,category", [
    ("Error: Rank -1 received an Exception. Detailed message: host not found: Name or service not known", "network"),
    ("Reason: the raylet died; the node's placement group was removed", "cluster"),
    ("giving up", "other"),                      # the detail names no kind: the error line's own catch-all stays
])
def test_the_detail_a_tool_prints_under_its_error_line_names_the_kind(detail, category):
    top = explain_text("INFO Using TCPStore for c10d::Store implementation\n"
                       "[ERROR] 2020-01-17 00:55:01,724 coordinator_p2p: Rank: -1\n" + detail + "\n",
                       matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-error-line", category)
    assert (detail in [ln.text for ln in top.lines]) == (category != "other")   # shown when it named the kind


def test_an_error_line_whose_own_words_name_the_kind_keeps_it_over_its_detail():
    detail = "Detailed message: host not found: Name or service not known\n"   # network's words, under one naming none
    assert layer_verdict("[ERROR] RUNTIME(3241,python):2026 [x.cc:8] the task failed\n" + detail)[1] == "network"
    top = explain_text("[ERROR] RUNTIME(3241,python):2026-11-30-10:01:02.123.456 [mem.cc:88] out of device memory\n"
                       + detail, matcher=layer_alone())[0]
    assert (top.rule, top.category) == ("generic-error-line", "memory")


@pytest.mark.parametrize("later", [
    "WARNING: the installed version of foo is old",             # a warning is no detail
    "(raylet) Shutting down the raylet",                         # another process's line
    "exiting\nshutting down\nhost not found: Name or service not known",   # beyond the lines right under it
])
def test_what_is_not_the_detail_under_an_error_line(later):
    text = "INFO starting\n[ERROR] 2020-01-17 00:55:01,724 coordinator_p2p: Rank -1 failed\n" + later + "\n"
    assert layer_verdict(text) == ("generic-error-line", "other")


@pytest.mark.parametrize("after", ["...ignoring", "PLAY RECAP ****\nnode1 : ok=3 changed=1 unreachable=0 failed=0 "
                                                 "skipped=0 rescued=0 ignored=1"])
def test_an_ansible_failure_it_was_told_to_ignore_is_no_run_end(after):
    play = ('TASK [probe] ****\nfatal: [node1]: FAILED! => {"changed": false, "msg": "no proxy"}\n' + after + "\n")
    assert explain_text(play) == []


def test_the_closing_lines_words_in_the_title_are_redacted():
    top = explain_text('fatal: [n1]: FAILED! => {"msg": "login with token=hf_AbCdEfGhIjKlMnOpQrStUvWx12 failed"}\n')[0]
    assert top.rule == "generic-error-line" and "hf_AbCd" not in top.title and "token=" in top.title


def test_a_real_loggers_critical_line_ends_the_run(tmp_path):
    out = python_output("import logging, sys\nlogging.basicConfig()\nlog = logging.getLogger('rollout')\n"
                        "log.critical('cannot reach the reward server: Connection refused')\n"
                        "log.critical('giving up after 3 tries')\nsys.exit(3)\n", tmp_path)
    top = explain_text(out)[0]
    assert (top.rule, top.category) == ("generic-error-line", "other")  # the last one: its words, none
    assert top.lines[0].text == "CRITICAL:rollout:giving up after 3 tries"
    out = python_output("import logging\nlogging.basicConfig()\nlogging.critical('Connection refused')\n", tmp_path)
    assert [(f.rule, f.category) for f in explain_text(out)] == [("generic-error-line", "network")]


@pytest.mark.parametrize("tail", [
    # a logger's plain ERROR: healthy runs print it (vLLM's engine client at shutdown, a handled error)
    "ERROR 05-12 11:36:01 [core_client.py:704] Engine core proc EngineCore died unexpectedly, shutting down client.",
    "ERROR:2026-03-26 22:17:28,500:Error extracting action for item 61201",
    # a training step after it: the run went on
    "[ERROR] TBE Subprocess[task_distribute] raise error[]\nstep:3 - loss:0.1 - ",
    # not in the log's last lines
    "slurmd: fatal: Unable to initialize jobacct_gather\n" + "INFO still here\n" * 9,
    # a warning, a consequence, a line of a logged traceback
    "[ERROR] WARNING: the cache is cold",
    "[ERROR] HCCL Some NCCL operations have failed or timed out",
    "[2026-05-14 18:06:16.735] [34] [281473375264256] [llm] [WARN] [param_checker.cpp:98]  Check Other group permission failed",
    '[ERROR] TBE   File "/usr/local/Ascend/te/compile.py", line 12, in compile',
])
def test_what_is_not_a_closing_error_line(tail):
    assert "generic-error-line" not in [f.rule for f in explain_text("step:0 - starting\n" + tail + "\n")]
