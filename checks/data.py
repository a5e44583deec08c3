"""Data and reward (category `data`): the files, columns and prompt lengths verl will meet, and the
custom reward function it will call, checked before launch.

File structure is read here with pyarrow (footers and a few columns). Prompt lengths come from the
config probe (`probes/verl_config.py`), which applies the model's own tokenizer and chat template in
the target interpreter, as verl's RLHFDataset filter does, on a sample of rows (sample size stated).
The reward file is loaded in the same probe, with verl's own loader when verl is there.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from checks.model import Finding
from checks.registry import check

SUFFIXES = (".parquet", ".json", ".jsonl")  # what RLHFDataset accepts (rl_dataset.py:169-178)
REWARD_KWARGS = ("data_source", "solution_str", "ground_truth", "extra_info")  # naive.py:66-84


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def resolve(path: str, cwd: Path) -> Path:
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else cwd / p


def inspect_parquet(path: Path, prompt_key: str, source_key: str) -> dict[str, Any]:
    """Rows, columns and the shape of the columns verl needs (no full read)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    schema = pf.schema_arrow
    info: dict[str, Any] = {"rows": pf.metadata.num_rows, "columns": schema.names, "problems": []}
    problems = info["problems"]
    if prompt_key not in schema.names:
        problems.append(f"no '{prompt_key}' column (data.prompt_key)")
    else:
        t = schema.field(prompt_key).type
        is_chat = (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_struct(t.value_type) \
            and {"role", "content"} <= {f.name for f in t.value_type}
        if not is_chat:
            problems.append(f"'{prompt_key}' is {t}, not a list of chat messages {{role, content}}: the chat "
                            "template fails on every row and verl's filter drops them all")
    if source_key not in schema.names:
        problems.append(f"no '{source_key}' column (data.reward_fn_key): the reward manager needs it")
    else:
        col = pf.read(columns=[source_key]).column(0)
        info["data_sources"] = sorted(str(v) for v in col.unique().to_pylist() if v is not None)
    if "reward_model" not in schema.names:
        problems.append("no 'reward_model' column: the reward manager reads reward_model['ground_truth']")
    else:
        t = schema.field("reward_model").type
        if not (pa.types.is_struct(t) and "ground_truth" in {f.name for f in t}) and not pa.types.is_map(t):
            problems.append(f"'reward_model' is {t}, without a 'ground_truth' field")
    return info


def _session(ctx):
    from checks.verl_config import session

    return session(ctx)


@check("data.files", "data", "Training data files", needs=("launch", "config"), scope="launch")
def check_files(ctx):
    """What it checks: each file of data.train_files and data.val_files, from the launch directory: it
    exists, is a type verl's RLHFDataset reads (.parquet, .json, .jsonl), reads as parquet, and has
    the columns verl uses: data.prompt_key as chat messages [{role, content}], data.reward_fn_key
    (data_source) and reward_model.ground_truth; and the training files hold at least one
    data.train_batch_size of rows. Footers and two columns are read (pyarrow), not the whole file.

    How the job fails without it: when the dataset is built, after Ray starts:
    `FileNotFoundError: Unable to find '.../train.parquet'`; a prompt column of plain strings fails
    the chat template on every row, so the overlong filter drops them all; fewer rows than a batch
    give an epoch of 0 steps (the dataloader drops the partial batch); without ground_truth the
    reward manager raises a KeyError at the first step.

    Fix: the path as it is from the launch directory (or absolute); the layout of verl's GSM8K
    preprocessing (https://github.com/volcengine/verl/blob/main/examples/data_preprocess/gsm8k.py):
    data_source, prompt=[{"role": "user", "content": ...}], reward_model={"ground_truth": ...};
    a data.train_batch_size no larger than the rows.

    After the fact: verl-data-file-not-found, verl-dataset-empty"""
    composed = _session(ctx).composed
    prompt_key = composed.get("data.prompt_key", "prompt")
    source_key = composed.get("data.reward_fn_key", "data_source")
    B = composed.get("data.train_batch_size")
    out = []
    for key in ("data.train_files", "data.val_files"):
        total = 0
        for f in _as_list(composed.get(key)):
            p = resolve(f, ctx.cwd)
            fid = f"data.{key.split('.')[1]}"
            if not p.exists() and not ctx.judges_this_machine:  # the data lives on the cluster
                out.append(Finding(fid, "data", "skip", f"{key}: not on this machine",
                                   f"{p} is not here; --scope launch does not judge this machine's paths"))
                continue
            if not p.exists():
                out.append(Finding(fid, "data", "fail", f"{key}: file not found", f"{p} does not exist "
                                   f"(relative paths start from {ctx.cwd})", f"check {key} or --cwd",
                                   {"path": str(p), "fact": f"missing:{os.path.abspath(p)}"}))
                continue
            if p.suffix not in SUFFIXES:
                out.append(Finding(fid, "data", "fail", f"{key}: unsupported file type",
                                   f"{p}: verl reads only {', '.join(SUFFIXES)}", "convert it to parquet"))
                continue
            if p.suffix != ".parquet":
                continue
            try:
                info = inspect_parquet(p, prompt_key, source_key)
            except Exception as exc:
                out.append(Finding(fid, "data", "fail", f"{key}: not readable as parquet",
                                   f"{p}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                                   "rewrite the file (pandas.DataFrame.to_parquet)", {"path": str(p)}))
                continue
            total += info["rows"]
            for problem in info["problems"]:
                out.append(Finding(fid, "data", "fail", f"{key}: column layout verl cannot use",
                                   f"{p}: {problem}", "see verl's GSM8K preprocess layout: data_source, "
                                   "prompt=[{role, content}], reward_model={ground_truth}", {"path": str(p)}))
        if key == "data.train_files" and isinstance(B, int) and 0 < total < B:
            out.append(Finding("data.too_few_rows", "data", "fail", "Fewer prompts than one training batch",
                               f"{total} rows in data.train_files but data.train_batch_size={B}: the dataloader "
                               "drops the partial batch, so an epoch has 0 steps",
                               f"data.train_batch_size={total} or more data"))
    return out


@check("data.prompt_length", "data", "Prompt lengths vs data.max_prompt_length",
       needs=("launch", "config_probe"), scope="launch")
def check_prompt_length(ctx):
    """What it checks: the length in tokens of the training prompts against data.max_prompt_length,
    counted as verl's RLHFDataset filter counts them: the model's own tokenizer and chat template
    (apply_chat_template(messages, add_generation_prompt=True)), run in the target interpreter, on
    every row or a random sample of 1000 per file (the finding says which); and that the tokenizer loads.

    How the job fails without it: with data.filter_overlong_prompts=True the longer rows are dropped
    at start-up (all of them: an empty dataset); with data.truncation='error' a long prompt raises
    `Prompt length 700 is longer than 512`; with the filter off, prompts are left-truncated and the
    model answers questions whose start it never saw.

    Fix: data.max_prompt_length=<the longest prompt, rounded up to 64> (the finding computes it), or
    data.filter_overlong_prompts=True to drop the few that are longer; a model path whose tokenizer
    loads (actor_rollout_ref.model.path / tokenizer_path).

    After the fact: verl-prompt-too-long-truncation-error, verl-dataset-empty, vllm-prompt-longer-than-max-model-len"""
    title = "Prompt lengths vs data.max_prompt_length"
    sess = _session(ctx)
    data = sess.probe.get("data") or {}
    if data.get("error"):
        return [Finding("data.prompt_length", "data", "warn", title, f"could not measure: {data['error']}")]
    if data.get("tokenizer_error"):
        path = sess.composed.get("actor_rollout_ref.model.tokenizer_path") or sess.composed.get(
            "actor_rollout_ref.model.path")
        return [Finding("data.tokenizer", "data", "fail", "The model's tokenizer does not load",
                        f"{path}: {data['tokenizer_error']}", "check actor_rollout_ref.model.path",
                        {"path": str(path)})]
    limit = data.get("max_prompt_length")
    filtering = bool(sess.composed.get("data.filter_overlong_prompts"))
    out = []
    for entry in data.get("files", []):
        if "over" not in entry:
            continue
        rows, sample, over = entry.get("rows") or 0, entry.get("sample") or 0, entry["over"]
        scope = f"all {rows} rows" if sample >= rows else f"a random sample of {sample} of {rows} rows"
        estimate = over if sample >= rows else round(over * rows / max(sample, 1))
        measured = (f"{over} of {scope} exceed max_prompt_length={limit} tokens with {data.get('tokenizer')} and its "
                    f"chat template (longest {entry.get('max_tokens')})")
        if entry.get("failed"):
            measured += f"; {entry['failed']} rows fail the chat template ({'; '.join(data.get('template_failures', []))})"
        evidence = {"path": entry["path"], "rows": rows, "sample": sample, "over": over, "estimate": estimate,
                    "max_tokens": entry.get("max_tokens")}
        if not over:
            out.append(Finding("data.prompt_length", "data", "pass", title, measured, evidence=evidence))
        elif filtering:
            status = "fail" if estimate >= rows else "warn"
            out.append(Finding("data.prompt_length", "data", status,
                               f"filter_overlong_prompts will drop ~{estimate} of {rows} rows",
                               measured, f"data.max_prompt_length={_round(entry.get('max_tokens') or limit)} "
                               "to keep them", evidence))
        else:
            out.append(Finding("data.prompt_length", "data", "warn", f"~{estimate} prompts will be left-truncated",
                               measured + "; with filter_overlong_prompts=False verl left-truncates them at rollout",
                               f"data.max_prompt_length={_round(entry.get('max_tokens') or limit)} or "
                               "data.filter_overlong_prompts=True", evidence))
    return out


def _round(n: int) -> int:
    """Up to the next multiple of 64."""
    return ((int(n) + 63) // 64) * 64


@check("data.reward", "data", "Custom reward function", needs=("launch",), scope="launch")
def check_reward(ctx):
    """What it checks: the custom reward function (reward.custom_reward_function.path and .name in
    verl 0.9): the file exists from the launch directory, loads in the target interpreter (with
    verl's own loader where verl is installed), defines the named function, and accepts verl's call
    `compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`
    (https://github.com/volcengine/verl/blob/main/verl/trainer/ppo/reward.py).

    How the job fails without it: after the models load, minutes in: `Custom module file not found:
    module_path='./reward.py'`, `Object not found in module: object_name='compute_score'`, or a
    TypeError at the first reward call (a keyword the function does not take).

    Fix: an absolute path, or launch from the directory that holds the file; define
    `def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`.

    After the fact: verl-reward-file-not-found, verl-reward-function-not-found"""
    from checks.verl_config import reward_target

    title = "Custom reward function"
    sess = _session(ctx)
    path, name = reward_target(sess.composed)
    if not path:
        return [Finding("data.reward", "data", "pass", title, "no custom reward: verl's default scorer by data_source")]
    file = path[len("file://"):] if path.startswith("file://") else path
    if not path.startswith("pkg://") and not resolve(file, ctx.cwd).is_file():
        return [Finding("data.reward", "data", "fail", "Reward file not found",
                        f"Custom module file not found: module_path='{path}' (looked in {ctx.cwd}; verl reads it "
                        "relative to the launch directory, after the models load)",
                        "use an absolute path, or launch from the directory that holds it", {"path": path})]
    reply = (sess.probe or {}).get("reward")
    if reply is None:
        return [Finding("data.reward", "data", "skip", title, f"not loaded: {sess.probe_error or 'no probe'}")]
    if reply.get("error"):
        return [Finding("data.reward", "data", "fail", "Reward function does not load",
                        reply["error"], f"check {path} defines {name}", {"path": path})]
    missing = _unaccepted(reply.get("params"))
    if missing:
        return [Finding("data.reward", "data", "fail", "Reward function signature does not fit verl's call",
                        f"{name} in {path} does not accept {', '.join(missing)}: verl calls it as "
                        f"{name}(data_source=..., solution_str=..., ground_truth=..., extra_info=...)",
                        f"def {name}(data_source, solution_str, ground_truth, extra_info=None, **kwargs)",
                        {"params": reply.get("params")})]
    return [Finding("data.reward", "data", "pass", title, f"{name} in {path} loads and accepts verl's arguments")]


def _unaccepted(params: list[dict] | None) -> list[str]:
    """What a call with verl's keyword arguments would trip on: a keyword the function does not take,
    or a parameter it requires that verl never passes."""
    if params is None:
        return []
    by_keyword = {p["name"] for p in params if p["kind"] in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")}
    any_keyword = any(p["kind"] == "VAR_KEYWORD" for p in params)
    missing = [k for k in REWARD_KWARGS if k not in by_keyword and not any_keyword]
    required = [f"(required) {p['name']}" for p in params if not p["default"]
                and p["kind"] not in ("VAR_KEYWORD", "VAR_POSITIONAL")
                and (p["name"] not in REWARD_KWARGS or p["kind"] == "POSITIONAL_ONLY")]
    return missing + required


def registered_source(source: str, table: dict) -> bool:
    return source in table.get("exact", []) or any(source.startswith(p) for p in table.get("prefixes", []))


@check("config.reward_source", "config", "Every data_source has a scorer", needs=("launch",), scope="launch")
def check_reward_source(ctx):
    """What it checks: without a custom reward function, that every data_source in the training
    files has a scorer in verl's default_compute_score (asked of verl itself in the config probe
    where verl is installed, else the list in knowledge/verl_keys.toml [reward_sources]).

    How the job fails without it: in the first step, after rollout: `NotImplementedError: Reward
    function is not implemented for data_source='my_math'`
    (https://github.com/volcengine/verl/blob/main/verl/utils/reward_score/__init__.py).

    Fix: reward.custom_reward_function.path=<file.py> reward.custom_reward_function.name=compute_score,
    or write the data_source verl scores (e.g. openai/gsm8k) into the files.

    After the fact: verl-reward-data-source-unknown"""
    from checks.config import key_table
    from checks.verl_config import reward_target

    sess = _session(ctx)
    if reward_target(sess.composed)[0] and sess.composed.get("reward.custom_reward_function.path"):
        return []  # a custom reward function scores every row
    files = [resolve(f, ctx.cwd) for f in _as_list(sess.composed.get("data.train_files"))]
    key = sess.composed.get("data.reward_fn_key", "data_source")
    sources: set[str] = set()
    for p in files:
        if not p.is_file():
            continue  # data.files reports it (and pyarrow's import is not paid for nothing)
        try:
            sources.update(inspect_parquet(p, "prompt", key).get("data_sources", []))
        except Exception:  # data.files reports unreadable files
            continue
    table = key_table().get("reward_sources", {})
    verl_says = ((sess.probe or {}).get("data") or {}).get("registered") or {}
    unknown = sorted(s for s in sources if not verl_says.get(s, registered_source(s, table)))
    if not unknown:
        return []
    legacy = sess.composed.get("custom_reward_function.path")
    note = (f" The top-level custom_reward_function.path={legacy} is ignored by verl 0.9 (see config.ignored_key)."
            if legacy else "")
    return [Finding("config.reward_source", "config", "fail", "data_source with no scorer and no custom reward",
                    f"NotImplementedError: Reward function is not implemented for data_source='{unknown[0]}'"
                    f" ({len(unknown)} unregistered: {', '.join(unknown[:5])}); verl raises it per sample during "
                    f"the first step.{note}",
                    "reward.custom_reward_function.path=<file.py> reward.custom_reward_function.name=compute_score, "
                    "or a registered data_source such as openai/gsm8k",
                    {"data_sources": unknown, "source": table.get("source")})]
