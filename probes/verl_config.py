"""The config/data probe: runs INSIDE the target interpreter (`python -c <this file>`, cwd = the launch
directory, env = the launch environment), so it sees the verl, transformers and reward file that the
real job would see. Stdlib at import time; everything else is imported inside the task that needs it,
and every task reports its own failure instead of failing the probe.

Request (JSON on stdin, in two parts: the first line is enough to compose, so the probe composes
while doctor prepares the rest, which it reads after composing):
  {"overrides": [...],            # Hydra override strings, as on the command line
   "config_dir": null,            # null: verl's packaged config dir, found without importing verl
   "validate": false,             # also run verl's own validate_config (imports verl: ~20 s)
   "data": true, "sample": 1000,  # prompt token lengths of data.train_files (sampled)
   "check_sources": true}         # ask verl's default scorer about the data_source values found
  {"fallback_config": {...},      # doctor's snapshot composition, used when verl's is unavailable
   "reward": {"path": ..., "name": ...}}
Reply (JSON on stdout, last line): one key per task that was asked for.

`compose_all` is also imported by doctor itself to compose against the snapshot in `knowledge/verl/`.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
import threading
import traceback

_HYDRA_LOCK = threading.Lock()  # Hydra keeps global state: one compose at a time per process


def verl_config_dir() -> str | None:
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "trainer", "config")
    return path if os.path.isfile(os.path.join(path, "ppo_trainer.yaml")) else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def compose_all(config_dir: str | None, overrides: list[str], config_name: str = "ppo_trainer",
                base: dict | None = None):
    """Compose like Hydra: `config_dir`'s defaults tree (or an already-flat `base` mapping, the
    snapshot), then each override applied by Hydra's own applier. An override Hydra rejects is
    recorded with Hydra's message and skipped, so every bad override is reported, not just the first.
    Returns (resolved config as plain containers or None, errors)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    errors: list[dict] = []
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            parsed += parser.parse_overrides([text])
        except HydraException as exc:
            errors.append({"override": text, "type": type(exc).__name__, "message": _first_line(exc)})
    with _HYDRA_LOCK:
        if base is not None:
            cfg = OmegaConf.create(base)
            OmegaConf.set_struct(cfg, True)
            rest = parsed
        else:
            groups = [o for o in parsed if _is_group(config_dir, o.key_or_group)]
            rest = [o for o in parsed if o not in groups]
            try:
                cfg = _hydra_compose(config_dir, config_name, [o.input_line for o in groups])
            except (HydraException, OmegaConfBaseException) as exc:
                errors.append({"override": None, "type": type(exc).__name__, "message": _first_line(exc)})
                return None, errors
        for ov in rest:
            try:
                _apply(ov, cfg)
            except (HydraException, OmegaConfBaseException) as exc:
                errors.append({"override": ov.input_line, "type": type(exc).__name__,
                               "message": _first_line(exc)})
        try:
            return OmegaConf.to_container(cfg, resolve=True), errors
        except OmegaConfBaseException as exc:
            errors.append({"override": None, "type": type(exc).__name__, "message": _first_line(exc)})
            return None, errors


def _is_group(config_dir: str | None, key: str) -> bool:
    group = key.split("@", 1)[0]
    return bool(config_dir) and os.path.isdir(os.path.join(config_dir, group))


def _hydra_compose(config_dir: str, config_name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.abspath(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=overrides)


def _apply(override, cfg) -> None:
    """Hydra's own override application (what compose does once the defaults tree is built)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    ConfigLoaderImpl._apply_overrides_to_config([override], cfg)


def _task_compose(req: dict) -> dict:
    config_dir = req.get("config_dir") or verl_config_dir()
    if config_dir is None:
        return {"available": False}
    resolved, errors = compose_all(config_dir, req.get("overrides") or [])
    return {"available": True, "config_dir": config_dir, "config": resolved, "errors": errors}


def _task_validate(req: dict, cfg: dict) -> dict:
    """verl's own start-up validation on the composed config, exactly as main_ppo calls it."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    return run_validate(OmegaConf.create(cfg), validate_config, need_reference_policy, need_critic)


def run_validate(cfg, validate_config, need_reference_policy, need_critic, with_traceback: bool = False) -> dict:
    """One validate_config call; the exception (innermost cause, verl's wording) or ok. `with_traceback`:
    also the traceback as the interpreter prints it (the log a launch that fails this way leaves)."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), _quiet_warnings():
            validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except Exception as exc:  # verl raises Assertion/Value errors, wrapped by Hydra's instantiate
        inner = exc
        while inner.__cause__ is not None:
            inner = inner.__cause__
        verdict = {"ok": False, "type": type(inner).__name__, "message": _first_line(inner) if str(inner) else "",
                   "outer": _first_line(exc)}
        if with_traceback:
            verdict["traceback"] = "".join(traceback.format_exception(exc))
        return verdict
    return {"ok": True, "printed": out.getvalue().strip().splitlines()}


@contextlib.contextmanager
def _quiet_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _get(cfg: dict | None, dotted: str, default=None):
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _config(req: dict, reply: dict) -> dict:
    """The composed config: verl's own when it composed, else the snapshot doctor sent along."""
    composed = reply.get("compose") or {}
    return composed.get("config") or req.get("fallback_config") or {}


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def _task_data(req: dict, cfg: dict) -> dict:
    """Prompt lengths with the model's own tokenizer and chat template, as RLHFDataset's filter counts
    them (apply_chat_template(messages, add_generation_prompt=True, tokenize=True)), on a sample."""
    prompt_key = _get(cfg, "data.prompt_key", "prompt")
    max_len = _get(cfg, "data.max_prompt_length")
    paths = [os.path.expanduser(p) for p in _as_list(_get(cfg, "data.train_files"))]
    files, samples, sources = _read_files(paths, prompt_key, _get(cfg, "data.reward_fn_key", "data_source"),
                                          int(req.get("sample", 1000)))
    out: dict = {"files": files, "prompt_key": prompt_key, "max_prompt_length": max_len,
                 "data_sources": sorted(sources)}
    if req.get("check_sources") and sources:
        out["registered"] = _registered(sorted(sources))
    model_path = _get(cfg, "actor_rollout_ref.model.path")
    tok_path = _get(cfg, "actor_rollout_ref.model.tokenizer_path") or model_path
    if samples and tok_path and not os.path.isdir(os.path.expanduser(str(tok_path))):
        out["tokenizer_error"] = (f"{tok_path} is not a directory here (doctor reads local models only; "
                                  "a hub id would be downloaded by verl at start-up)")
    elif samples and tok_path:
        try:
            lengths, failures, kind = _token_lengths(os.path.expanduser(str(tok_path)), [m for _, m in samples])
        except Exception as exc:
            out["tokenizer_error"] = f"{type(exc).__name__}: {_first_line(exc)}"
        else:
            out["tokenizer"] = kind
            out["template_failures"] = failures
            _count_lengths(files, samples, lengths, max_len)
    return out


def _read_files(paths: list[str], prompt_key: str, source_key: str, limit: int) -> tuple[list, list, set]:
    """Each parquet file's rows and data sources, and a sample of (file index, messages) to measure."""
    import random

    files: list[dict] = []
    samples: list[tuple[int, list]] = []
    sources: set[str] = set()
    pq = _parquet(paths)
    for i, path in enumerate(paths):
        entry = {"path": path}
        files.append(entry)
        if pq is None:
            entry["error"] = "not a file"
            continue
        try:
            pf = pq.ParquetFile(path)
            rows = pf.metadata.num_rows
            names = pf.schema_arrow.names
            entry["rows"] = rows
            if source_key in names:
                col = pf.read(columns=[source_key]).column(0)
                sources.update(str(v) for v in col.unique().to_pylist())
            if prompt_key not in names:
                continue
            picked = sorted(random.Random(0).sample(range(rows), limit)) if rows > limit else range(rows)
            column = pf.read(columns=[prompt_key]).column(0).take(list(picked)).to_pylist()
            entry["sample"] = len(column)
            samples += [(i, messages) for messages in column]
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {_first_line(exc)}"
    return files, samples, sources


def _count_lengths(files: list[dict], samples: list, lengths: list, max_len) -> None:
    """Per file: the longest prompt, how many failed the template, how many are over max_len."""
    for i, entry in enumerate(files):
        mine = [n for (fi, _), n in zip(samples, lengths) if fi == i]
        if mine:
            ok = [n for n in mine if n is not None]
            entry["max_tokens"] = max(ok) if ok else None
            entry["failed"] = sum(n is None for n in mine)
            entry["over"] = sum(n is None or (max_len is not None and n > max_len) for n in mine)


def _parquet(paths: list[str]):
    """pyarrow.parquet, or None when there is no file to read (its import costs more than the rest of
    the probe's data task, and a missing file is reported as such). With a file to read and no pyarrow
    here the task fails, as verl's dataset would."""
    if any(os.path.isfile(p) for p in paths):
        import pyarrow.parquet as pq

        return pq
    return None


def _token_lengths(path: str, prompts: list) -> tuple[list, list, str]:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    lengths: list[int | None] = []
    failures: list[str] = []
    for messages in prompts:
        try:
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            lengths.append(len(ids))
        except Exception as exc:  # verl counts such a row as too long and drops it
            lengths.append(None)
            if len(failures) < 3:
                failures.append(f"{type(exc).__name__}: {_first_line(exc)}")
    return lengths, failures, type(tok).__name__


def _task_reward(req: dict, cfg: dict) -> dict:
    """Load the custom reward function the way verl does, and read its signature."""
    import inspect

    path, name = req["reward"]["path"], req["reward"].get("name")
    if req.get("validate"):  # --deep: verl's own loader (importing verl costs ~20 s)
        from verl.utils.import_utils import load_extern_object

        fn = load_extern_object(module_path=path, object_name=name)
    else:  # the same steps as verl.utils.import_utils, with its messages
        file = path[len("file://"):] if path.startswith("file://") else path
        if not os.path.exists(file):
            raise FileNotFoundError(f"Custom module file not found: module_path='{file}'")
        mspec = importlib.util.spec_from_file_location("custom_module", file)
        module = importlib.util.module_from_spec(mspec)
        try:
            mspec.loader.exec_module(module)
        except Exception as exc:
            raise RuntimeError(f"Error loading module from module_path='{file}': "
                               f"{type(exc).__name__}: {_first_line(exc)}") from exc
        if not hasattr(module, name or ""):
            raise AttributeError(f"Object not found in module: object_name='{name}', module_path='{file}'.")
        fn = getattr(module, name)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {"callable": callable(fn), "params": None}
    params = [{"name": p.name, "kind": p.kind.name, "default": p.default is not inspect.Parameter.empty}
              for p in sig.parameters.values()]
    return {"callable": callable(fn), "params": params, "coroutine": inspect.iscoroutinefunction(fn)}


def _registered(sources: list[str]) -> dict | None:
    """Which data_source values verl's default scorer dispatches (an unregistered one raises).
    None when verl is not importable here."""
    try:
        from verl.utils.reward_score import default_compute_score
    except Exception:
        return None
    out = {}
    for source in sources:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                default_compute_score(source, "", "0")
            out[source] = True
        except NotImplementedError:
            out[source] = False
        except Exception:  # the scorer exists and choked on the dummy answer
            out[source] = True
    return out


# Tasks that need the composed config get it as a second argument.
TASKS = {"validate": _task_validate, "data": _task_data, "reward": _task_reward}


def main() -> None:
    req = json.loads(sys.stdin.readline() or "{}")
    reply: dict = {"python": sys.executable, "verl_version": None}
    try:
        from importlib.metadata import version

        reply["verl_version"] = version("verl")
    except Exception:
        pass
    try:
        reply["compose"] = _task_compose(req)
    except Exception as exc:
        reply["compose"] = {"error": f"{type(exc).__name__}: {_first_line(exc)}"}
    req.update(json.loads(sys.stdin.read() or "{}"))
    cfg = _config(req, reply)
    for name, task in TASKS.items():
        if not req.get(name):
            continue
        try:
            reply[name] = task(req, cfg)
        except BaseException as exc:  # one task failing must not hide the others
            reply[name] = {"error": f"{type(exc).__name__}: {_first_line(exc)}"}
    sys.stdout.write("\n" + json.dumps(reply, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
