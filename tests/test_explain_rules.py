"""Every rule of the catalog explains its own fixtures first; clean logs give no finding.

Fixtures are real: excerpts of public logs (URL on line 1) or failures reproduced here (the
command on line 1). The scripts that reproduced them are in tests/fixtures/explain/repro/:
verl_cases.sh (verl's entry point with bad overrides), py_cases.sh (imports, workdir, allocation
failures), and cases.py NAME for verl/torch/transformers functions in the project's venv:

    reward-file   get_custom_reward_fn(reward.custom_reward_function.path=rewards/gsm8k_reward.py)
    reward-name   the same with a file that defines `score` but not `compute_score`
    data-source   verl.utils.reward_score.default_compute_score("gsm8k", ...)
    empty-dataset verl.trainer.ppo.utils.create_rl_sampler(data_config, [])
    data-missing  RLHFDataset(data_files=["data/gsm8k/train.parquet"], ...)
    flash-attn    AutoModelForCausalLM.from_config(tiny Qwen2, attn_implementation="flash_attention_2")
    nccl          init_process_group("cpu:gloo,cuda:nccl") + all_reduce on cuda (CPU torch)
    no-vllm       from vllm import LLM
    rollout-name  omega_conf_to_dataclass(compose("ppo_trainer").actor_rollout_ref.rollout)
    rollout-sync  the same with rollout.name=vllm rollout.mode=sync
    model-path    AutoConfig.from_pretrained("/models/Qwen2.5-0.5B-Instruct") (absent)
    rollout-hf    verl.workers.rollout.base.get_rollout_class("hf", "async")

The Ray cases ran `actors.py CASE`: ray.init(num_cpus=2, include_dashboard=False,
_node_ip_address="127.0.0.1"), then for `unschedulable` ray.get(needs_gpu.remote(), timeout=30)
with `@ray.remote(num_gpus=1) def needs_gpu()` on a CPU-only node.

The reference trainer's phase failures ran `python -m trainer.main_grpo` on a local Ray node
(trainer_oom.sh), or `phase_oom.py HEADROOM_MIB OVERRIDES...`, which runs the trainer's own Worker
in one process: Trainer(config_from_overrides(embedded_default() + overrides)).prepare(); a Worker(cfg, plan,
rank 0, world 1).setup(); then limit_memory(data_memory() + HEADROOM) (RLIMIT_DATA, as
trainer.worker_memory_limit sets it) and one train_step - a real allocation failure in the phase
the overrides make largest.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from matching.catalog import load_rules
from matching.explain import Matcher, explain_paths, explain_report, explain_text
from matching.terminal import generic

from .conftest import SHARED, run_doctor, run_python

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "explain"
# runs that did not fail: the shared research corpus, and runs captured here
CLEAN_LOGS = sorted((SHARED / "research" / "clean-logs").glob("*.log")) + sorted(
    (FIXTURES / "clean").glob("*.log"))
RULES = load_rules()
BY_ID = {r.id: r for r in RULES}
CLASSES = generic().classes  # the generic layer under the rules (knowledge/generic.toml)


def header_lines(path: Path) -> int:
    """How many lines the fixture's header takes: its `# source:` line and any `# note:` after it."""
    lines = path.read_text(errors="replace").splitlines()
    return next((i for i, ln in enumerate(lines) if not ln.startswith(("# source: ", "# note: "))), len(lines))


def fixtures_of(rule_id: str) -> list[Path]:
    return sorted([FIXTURES / f"{rule_id}.log", *FIXTURES.glob(f"{rule_id}--*.log")])


def fixture_cases(items=RULES):
    for rule in items:
        for path in fixtures_of(rule.id):
            yield pytest.param(rule.id, path, id=path.stem)


@pytest.mark.parametrize("rule", [r.id for r in RULES] + [c.id for c in CLASSES])
def test_every_rule_has_a_sourced_fixture(rule):
    paths = [p for p in fixtures_of(rule) if p.exists()]
    assert paths, f"rule {rule} has no fixture tests/fixtures/explain/{rule}.log"
    for path in paths:
        first = path.read_text(errors="replace").splitlines()[0]
        assert first.startswith("# source: http") or first.startswith("# source: reproduced here: "), \
            f"{path.name}: line 1 must be '# source: <URL>' or '# source: reproduced here: <command>'"


@pytest.mark.parametrize("rule,path", [c for c in fixture_cases() if c.values[1].exists()])
def test_fixture_is_explained_by_its_rule_first(rule, path):
    found = explain_paths([str(path)])
    assert found, f"{path.name}: nothing explained"
    ranked = [f.rule for f in found]
    if BY_ID[rule].consequence and found[0].rule != rule:
        # a consequence's own log may show its cause as well: then the cause comes first, even when
        # only the generic layer names it (issue 12, part 3); the consequence is still reported
        assert found[0].generic and not found[0].consequence and rule in ranked, (
            f"{path.name}: ranked {ranked}, expected {rule} or a cause before it")
    else:
        assert found[0].rule == rule, f"{path.name}: ranked {ranked}, expected {rule} first"
    assert found[0].lines and all(ln.n > header_lines(path) for ln in found[0].lines)  # not the header's


@pytest.mark.parametrize("cid,path", [c for c in fixture_cases(CLASSES) if c.values[1].exists()])
def test_generic_fixture_is_explained_by_its_class_first(cid, path):
    """The generic layer on its own (no rules) classifies its fixture, as a cause, with a lower
    confidence; with the whole catalog, something explains it (a rule written since may name it)."""
    alone = explain_report([str(path)], matcher=Matcher([], generic())).findings
    assert alone, f"{path.name}: nothing explained"
    top = alone[0]
    assert top.rule == cid, f"{path.name}: ranked {[f.rule for f in alone]}, expected {cid} first"
    assert top.generic and not top.consequence and top.confidence < 0.6
    assert top.lines and all(ln.n > header_lines(path) for ln in top.lines)
    assert explain_paths([str(path)]), f"{path.name}: nothing explained with the whole catalog"


def test_no_orphan_fixtures():
    ids = {r.id for r in RULES} | {c.id for c in CLASSES}
    orphans = [p.name for p in FIXTURES.glob("*.log") if p.stem.split("--")[0] not in ids]
    assert not orphans, f"fixtures without a rule: {orphans}"


@pytest.mark.skipif(not CLEAN_LOGS, reason="shared clean logs not present")
@pytest.mark.parametrize("path", CLEAN_LOGS, ids=[p.name for p in CLEAN_LOGS])
def test_clean_logs_have_no_finding(path):
    found = explain_paths([str(path)])
    assert found == [], f"{path.name}: false finding {[(f.rule, f.lines[0].text) for f in found]}"


def test_a_too_long_sequence_is_the_cause_only_when_indexing_failed():
    # transformers' warning alone is no failure (a preprocessing step that truncates later runs on)
    text = (FIXTURES / "sequence-longer-than-model.log").read_text().split("\n", 1)[1]
    warning = next(ln for ln in text.splitlines() if "Token indices sequence length" in ln)
    assert [f.rule for f in explain_text(warning + "\nstep:1 - loss:0.5\n")] == []
    assert explain_text(text)[0].rule == "sequence-longer-than-model"
    # with CUDA's form of the same failure it outranks the device-side assert it explains
    cuda = (FIXTURES / "sequence-longer-than-model--cuda.log").read_text().split("\n", 1)[1]
    assert [f.rule for f in explain_text(cuda, all=True)][:2] == ["sequence-longer-than-model", "cuda-device-side-assert"]


def test_vllms_invalid_model_path_inside_pydantics_report():
    # vLLM >= 0.10 raises it from ModelConfig's validation: pydantic prints it on the line under its own
    text = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
            "  Value error, Invalid repository ID or local directory specified: '/models/Qwen2-0.5B-Instruct'.\n"
            "Please verify the following requirements:\n"
            "1. Provide a valid Hugging Face repository ID.\n"
            "2. Specify a local directory that contains a recognized configuration file.\n"
            "   - For Hugging Face models: ensure the presence of a 'config.json'.\n")
    top = explain_text(text)[0]
    assert (top.rule, top.category) == ("verl-model-path-invalid", "workdir")
    assert "Qwen2-0.5B-Instruct" in top.lines[0].text


def test_a_rule_yields_only_to_generic_classes_that_exist():
    ids = {c.id for c in generic().classes}
    assert all(set(r.yields_to) <= ids for r in load_rules()), [r.id for r in load_rules() if set(r.yields_to) - ids]


def test_a_missing_module_raised_in_a_source_checkout_of_its_package_is_imports(tmp_path):
    # the first failure the project exists for: a vllm/ checkout (its compiled part never built) in the launch
    # directory shadows the installed package. The missing-module rule yields to the source-tree class, which
    # sees the frames; an installed package's missing module stays the rule's (versions).
    import subprocess
    import sys
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("from vllm._C import ops\n")
    run = subprocess.run([sys.executable, "-c", "import vllm"], cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert f'File "{tmp_path}/vllm/__init__.py"' in run.stderr and "No module named 'vllm._C'" in run.stderr
    top = explain_text(run.stderr)[0]
    assert (top.rule, top.category) == ("generic-import-source-tree", "imports")
    assert any("No module named 'vllm._C'" in ln.text for ln in top.lines)
    # also with another rule's line printed right after it (pip's, in the same output)
    pip = "ERROR: No matching distribution found for vllm-ascend==9.9\n"
    rules = [f.rule for f in explain_text(run.stderr + pip)]
    assert "generic-import-source-tree" in rules and "python-module-not-found" not in rules
    # it keeps the rule's place: the earliest cause, before a later, unrelated one
    later = run.stderr + "INFO step done\n" * 300 + (FIXTURES / "memory-cuda-oom.log").read_text().split("\n", 1)[1]
    assert [f.rule for f in explain_text(later)][:2] == ["generic-import-source-tree", "memory-cuda-oom"]
    absent = subprocess.run([sys.executable, "-c", "import vllm_doctor_absent"], cwd=tmp_path, capture_output=True,
                            text=True, env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert explain_text(absent.stderr)[0].rule == "python-module-not-found"
    page = run_doctor("rules", "python-module-not-found")
    assert page.returncode == 0 and "unless the generic layer reads the same line as generic-import-source-tree" in page.stdout


# Each way datasets (the installed release) refuses a column the dataset lacks, raised for real by
# a real interpreter: the rule matches the words every one of them shares, not one log's line.
DATASETS_COLUMN_CALLS = [
    'ds["prompt"]',
    'ds.select_columns(["prompt"])',
    'ds.remove_columns(["prompt"])',
    'ds.rename_column("prompt", "query")',
    'ds.rename_columns({"prompt": "query"})',
    'ds.map(lambda q: {"n": 1}, input_columns=["prompt"])',
    'ds.map(lambda e: e, remove_columns=["prompt"])',
    'ds.unique("prompt")',
    'ds.class_encode_column("prompt")',
    'ds.with_format("numpy", columns=["prompt"])',
    'list(ds.to_iterable_dataset().rename_columns({"prompt": "query"}))',
    'ds.to_iterable_dataset().select_columns(["prompt"])',
    'ds.sort("prompt")',
]


@pytest.mark.parametrize("call", DATASETS_COLUMN_CALLS)
def test_every_missing_column_refusal_of_datasets_is_named(call, tmp_path):
    r = run_python("import datasets\n"
                   "ds = datasets.Dataset.from_dict({'question': ['1+1?'], 'answer': ['2']})\n"
                   f"{call}\n", tmp_path)
    assert r.returncode != 0, r.stdout  # the call really failed
    found = explain_text(r.stdout)
    assert found and found[0].rule == "datasets-column-missing", (r.stdout[-600:], found[:1])
