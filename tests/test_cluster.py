"""`doctor check --cluster` on two real "hosts" (network namespaces, tests/netns.py): a Ray head in A,
a worker in B. Each test plants one difference on node B (by restarting only B's `ray start` with
another environment or bind mount) and asserts the finding names host-b. The doctor process runs
inside namespace A, as the driver of a real job would."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.netns import ROOT, NetnsCluster, running_cluster

pytestmark = pytest.mark.netns

MODEL_BYTES = 2_500_000


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    base = Path(tmp_path_factory.mktemp("cluster"))
    layout = _lay_out(base)

    def only_host_a_has_eth7(cluster: NetnsCluster) -> None:
        cluster.add_interface("a", "eth7", "10.231.78.1/24")

    with running_cluster(base, f"vdcc{int(time.time()) % 1000}", env={"GLOO_SOCKET_IFNAME": "eth6"},
                         prepare=only_host_a_has_eth7) as cluster:
        cluster.layout = layout
        cluster.b_plant = "identical"
        yield cluster


def _lay_out(base: Path) -> dict[str, Path]:
    """The job's files as host-a has them, and the variants host-b gets in the tests."""
    d = {name: base / name for name in ("launch", "model", "data", "model-missing", "model-other",
                                        "launch-vllm", "site-old-verl")}
    for p in d.values():
        p.mkdir()
    config = json.dumps({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64})
    weights = bytes(range(256)) * (MODEL_BYTES // 256)
    (d["model"] / "config.json").write_text(config)
    (d["model"] / "model.safetensors").write_bytes(weights)
    (d["model-missing"] / "config.json").write_text(config)  # the weights were never copied
    (d["model-other"] / "config.json").write_text(config)
    other = bytearray(weights)
    other[MODEL_BYTES // 2] ^= 0xFF  # one byte in the middle: same size, other content
    other[-1] ^= 0xFF
    (d["model-other"] / "model.safetensors").write_bytes(bytes(other))
    pq.write_table(pa.table({"prompt": ["1+1=?", "2+2=?"], "answer": ["2", "4"]}), d["data"] / "train.parquet")
    vllm = d["launch-vllm"] / "vllm"  # a vllm source checkout left in the launch directory
    vllm.mkdir()
    (vllm / "__init__.py").write_text("")
    site = d["site-old-verl"]  # an older verl installed in a directory on PYTHONPATH
    (site / "verl").mkdir()
    (site / "verl" / "__init__.py").write_text("__version__ = '0.7.0'\n")
    dist = site / "verl-0.7.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.7.0\n\n")
    (dist / "RECORD").write_text("verl/__init__.py,,\nverl-0.7.0.dist-info/METADATA,,\n")
    return d


def _plant(cluster: NetnsCluster, name: str) -> None:
    """Restart host-b's Ray with one difference (or none)."""
    if cluster.b_plant == name:
        return
    lay = cluster.layout
    env = {"GLOO_SOCKET_IFNAME": "eth6"}
    binds = {}
    if name == "old-verl":
        env["PYTHONPATH"] = str(lay["site-old-verl"])
    elif name == "model-missing":
        binds[str(lay["model"])] = str(lay["model-missing"])
    elif name == "model-other":
        binds[str(lay["model"])] = str(lay["model-other"])
    elif name == "eth7":
        env["GLOO_SOCKET_IFNAME"] = "eth7"
    elif name == "vllm-in-launch-dir":
        binds[str(lay["launch"])] = str(lay["launch-vllm"])
    cluster.stop_node("b", grace=2.0)
    cluster.wait_nodes(1)
    cluster.start_ray("b", env=env, binds=binds)
    cluster.wait_nodes(2)
    cluster.b_plant = name


def _doctor(cluster: NetnsCluster, *extra: str, root: Path = ROOT) -> tuple[dict, float]:
    """`doctor check --cluster` from host A, run from the doctor checkout at `root`."""
    lay = cluster.layout
    argv = [cluster.python, "-m", "doctor", "check", "--cluster", cluster.address, "--json",
            "--python", cluster.python, "--cwd", str(lay["launch"]),
            "--skip", "config,data,memory",  # they read the launch only, once; other tests cover them
            "--timeout", "30",  # a loaded CI machine is slow to start python on a node
            *extra, "--",
            "python3", "-m", "verl.trainer.main_ppo",
            f"actor_rollout_ref.model.path={lay['model']}", f"data.train_files={lay['data'] / 'train.parquet'}",
            "trainer.nnodes=2", "trainer.n_gpus_per_node=1"]
    t0 = time.monotonic()
    r = cluster.run("a", argv, cwd=root, timeout=300)
    elapsed = time.monotonic() - t0
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout), elapsed


def _failures(doc: dict, id_prefix: str = "cluster.") -> list[dict]:
    return [f for f in doc["findings"] if f["status"] == "fail" and f["id"].startswith(id_prefix)]


def test_identical_pair_passes_and_gloo_all_reduce_runs_over_eth6(two_hosts):
    _plant(two_hosts, "identical")
    doc, _ = _doctor(two_hosts, "--deep")
    assert _failures(doc) == []
    by_id = {f["id"]: f for f in doc["findings"] if f["category"] == "cluster"}
    assert by_id["cluster.link"]["status"] == "pass"
    gloo = by_id["cluster.collective"]
    assert gloo["status"] == "pass" and gloo["evidence"]["backend"] == "gloo"
    assert gloo["evidence"]["bandwidth_MBps"] > 0 and gloo["evidence"]["latency_us"] > 0
    assert gloo["evidence"]["master"] == two_hosts.nodes["a"].ip


def _only_on_b(doc: dict, id: str) -> list[dict]:
    hits = [f for f in _failures(doc) if f["id"] == id]
    assert hits, [(f["id"], f["title"]) for f in _failures(doc)]
    assert all(f["node"] == "host-b" for f in hits), hits
    return hits


def test_older_verl_on_node_b_import_path(two_hosts):
    _plant(two_hosts, "old-verl")
    doc, _ = _doctor(two_hosts)
    (version,) = [f for f in _only_on_b(doc, "cluster.versions") if "verl" in f["title"]]
    assert "0.7.0 on host-b" in version["message"] and "0.9.1 on host-a" in version["message"]
    (where,) = _only_on_b(doc, "cluster.imports")
    assert str(two_hosts.layout["site-old-verl"]) in where["message"]


def test_model_file_missing_on_node_b(two_hosts):
    _plant(two_hosts, "model-missing")
    doc, _ = _doctor(two_hosts)
    (f,) = _only_on_b(doc, "cluster.paths")
    assert "actor_rollout_ref.model.path" in f["message"] and "files missing on host-b" in f["title"]
    assert f["evidence"]["missing"] == ["model.safetensors"]


def test_model_file_with_other_content_on_node_b(two_hosts):
    _plant(two_hosts, "model-other")
    doc, _ = _doctor(two_hosts)
    (f,) = _only_on_b(doc, "cluster.paths")
    assert "different content: model.safetensors" in f["message"]
    sizes = {v["size"] for v in f["evidence"]["values"].values()}
    assert len(sizes) == 1  # same size: only the fingerprint tells them apart


def test_vllm_source_tree_in_node_b_launch_directory(two_hosts):
    _plant(two_hosts, "vllm-in-launch-dir")
    doc, _ = _doctor(two_hosts)
    (f,) = _only_on_b(doc, "cluster.imports")
    assert "import vllm" in f["title"] and "(launch directory)" in f["message"]


def test_gloo_interface_only_node_a_has(two_hosts):
    _plant(two_hosts, "eth7")
    doc, elapsed = _doctor(two_hosts, "--deep", "--timeout", "20")
    env = _only_on_b(doc, "cluster.env")
    (f,) = [f for f in env if "no interface eth7" in f["title"]]
    assert "exists on host-a" in f["message"] and "export GLOO_SOCKET_IFNAME=eth6 " in f["fix"]
    gloo = [f for f in _failures(doc, "cluster.collective")]
    assert any(f["node"] == "host-b" and "eth7" in json.dumps(f) for f in gloo), gloo
    assert elapsed < 150  # the hung rank on host-a was cut off at the bound
