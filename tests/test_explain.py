"""doctor explain: reading (stdin, gzip, CRLF, Ray prefixes, huge lines), ranking, the CLI
contract, the rule loader's errors, and a fuzz run against every pattern."""
from __future__ import annotations

import gzip
import io
import json
import random
import re
import time

import pytest

import matching.explain as ex
from matching import terminal
from matching.catalog import CatalogError, catalog, load_rules
from matching.explain import Matcher, clean_line, explain_paths, explain_report, explain_text

from .conftest import ROOT, run_doctor

FIX = ROOT / "tests" / "fixtures" / "explain"
SCHEMA = json.loads((ROOT / "knowledge" / "schemas" / "doctor.explain.schema.json").read_text())


def body(name: str) -> str:
    """A fixture without its `# source:` header line."""
    return (FIX / name).read_text().split("\n", 1)[1]


# ---------------------------------------------------------------------------------------------
# CLI contract


def test_cli_json_matches_schema_and_names_the_cause(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    r = run_doctor("explain", "--json", str(FIX / "memory-oom-log-prob.log"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    top = doc["findings"][0]
    assert (top["rule"], top["category"], top["phase"]) == ("memory-oom-log-prob", "memory", "log_prob")
    assert any("CUDA out of memory" in ln["text"] for ln in top["lines"])


def test_cli_human_output_shows_evidence_line_numbers_and_fix():
    r = run_doctor("explain", str(FIX / "verl-batch-not-divisible.log"))
    assert r.returncode == 0, r.stderr
    assert "verl-batch-not-divisible" in r.stdout
    assert "13: AssertionError: real_train_batch_size (30)" in r.stdout
    assert "fix:" in r.stdout and "doctor rules verl-batch-not-divisible" in r.stdout


def test_cli_nothing_known_exits_1_and_shows_where_to_look(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    log = tmp_path / "odd.log"
    # a handled exception, logged (logging's prefix on the header only), and the run went on
    log.write_text("step:1 - loss:0.3\nERROR:2026-01-01 10:00:00,000:Traceback (most recent call last):\n"
                   '  File "x.py", line 1, in <module>\nZeroDivisionError: division by zero\n'
                   "step:2 - loss:0.2\n")
    r = run_doctor("explain", "--json", str(log))
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, SCHEMA)
    assert doc["findings"] == []
    assert [ln["n"] for ln in doc["look_at"]] == [2, 4]
    human = run_doctor("explain", str(log))
    assert human.returncode == 1 and "No known failure matched" in human.stdout


def test_cli_reads_stdin():
    r = run_doctor("explain", "-", input=(FIX / "ray-oom-killer.log").read_text())
    assert r.returncode == 0, r.stderr
    assert "ray-oom-killer" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["/definitely/not/here.log"], "no such file"),
    (["knowledge/schemas"], "a directory with no log files"),
    ([], "give a log file"),
])
def test_cli_bad_input_is_one_line_exit_2(args, message):
    r = run_doctor("explain", *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_rules_page_and_list():
    page = run_doctor("rules", "memory-oom-update")
    assert page.returncode == 0
    for section in ("# Out of memory in the actor update", "## Why it happens", "## How to fix it",
                    "## References", "Phase: update", "ppo_micro_batch_size_per_gpu"):
        assert section in page.stdout
    assert run_doctor("rules", "no-such-rule").returncode == 2
    listing = run_doctor("explain", "--list")
    assert listing.returncode == 0
    assert all(r.id in listing.stdout for r in catalog())


# ---------------------------------------------------------------------------------------------
# Reading


def test_gzip_and_truncated_gzip(tmp_path):
    text = (FIX / "ray-oom-killer.log").read_bytes()
    whole = tmp_path / "run.log.gz"
    whole.write_bytes(gzip.compress(text))
    rep = explain_report([str(whole)])
    assert rep.findings[0].rule == "ray-oom-killer" and not rep.truncated
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(whole.read_bytes()[:-12])  # lost its trailer (and the last bytes)
    rep = explain_report([str(cut)])
    assert rep.truncated
    assert rep.findings[0].rule == "ray-oom-killer"


def test_ray_prefix_ansi_crlf_and_node_evidence(tmp_path):
    raw = ("\x1b[36m(WorkerDict pid=4242, ip=10.1.2.3)\x1b[0m " + line
           for line in body("memory-oom-log-prob.log").splitlines())
    log = tmp_path / "ray.log"
    log.write_bytes(("\r\n".join(raw) + "\r\n").encode())
    top = explain_paths([str(log)])[0]
    assert top.rule == "memory-oom-log-prob"
    oom = [ln for ln in top.lines if "CUDA out of memory" in ln.text][0]
    assert (oom.node, oom.process) == ("10.1.2.3", "WorkerDict pid=4242")
    assert not oom.text.startswith("(") and "\r" not in oom.text and "\x1b" not in oom.text


@pytest.mark.parametrize("prefix,process,node", [
    # SkyPilot's prefixes (sky/skylet/log_lib.py): a single-node task, a multi-node job's head and worker
    ("(task, pid=10095) ", "task pid=10095", None),
    ("(head, rank=0, pid=2956) ", "head pid=2956", None),
    ("(worker1, rank=1, pid=2491, ip=10.1.2.3) ", "worker1 pid=2491", "10.1.2.3"),
])
def test_skypilots_prefix_names_the_process_and_node(tmp_path, prefix, process, node):
    raw = ("\x1b[36m" + prefix.rstrip() + "\x1b[0m " + line for line in body("memory-oom-log-prob.log").splitlines())
    log = tmp_path / "sky.log"
    log.write_text("\n".join(raw) + "\n")
    top = explain_paths([str(log)])[0]
    assert top.rule == "memory-oom-log-prob"
    oom = [ln for ln in top.lines if "CUDA out of memory" in ln.text][0]
    assert (oom.process, oom.node) == (process, node) and not oom.text.startswith("(")


# What collectors put before every line (matching/explain.py _CAPTURE names their sources)
CAPTURES = {"docker compose logs": "verl-trainer-1  | ",
            "docker compose logs -t": "verl-trainer-1  | 2025-03-04T05:06:07.123456789Z ",
            "kubectl logs --prefix": "[pod/verl-head-7f9c/ray-head] ",
            "kubectl logs --timestamps": "2025-03-04T05:06:07.123456789Z ",
            "journald": "Mar  4 05:06:07 node-1 python3[4242]: ",
            "Jenkins timestamper": "Mar  4 05:06:07 ",
            "a node's CRI container log": "2025-03-04T05:06:07.123456789Z stderr F ",
            # multi-node launchers: pdsh (DeepSpeed's runner) by host name and by address, srun --label, mpirun --tag-output
            "pdsh": "worker-1: ", "pdsh by address": "10.0.0.12: ", "srun --label": " 3: ",
            "mpirun --tag-output": "[1,3]<stderr>:"}


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_a_collectors_prefix_on_every_line_changes_no_finding(capture):
    # every fixture, as it reads when collected: the same first finding, on the same lines
    def first(text):
        return [(f.rule, f.category, [ln.n for ln in f.lines]) for f in explain_text(text)][:1]
    differ = []
    for path in sorted(FIX.glob("*.log")):
        text = body(path.name)
        prefixed = "".join(CAPTURES[capture] + ln for ln in text.splitlines(keepends=True))
        if first(prefixed) != first(text):
            differ.append(path.name)
    assert not differ, differ


def test_what_only_looks_like_a_collectors_prefix_stays():
    # a log level or a table row is not docker compose's service name (before: the level went, and with it the
    # line's warning; a row lost its cells), and a word after a bare time is not a host and a unit
    assert clean_line_text(b"WARNING  | ValueError: could not parse optional field") == \
        "WARNING  | ValueError: could not parse optional field"
    assert explain_text("WARNING  | ValueError: could not parse optional field, using default\n") == []
    assert clean_line_text(b"  0 | model | GPT2LMHeadModel | 124 M") == "  0 | model | GPT2LMHeadModel | 124 M"
    assert clean_line_text(b"model | GPT2LMHeadModel | 124 M") == "model | GPT2LMHeadModel | 124 M"
    top = explain_text("Nov 20 16:03:25 CUDA error: an illegal memory access was encountered\n")[0]
    assert top.rule == "cuda-illegal-memory-access" and top.lines[0].text.startswith("CUDA error")


@pytest.mark.parametrize("line", [
    "EL0004: Failed to allocate memory.", "EI0004: The ranktable is invalid", "python3.10: can't open file 'train.py'",
    "libcuda.so.1: cannot open shared object file: No such file or directory",
    "x86_64-linux-gnu-gcc: error: command 'gcc' failed", "collect2: error: ld returned 1 exit status",
    "torch._C._distributed_c10d.DistBackendError: NCCL error", "node1:2330:2658 [2] NCCL INFO Bootstrap : Using eth0",
    "cv2.error: OpenCV(4.8.0) error", "eth0: link is down", "mlx5_0: port 1 down", "nvme0n1: I/O error",
    "fp16: True", "step100: loss 0.31", "sha256: 9f86d081", "gcc-9: error: unrecognized option", "Qwen2-7B: loaded",
    "cuda12.1: CUDA error", "rank0: done",
])
def test_what_only_looks_like_a_launchers_prefix_stays(line):
    assert clean_line_text(line.encode()) == line


@pytest.mark.parametrize("prefix,node,process", [
    ("worker-1: ", "worker-1", "host worker-1"), ("10.0.0.12: ", "10.0.0.12", "host 10.0.0.12"),
    ("node01: ", "node01", "host node01"), ("pipeline-node-1.cluster.local: ", "pipeline-node-1.cluster.local",
                                              "host pipeline-node-1.cluster.local"), (" 3: ", None, "task 3"),
    ("[1,3]<stderr>:", None, "rank 3"), ("gpu-node-2: (WorkerDict pid=42, ip=10.0.0.2) ", "gpu-node-2", "WorkerDict pid=42"),
])
def test_a_launchers_prefix_names_the_node_or_the_task(prefix, node, process):
    line = ex.clean_line((prefix + "ValueError: x").encode())
    assert (line.text, line.node, line.process) == ("ValueError: x", node, process)


def test_two_hosts_interleaved_tracebacks_stay_apart():
    # pdsh writes each host's lines as they come: the layer reads each host's traceback for itself
    a = ["Traceback (most recent call last):", '  File "/srv/recipe/dataset/rl_dataset.py", line 3, in build',
         "    return len(row['images'])", "TypeError: object of type 'NoneType' has no len()"]
    b = ["Traceback (most recent call last):", '  File "/usr/lib/python3.10/socket.py", line 9, in connect',
         "    sock.connect(sa)", "ConnectionRefusedError: [Errno 111] Connection refused"]
    text = "".join(f"worker-1: {x}\nworker-2: {y}\n" for x, y in zip(a, b))
    found = {(f.rule, f.category): f for f in explain_text(text, matcher=Matcher([], terminal.generic()))}
    assert ("generic-data-schema", "data") in found, list(found)   # worker-1's frame, not worker-2's socket.py
    assert all(ln.node == "worker-1" for ln in found[("generic-data-schema", "data")].lines)


def clean_line_text(raw: bytes) -> str:
    return ex.clean_line(raw).text


def test_a_collectors_prefix_before_rays_keeps_the_process_and_node():
    text = "".join("[pod/verl-worker-1/main] (WorkerDict pid=4242, ip=10.1.2.3) " + ln
                   for ln in body("memory-oom-log-prob.log").splitlines(keepends=True))
    top = explain_text(text)[0]
    oom = [ln for ln in top.lines if "CUDA out of memory" in ln.text][0]
    assert (top.rule, oom.node, oom.process) == ("memory-oom-log-prob", "10.1.2.3", "WorkerDict pid=4242")
    assert not oom.text.startswith(("[", "("))


class _Chunky:
    """A stream that returns short reads of random sizes (a pipe, a gzip member)."""
    def __init__(self, data: bytes, rnd: random.Random):
        self.data, self.at, self.rnd = data, 0, rnd

    def readinto(self, view) -> int:
        n = min(len(view), self.rnd.randint(1, 3000), len(self.data) - self.at)
        view[:n] = self.data[self.at:self.at + n]
        self.at += n
        return n


def test_each_files_kept_tail_is_its_last_lines_numbered_right(monkeypatch):
    # whatever the block size, the read sizes and the line lengths: the kept tail is a suffix of the file that
    # starts a line, numbered from the file's start, holding the last TAIL_BYTES or whatever they start in
    # (before: a last line longer than the tail that began a block left the lines before it as "the end")
    from matching import terminal
    for trial in range(200):
        rnd = random.Random(trial)
        monkeypatch.setattr(ex, "BLOCK_BYTES", rnd.choice([64, 200, 1000, 5000]))
        monkeypatch.setattr(terminal, "TAIL_BYTES", rnd.choice([50, 300, 1000, 4000]))
        lines = [b"x" * rnd.choice([0, 1, 5, 40, 120, 700]) for _ in range(rnd.randint(1, 200))]
        data = b"\n".join(lines) + (b"\n" if rnd.random() < .7 else b"")
        scan = ex.Scan(ex.default_matcher())
        scan.feed_stream(_Chunky(data, rnd) if rnd.random() < .5 else io.BytesIO(data), None)
        first, tail = scan.collector.tails.get(None, (0, b""))
        start = len(data) - len(tail)
        assert data.endswith(tail) and (not tail or start == 0 or data[start - 1:start] == b"\n"), trial
        assert not tail or first == data.count(b"\n", 0, start) + 1, trial
        assert len(tail) >= min(terminal.TAIL_BYTES, len(data)) - 800 or b"\n" not in data[start - 800:start], trial


def test_a_directory_stands_for_its_log_files(tmp_path):
    # a folder per node, laid out as Ray writes its session logs: the cause (an OOM on node b) ranks above the
    # consequence (node a's dead actor) whatever the file order, as with the files named one by one
    a, b = tmp_path / "node-a" / "logs", tmp_path / "node-b" / "logs"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    (a / "worker-01-ffff-111.err").write_text(body("ray-actor-died.log"))
    (b / "worker-02-ffff-222.err").write_text(body("memory-oom-log-prob.log"))
    (b / "raylet.out").write_text("")                          # empty: skipped
    (b / "gcs_server.pb").write_bytes(b"\x00\x01binary")         # not a log
    files = [str(a / "worker-01-ffff-111.err"), str(b / "worker-02-ffff-222.err")]
    by_dir, by_file = explain_report([str(tmp_path)]), explain_report(files)
    assert [f.rule for f in by_dir.findings] == [f.rule for f in by_file.findings]
    assert by_dir.findings[0].rule == "memory-oom-log-prob" and by_dir.findings[0].lines[0].file == files[1]
    assert by_dir.sources == [str(tmp_path)]
    r = run_doctor("explain", str(tmp_path / "node-a"), str(tmp_path / "node-b"))
    assert r.returncode == 0 and "memory-oom-log-prob" in r.stdout.splitlines()[0]
    # a rotated log counts, and one file found in a directory is still named in the evidence
    (b / "worker-02-ffff-222.err").rename(b / "worker-02-ffff-222.err.1")
    (a / "worker-01-ffff-111.err").unlink()
    one = explain_report([str(b)])
    assert one.findings[0].rule == "memory-oom-log-prob" and one.findings[0].lines[0].file == str(b / "worker-02-ffff-222.err.1")
    (tmp_path / "none").mkdir()
    r = run_doctor("explain", str(tmp_path / "none"))
    assert r.returncode == 2 and r.stderr.strip().endswith("a directory with no log files (.log .out .err .txt .gz) under it")
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("escape", ["#033", ""])
def test_colour_codes_as_a_collector_or_a_paste_leaves_them(tmp_path, escape):
    # rsyslog stores the ESC byte as "#033" ("#033[2m#033[33m(raylet)#033[0m"); a web page drops it ("[33m(raylet)[0m")
    raw = ("\x1b[2m\x1b[33m(raylet, ip=10.1.2.3)\x1b[0m " + line for line in body("ray-oom-killer.log").splitlines())
    log = tmp_path / "ray.log"
    log.write_text("\n".join(raw).replace("\x1b", escape) + "\n")
    top = explain_paths([str(log)])[0]
    assert top.rule == "ray-oom-killer"
    assert all(ln.node == "10.1.2.3" and "[0m" not in ln.text and not ln.text.startswith("(") for ln in top.lines)


def test_text_that_only_looks_like_a_colour_code_keeps_it():
    assert clean_line(b"loss [36m ok").text == "loss [36m ok"    # no reset on the line: not a colour


def test_the_ray_oom_summary_wrapped_by_a_console_is_read(tmp_path):
    # Ray's raylet summary (node_manager.cc) wrapped by a fixed-width console inside "(tasks / actors)", where a
    # 120-column terminal breaks it after a "(raylet)" prefix and a timestamp
    head = "(raylet) [2026-12-01 10:00:00,000 E 1234 1234] node_manager.cc:3007: 2 Workers (tasks /"
    rest = (" actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: "
            "abd406d4, IP: 10.0.1.2) over the last time period.")
    log = tmp_path / "console.log"
    log.write_text(head + "\n" + rest + "\n")
    top = explain_paths([str(log)])[0]
    assert top.rule == "ray-oom-killer" and top.lines[0].n == 2


def test_line_numbers_survive_block_boundaries(monkeypatch, tmp_path):
    noise = (ROOT.parent / "shared/research/clean-logs/005.log")
    filler = noise.read_bytes() if noise.exists() else b"step:1 - loss:0.1\n" * 500
    log = tmp_path / "big.log"
    with open(log, "wb") as fh:
        for _ in range(20):
            fh.write(filler)
        before = filler.count(b"\n") * 20
        fh.write(b"AssertionError: real_train_batch_size (30) must be divisible by minimal possible batch size (8)\n")
        fh.write(filler)
    monkeypatch.setattr(ex, "BLOCK_BYTES", 4096)  # many blocks, lines cut at every boundary
    rep = explain_report([str(log)])
    assert rep.findings[0].rule == "verl-batch-not-divisible"
    assert rep.findings[0].lines[0].n == before + 1
    assert rep.lines_read == before + 1 + filler.count(b"\n")


def test_several_logs_are_one_incident_with_file_names(tmp_path):
    a, b = tmp_path / "node1.log", tmp_path / "node2.log"
    a.write_text("step:1 - loss:0.2\n")
    b.write_text(body("ray-oom-killer.log"))
    rep = explain_report([str(a), str(b)])
    assert rep.findings[0].rule == "ray-oom-killer"
    assert rep.findings[0].lines[0].file == str(b)


def test_secrets_in_evidence_are_redacted(tmp_path):
    secret = "hf_" + "Zq8" * 12
    log = tmp_path / "s.log"
    log.write_text(f"HF_TOKEN={secret} ModuleNotFoundError: No module named 'vllm'\n")
    r = run_doctor("explain", "--json", str(log))
    assert r.returncode == 0 and secret not in r.stdout


# ---------------------------------------------------------------------------------------------
# Ranking


def test_cause_beats_the_consequences_printed_before_and_after_it():
    # the driver reports the dead actor first; the worker's own allocation failure comes later
    # (the EasyR1 wrapper log, RayTaskError(OutOfMemoryError): now generic-out-of-memory--2's fixture)
    text = body("ray-actor-died.log") + body("memory-cpu-alloc-failed.log") + body("generic-out-of-memory--2.log")
    found = explain_text(text)
    # the wrapper's traceback names update_actor next to the allocation failure: the phase is known
    assert (found[0].rule, found[0].phase) == ("memory-oom-update", "update")
    assert {f.rule for f in found[1:]} >= {"ray-actor-died", "ray-task-error"}
    assert all(f.consequence for f in found[1:])


def test_earliest_incident_wins():
    filler = "step:1 - loss:0.1\n" * 200  # far apart: two incidents
    text = body("verl-reward-file-not-found.log") + filler + body("memory-cuda-oom.log")
    assert [f.rule for f in explain_text(text)][:2] == ["verl-reward-file-not-found", "memory-cuda-oom"]
    text = body("memory-cuda-oom.log") + filler + body("verl-reward-file-not-found.log")
    assert explain_text(text)[0].rule == "memory-cuda-oom"


def test_specific_rule_beats_generic_on_the_same_line_and_all_shows_both():
    text = body("memory-oom-log-prob.log")
    default = [f.rule for f in explain_text(text)]
    assert default == ["memory-oom-log-prob"]
    with_all = [f.rule for f in explain_text(text, all=True)]
    assert with_all[0] == "memory-oom-log-prob" and "memory-cuda-oom" in with_all


def test_phase_rule_needs_its_phase_nearby():
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    far = '  File "w.py", line 9, in update_actor\n' + "step:2 - loss:0.1\n" * 200 + oom
    near = '  File "w.py", line 9, in update_actor\n' + oom
    assert explain_text(far)[0].rule == "memory-cuda-oom"
    top = explain_text(near)[0]
    assert (top.rule, top.phase) == ("memory-oom-update", "update")


# ---------------------------------------------------------------------------------------------
# The rule loader


@pytest.mark.parametrize("snippet,message", [
    ('bogus = 1', "unknown field 'bogus'"),
    ('patterns = ["(a)\\\\1"]', "not valid RE2"),
    ('patterns = ["foo ^bar"]', "only a leading ^"),
    ('category = "gpu"', "unknown category"),
    ('phase = "backward"', "unknown phase"),
    ('patterns = ["x*"]', "matches the empty line"),
    ('yields_to = "generic-import-source-tree"', "yields_to must be a list of generic class ids"),
])
def test_catalog_rejects_bad_rules(tmp_path, snippet, message):
    key = snippet.split(" = ")[0]
    fields = {"id": '"a-rule"', "category": '"memory"', "title": '"t"', "platforms": '["any"]',
              "patterns": '["some literal"]', "cause": '"c"', "fix": '"f"', "references": '["https://x"]'}
    fields[key] = snippet.split(" = ", 1)[1]
    (tmp_path / "bad.toml").write_text("[[rule]]\n" + "\n".join(f"{k} = {v}" for k, v in fields.items()))
    with pytest.raises(CatalogError, match=re.escape(message)) as err:
        load_rules(tmp_path)
    assert "bad.toml" in str(err.value) and "a-rule" in str(err.value)


def test_catalog_rejects_duplicate_ids(tmp_path):
    rule = ('[[rule]]\nid = "dup"\ncategory = "other"\ntitle = "t"\nplatforms = ["any"]\n'
            'patterns = ["abc"]\ncause = "c"\nfix = "f"\nreferences = ["https://x"]\n')
    (tmp_path / "a.toml").write_text(rule)
    (tmp_path / "b.toml").write_text(rule)
    with pytest.raises(CatalogError, match="duplicate id"):
        load_rules(tmp_path)


def test_the_shipped_catalog_is_big_and_covers_every_category():
    rules = catalog()
    assert len(rules) >= 60
    assert {r.category for r in rules} >= {"imports", "versions", "network", "workdir", "memory",
                                          "config", "data", "cluster"}
    assert all(r.phase for r in rules if r.id.startswith("memory-oom-"))


def test_re2_prefilter_flags_the_line_a_match_ends_on(monkeypatch):
    """A pattern led by a class that holds \\s can match from the previous line's newline: the
    candidate is the line the match ends on (Hyperscan reports end offsets), not the one before."""
    from matching.prefilter import Re2Prefilter
    data = b"    raise Exception('no')\nException: Unable to connect to Redis.\nsrun: error: n1: task 0: Exited\n"
    _, hits = Re2Prefilter([r"(?:^|[\s:\]])Exception: "]).candidates(memoryview(data))
    assert [data.count(b"\n", 0, h) for h in hits] == [1]
    # and the run finds the exception on it, whichever engine scans
    monkeypatch.setenv("DOCTOR_PREFILTER", "re2")
    slow = Matcher(catalog(), ex.terminal.generic())
    assert type(slow.prefilter).__name__ == "Re2Prefilter"
    top = explain_text(data, matcher=slow)[0]
    assert (top.rule, [ln.n for ln in top.lines][-1:]) == ("generic-connection", [2])


def test_prefilter_engines_agree_on_every_fixture(monkeypatch):
    """Hyperscan (when installed) and the RE2 alternation must find exactly the same causes."""
    pytest.importorskip("hyperscan")
    fast = ex.default_matcher()
    monkeypatch.setenv("DOCTOR_PREFILTER", "re2")
    slow = Matcher(catalog(), ex.terminal.generic())
    assert type(fast.prefilter).__name__ == "HyperscanPrefilter"
    assert type(slow.prefilter).__name__ == "Re2Prefilter"
    for path in sorted(FIX.glob("*.log")):
        data = path.read_bytes()
        a = [(f.rule, [ln.n for ln in f.lines]) for f in explain_text(data, all=True, matcher=fast)]
        b = [(f.rule, [ln.n for ln in f.lines]) for f in explain_text(data, all=True, matcher=slow)]
        assert a == b, path.name


# ---------------------------------------------------------------------------------------------
# Fuzz: hostile input never crashes and stays fast


def _pathological(pattern: str) -> list[str]:
    """Inputs that make backtracking engines explode on this pattern: long runs of its own
    characters, unclosed groups, near-misses repeated."""
    lits = "".join(ch for ch in pattern if ch.isalnum() or ch in " '_:.-()[]") or "a"
    return [lits * 2000, (lits[: len(lits) // 2] + "(") * 3000, "(" * 50000 + "x",
            ("a" * 30 + " ") * 5000, lits[:-1] * 500 + "\x00\xff"]


def test_fuzz_random_bytes_truncations_huge_lines_and_hostile_strings(tmp_path):
    rng = random.Random(20261129)
    started = time.monotonic()
    # random binary junk, with and without newlines
    for size in (0, 1, 17, 4096, 3 << 20):
        blob = rng.randbytes(size)
        explain_text(blob)
        explain_text(blob.replace(b"\n", b""))
    # every fixture truncated at random points (mid-line, mid-UTF-8)
    for path in sorted(FIX.glob("*.log")):
        data = path.read_bytes()
        for _ in range(3):
            explain_text(data[: rng.randrange(len(data) + 1)])
    # a 10 MB single line that ends in a real error
    huge = tmp_path / "huge.log"
    huge.write_bytes(b"x" * (10 << 20) + b" ModuleNotFoundError: No module named 'vllm'\n")
    t0 = time.monotonic()
    found = explain_paths([str(huge)])
    assert time.monotonic() - t0 < 20
    assert found and found[0].rule == "python-module-not-found" and found[0].lines[0].n == 1
    # long runs of blanks before a repeated-line marker (quadratic for a naive regex)
    t0 = time.monotonic()
    explain_text(" " * 60000 + "ModuleNotFoundError: No module named 'x'" + " " * 60000 + "x\n")
    assert time.monotonic() - t0 < 5
    # a block flooded with matches (the prefilter switches to one candidate per line)
    t0 = time.monotonic()
    found = explain_text(b"ERROR " * (2 << 20) + b"\nModuleNotFoundError: No module named 'vllm'\n")
    assert found[0].rule == "python-module-not-found" and time.monotonic() - t0 < 30
    # hostile strings against every pattern of the catalog, each bounded in time
    for rule in catalog():
        for pattern in rule.patterns:
            for text in _pathological(pattern):
                t0 = time.monotonic()
                explain_text(text)
                assert time.monotonic() - t0 < 5, (rule.id, pattern)
    assert time.monotonic() - started < 120


def test_api_lines_are_mappings_as_the_contract_says():
    top = explain_paths([str(FIX / "ray-oom-killer.log")])[0]
    line = dict(top.lines[0])
    assert set(line) >= {"n", "text", "node"} and line["n"] == top.lines[0].n
    assert top.to_dict()["lines"][0] == line


def test_requires_and_near_conditions_of_a_rule(tmp_path):
    (tmp_path / "r.toml").write_text(
        '[[rule]]\nid = "needs-both"\ncategory = "network"\ntitle = "t"\nplatforms = ["any"]\n'
        'patterns = ["connectFullMesh failed"]\nrequires = "^Running on \\\\d+ nodes"\n'
        'near = { pattern = "falling back to loopback", within = 3 }\nspecificity = 3\n'
        'cause = "c"\nfix = "f"\nreferences = ["https://x"]\n')
    m = Matcher(load_rules(tmp_path))
    fatal = "RuntimeError: [enforce fail] connectFullMesh failed\n"
    warn = "W Gloo: hostname resolves to 127.0.1.1, falling back to loopback\n"
    assert [f.rule for f in explain_text("Running on 2 nodes\n" + warn + fatal, matcher=m)] == ["needs-both"]
    assert explain_text(warn + fatal, matcher=m) == []                                  # requires unmet
    assert explain_text("Running on 2 nodes\n" + warn + "x\n" * 5 + fatal, matcher=m) == []  # too far
    top = explain_text("Running on 2 nodes\n" + fatal + warn, matcher=m)[0]              # either side
    assert [ln.n for ln in top.lines] == [2, 3]  # the fatal line joined by the warning that explains it


@pytest.mark.parametrize("waiting,failure", [
    ("k8s-pods-unschedulable.log", "memory-cuda-oom.log"),   # pods pending, then scheduled after all
    ("npu-device-count-failed.log", "npu-oom.log"),          # no NPU counted, then a fallback that ran
])
def test_a_state_printed_on_the_way_names_the_failure_only_when_nothing_after_it_does(waiting, failure):
    """Lines a run prints while it waits or falls back (a scheduler's pending pods, torch_npu's failed
    device count) name the failure of a log that ends there, never ahead of a cause after them."""
    steps = "".join(f"step:{i} - actor/loss:0.5\n" for i in range(80))
    alone = explain_text(body(waiting))
    assert alone[0].rule == waiting.removesuffix(".log")
    found = explain_text(body(waiting) + steps + body(failure))
    assert found[0].rule == failure.removesuffix(".log").split("--")[0]


def test_a_rule_may_require_a_line_the_fallback_also_looks_for(tmp_path):
    # `Traceback (most recent call last)` is one of FALLBACK_PATTERNS too: it stays the rule's
    (tmp_path / "r.toml").write_text(
        '[[rule]]\nid = "needs-traceback"\ncategory = "other"\ntitle = "t"\nplatforms = ["any"]\n'
        'patterns = ["widget jammed"]\nrequires = "Traceback \\\\(most recent call last\\\\)"\n'
        'specificity = 3\ncause = "c"\nfix = "f"\nreferences = ["https://x"]\n')
    m = Matcher(load_rules(tmp_path))
    log = "Traceback (most recent call last):\n  File \"w.py\", line 1, in <module>\nRuntimeError: widget jammed\n"
    assert [f.rule for f in explain_text(log, matcher=m)] == ["needs-traceback"]
    assert explain_text("RuntimeError: widget jammed\n", matcher=m) == []  # requires unmet
    # and it stays cheap: a healthy log's every traceback line costs no rule evaluation for it
    assert m.exprs.index(r"Traceback \(most recent call last\)") in m.cheap


def test_cli_on_binary_junk_never_tracebacks(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_bytes(random.Random(7).randbytes(1 << 20) + b"\xff\xfe\x00" * 1000)
    for args in (["explain", str(junk)], ["explain", "--json", "--all", str(junk)]):
        r = run_doctor(*args)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    r = run_doctor("explain", "-", input="\x00\x01 binary \x7f\n" * 1000)
    assert r.returncode == 1 and not r.stderr


def test_cli_all_lists_the_findings_a_higher_one_explains():
    r = run_doctor("explain", "--all", str(FIX / "memory-oom-log-prob.log"))
    assert r.returncode == 0
    assert "memory-cuda-oom" in r.stdout and "same line as memory-oom-log-prob" in r.stdout
    assert "memory-cuda-oom" not in run_doctor("explain", str(FIX / "memory-oom-log-prob.log")).stdout


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_log_that_cannot_seek_back_is_read(tmp_path, packed):
    """`doctor explain <(kubectl logs ...)` and named pipes: no seek back after sniffing gzip."""
    import os
    import threading

    text = (ROOT / "tests" / "fixtures" / "explain" / "memory-cuda-oom.log").read_bytes()
    fifo = tmp_path / "run.log"
    os.mkfifo(fifo)

    def feed():
        with open(fifo, "wb") as fh:
            fh.write(gzip.compress(text) if packed else text)

    writer = threading.Thread(target=feed)
    writer.start()
    r = run_doctor("explain", "--json", str(fifo), timeout=120)
    writer.join(timeout=30)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["findings"][0]["rule"] == "memory-cuda-oom"
