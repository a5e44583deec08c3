"""`doctor report` end to end: planted secrets never leak, the root cause comes first, the Markdown
is well formed and bounded, bad input is one line and exit 2."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from matching.explain import explain_paths
from tests.conftest import ROOT, run_doctor
from tests.lab.planted import BEARER, HF, MLFLOW_URI, SECRETS, WANDB, planted_env, planted_script

FIXTURES = ROOT / "tests" / "fixtures" / "explain"
SCHEMA = ROOT / "knowledge" / "schemas" / "doctor.report.schema.json"

# Planted secrets: in the environment and the launch script (tests/lab/planted.py), inside log lines.
LOG_KEY = "log-line-api-key-77Q"
ALL_SECRETS = (*SECRETS, LOG_KEY)


# The shape of Qwen2-0.5B-Instruct (the seed article's model): config.json only, no weights.
QWEN2_05B = {"model_type": "qwen2", "hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 151936,
             "tie_word_embeddings": True}


def planted(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "Qwen2-0.5B-Instruct"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN2_05B))
    script = planted_script(tmp_path / "run_grpo.sh", "data.train_batch_size=6 actor_rollout_ref.rollout.n=5",
                            f"actor_rollout_ref.model.path={model}", "trainer.n_gpus_per_node=8")
    log = tmp_path / "train.log"
    lines = [
        "wandb: Currently logged in as: someone",
        f"Authorization: Bearer {BEARER}",
        f"downloading with token {HF} from the hub",
        f"mlflow tracking {MLFLOW_URI}/api",
        f"config api_key={LOG_KEY} loaded",
        f"env dump WANDB_API_KEY={WANDB}",
    ]
    log.write_text("\n".join(lines) + "\n" + (FIXTURES / "verl-batch-not-divisible.log").read_text())
    return script, log


STACK = ("torch", "torch_npu", "vllm", "verl", "ray")


def report_watching_imports(*args: str, cwd: Path, env: dict) -> tuple[int, str, str, list[str]]:
    """Run the real CLI (`doctor report ARGS`) in a fresh interpreter and also say which of the
    training stack's packages that process imported: like `doctor check`, the report must probe
    the target interpreter in subprocesses, never import the stack itself."""
    code = ("import json, sys\nfrom doctor.cli import main\n"
            f"sys.argv = ['doctor', 'report', *{list(args)!r}]\n"
            "try:\n    main()\n    rc = 0\nexcept SystemExit as exc:\n    rc = exc.code\n"
            f"print(json.dumps([rc, sorted(m for m in {STACK!r} if m in sys.modules)]), file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**__import__("os").environ, **env},
                       capture_output=True, text=True, timeout=300)
    *stderr, last = r.stderr.rstrip("\n").split("\n")
    rc, modules = json.loads(last)
    return rc, r.stdout, "\n".join(stderr), modules


def assert_no_secret(text: str, where: str) -> None:
    for s in ALL_SECRETS:
        assert s not in text, f"{where}: planted secret {s[:6]}... leaked"


def headings(tokens) -> list[str]:
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


def assert_well_formed(md: str) -> None:
    """Parse as GitHub does (CommonMark + tables): every section is a real heading (nothing swallowed
    by an open fence), tables parse as tables, <details> blocks balance."""
    parser = MarkdownIt("commonmark").enable("table")
    tokens = parser.parse(md)
    heads = headings(tokens)
    assert heads[0] == "verl-doctor report"
    assert heads[-1] == "About this report"
    assert md.count("<details>") == md.count("</details>")
    for t in tokens:
        if t.type == "inline":
            assert not t.content.lstrip().startswith("|"), f"a table did not parse: {t.content[:80]}"
    fences = [t for t in tokens if t.type == "fence"]
    assert all(t.markup.startswith("```") for t in fences)
    return tokens


def test_report_redacts_everything_and_leads_with_the_root_cause(tmp_path):
    script, log = planted(tmp_path)
    md_path, json_path, bundle = tmp_path / "report.md", tmp_path / "report.json", tmp_path / "b.tar.gz"
    rc, out, err, imported = report_watching_imports(
        "--log", str(log), "-o", str(md_path), "--bundle", str(bundle), "--device-memory", "64GiB",
        "--", "bash", str(script), cwd=tmp_path, env=planted_env())
    assert rc == 1, err  # problems found
    assert "Traceback" not in err
    assert imported == []
    md = md_path.read_text()
    assert_no_secret(md, "markdown")
    assert_no_secret(out + err, "console")

    # the root cause of the log, as the explain engine ranks it, in the first lines
    top = explain_paths([str(log)])[0]
    head = "\n".join(md.splitlines()[:8])
    assert top.title in head and top.rule in head
    for line in top.lines:
        assert line.text in md
    assert "[redacted]" in md
    # the launch, the config diff and the batch arithmetic are there, the harmless parts intact
    assert "data.train_batch_size" in md and "mlflow.internal:5000" in md
    assert "## Batch arithmetic" in md and "## Memory estimate" in md
    assert_well_formed(md)

    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    files = sorted(p for p in (tmp_path / "unpacked").rglob("*") if p.is_file())
    assert {p.name for p in files} == {"report.md", "report.json", "train.log"}
    for p in files:
        assert_no_secret(p.read_text(), f"bundle {p.name}")
    doc = json.loads((tmp_path / "unpacked/doctor-report/report.json").read_text())
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    assert doc["verdict"]["status"] == "fail"
    assert doc["logs"][0]["root_cause"]["rule"] == top.rule
    assert doc["launch"]["exports"]["HF_TOKEN"] == "[redacted]"
    assert doc["plan"]["T"] == 30 and doc["memory"]["capacity"] == 64 << 30
    assert doc["config"]["changed"]["data.train_batch_size"] == {"value": 6, "default": 1024}

    r = run_doctor("report", "--json", "--log", str(log), cwd=tmp_path, env=planted_env())
    assert r.returncode == 1
    assert_no_secret(r.stdout, "json")
    jsonschema.validate(json.loads(r.stdout), json.loads(SCHEMA.read_text()))


def _in_new_uts(hostname: str) -> list[str] | None:
    """A command prefix that runs in a fresh UTS namespace with `hostname` (root only)."""
    unshare = shutil.which("unshare")
    if not unshare:
        return None
    probe = subprocess.run([unshare, "--uts", "sh", "-c", f"hostname {hostname} && hostname"],
                           capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != hostname:
        return None
    return [unshare, "--uts", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh"]


def test_anonymize_hides_hosts_ips_users_and_keeps_nodes_apart(tmp_path):
    host_a, host_b, user = "node-a7.corp.example", "node-b9.corp.example", "alice7"
    prefix = _in_new_uts(host_a)
    if prefix is None:
        pytest.skip("cannot create a UTS namespace to plant a host name (needs root and unshare)")
    log = tmp_path / "two-nodes.log"
    log.write_text(textwrap.dedent(f"""\
        (TaskRunner pid=11, ip=10.77.0.2) head {host_a} started by {user} in /home/{user}/verl
        (WorkerDict pid=12, ip=10.77.0.2) rank 0 on {host_a.split('.')[0]}
        (WorkerDict pid=13, ip=10.77.0.3) rank 1 on {host_b.split('.')[0]}
        (WorkerDict pid=13, ip=10.77.0.3) connecting {host_a} -> {host_b}
        """) + (FIXTURES / "verl-batch-not-divisible.log").read_text())
    out = tmp_path / "report.md"
    envs = {"USER": user, "HOME": f"/home/{user}", "MASTER_ADDR": host_b}
    cmd = [*prefix, sys.executable, "-m", "doctor", "report", "--anonymize", "--log", str(log), "-o", str(out),
           "--bundle", str(tmp_path / "b.tar.gz")]
    r = subprocess.run(cmd, cwd=ROOT, env={**__import__("os").environ, **envs}, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode in (0, 1), r.stderr
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    texts = {"markdown": out.read_text()}
    texts.update({p.name: p.read_text() for p in (tmp_path / "unpacked").rglob("*") if p.is_file()})
    for where, text in texts.items():
        for planted_value in (host_a, host_b, "node-a7", "node-b9", "corp.example", "10.77.0.2", "10.77.0.3", user):
            assert planted_value not in text, f"{where}: {planted_value} not anonymized"
    md = texts["markdown"]
    assert_well_formed(md)
    # two nodes, two placeholders, used consistently
    log_lines = texts["two-nodes.log"].splitlines()
    ip_a = log_lines[0].split("ip=")[1].split(")")[0]
    ip_b = log_lines[2].split("ip=")[1].split(")")[0]
    assert ip_a.startswith("ip-") and ip_b.startswith("ip-") and ip_a != ip_b
    assert f"ip={ip_a}" in log_lines[1] and f"ip={ip_b}" in log_lines[3]
    connect = log_lines[3].split("connecting ")[1].split(" -> ")
    assert connect[0].startswith("host-") and connect[1].startswith("host-") and connect[0] != connect[1]
    assert log_lines[1].endswith(connect[0]) and log_lines[2].endswith(connect[1])


@pytest.mark.slow
def test_report_of_the_reference_trainer_memory_failure(tmp_path):
    """The memory failure of the auto-tune tests, for real: the reference trainer's update micro
    batch cannot be allocated under trainer.worker_memory_limit. The report names the root cause in
    its first lines, with its phase, and shows the evidence lines."""
    import os

    from trainer.defaults import embedded_default

    log = tmp_path / "train.log"
    args = embedded_default() + [f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.nnodes=1",
                                 "trainer.total_training_steps=1", "trainer.worker_memory_limit=1GiB",
                                 "actor_rollout_ref.rollout.n=64", "data.max_response_length=48",
                                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=512"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["OMP_NUM_THREADS"] = "1"
    with log.open("w") as fh:
        proc = subprocess.run([sys.executable, "-m", "trainer.main_grpo", *args], cwd=ROOT, env=env,
                              stdout=fh, stderr=subprocess.STDOUT, timeout=600, start_new_session=True)
    assert proc.returncode == 1, log.read_text()[-3000:]
    r = run_doctor("report", "--log", str(log), cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    md = r.stdout
    found = explain_paths([str(log)])
    assert found and found[0].category == "memory" and found[0].phase == "update"
    head = "\n".join(md.splitlines()[:6])
    assert found[0].title in head and found[0].rule in head and "phase update" in head
    for line in found[0].lines:
        assert line.text in md
    assert "can't allocate memory" in md
    assert_well_formed(md)


@pytest.mark.parametrize("args, message", [
    (["--log", "/nonexistent/run.log"], "not a readable file"),
    (["--log", "-"], "needs a file"),
    (["-o", "/nonexistent-dir/r.md"], "directory does not exist"),
    (["--", "bash", "/nonexistent/run.sh"], "cannot read launch script"),
])
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = run_doctor("report", *args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr


@pytest.mark.slow
def test_one_gigabyte_log_gives_a_bounded_report_and_bundle(tmp_path):
    """A 1 GB log (a failure in the middle, secrets throughout, an endless line): the report and the
    bundle stay under their bounds, say what was cut, and still carry the evidence."""
    from doctor.report import BUNDLE_TAIL, MAX_MARKDOWN_BYTES

    log = tmp_path / "huge.log"
    step = "".join(f"(WorkerDict pid=1{i}, ip=10.0.0.2) step:{i} - actor/pg_loss:0.0{i} - "
                   f"response_length/mean:128.0 - timing_s/gen:1.2{i}\n" for i in range(10)).encode()
    block = step * ((8 << 20) // len(step))
    failure = (FIXTURES / "verl-batch-not-divisible.log").read_bytes()
    with log.open("wb") as fh:
        for i in range(128):
            fh.write(block)
            if i == 63:
                fh.write(failure + f"Authorization: Bearer {BEARER}\n".encode() + b"x" * (3 << 20) + b"\n")
        fh.write(f"last line with {HF}\n".encode())
    assert log.stat().st_size >= 1 << 30
    md_path, bundle = tmp_path / "r.md", tmp_path / "b.tar.gz"
    try:
        r = run_doctor("report", "--log", str(log), "-o", str(md_path), "--bundle", str(bundle),
                       cwd=tmp_path, env=planted_env(), timeout=600)
    finally:
        log.unlink()  # a gigabyte is not left behind in pytest's kept temp dirs
    assert r.returncode == 1, r.stderr
    md = md_path.read_text()
    assert len(md.encode()) <= MAX_MARKDOWN_BYTES
    assert_no_secret(md, "markdown")
    assert_well_formed(md)
    top = explain_paths([str(FIXTURES / "verl-batch-not-divisible.log")])[0]  # the failure planted
    assert top.title in "\n".join(md.splitlines()[:8])
    assert all(line.text in md for line in top.lines)
    assert "is cut to" in md  # the report states the bundle's cut
    assert bundle.stat().st_size < 4 << 20
    with tarfile.open(bundle) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    cut_log = (tmp_path / "unpacked/doctor-report/logs/huge.log").read_text()
    assert cut_log.startswith("# doctor: huge.log cut from")
    assert_no_secret(cut_log, "bundled log")
    assert len(cut_log.splitlines()) < BUNDLE_TAIL + 200



def test_many_logs_stay_under_the_bound(tmp_path):
    """Hundreds of explained logs with long lines: shortened step by step, still well formed, every
    log still named in the verdict."""
    from doctor import report
    from doctor.report_markdown import to_markdown

    log = tmp_path / "long-lines.log"
    log.write_text("".join(f"line {i} {'x' * 600}\n" for i in range(200))
                   + (FIXTURES / "verl-batch-not-divisible.log").read_text()
                   + "".join(f"after {i} {'y' * 600}\n" for i in range(100)))
    doc, _cuts = report.build_document(report.ReportRequest(argv=["report"], logs=[str(log)], cwd=tmp_path))
    for copies in (40, 300):
        many = dict(doc, logs=[dict(doc["logs"][0], name=f"node{i}.log") for i in range(copies)])
        many["verdict"] = dict(doc["verdict"], lines=[f"node{i}.log: {doc['verdict']['lines'][0]}" for i in range(copies)])
        md = to_markdown(many)
        assert len(md.encode()) <= report.MAX_MARKDOWN_BYTES
        assert_well_formed(md)
        assert "to stay under the size bound" in md
        assert f"node{copies - 1}.log" in "\n".join(md.splitlines()[: copies + 5])
