"""`--deep`: does the stack actually import, and do a device op and a collective work? The imports run
in the target interpreter, and their failures (whole exception chain) are read with the explain
engine, so the finding names the innermost cause and its fix.
"""
from __future__ import annotations

from probes.facts import installed_dist, package, probe_of, winner_path
from checks.matrix import SITS, set_env_path, installed, matrix, placed
from checks.model import Problem
from checks.registry import check


# --- --deep: does the stack actually import, and do a device op and a collective work? -------

DEEP_SCRIPT = r"""
import json, sys, time, traceback
want = json.loads(sys.argv[1])
out = {}

def innermost(exc):
    # the first link of the chain: what `raise ... from` and "During handling" point back to
    seen = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        nxt = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if nxt is None:
            break
        exc = nxt
    return exc

def line(exc):
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:400]}"

def attempt(name, fn):
    t0 = time.perf_counter()
    try:
        out[name] = {"ok": True, "detail": fn()}
    except BaseException as exc:  # an import can raise anything, SystemExit included
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        out[name] = {"ok": False, "error": line(exc), "innermost": line(innermost(exc)),
                     "traceback": text[-20000:]}
    out[name]["seconds"] = round(time.perf_counter() - t0, 2)

attempt("torch", lambda: __import__("torch").__version__)
for mod in want["modules"] if out["torch"]["ok"] else ():  # after a failed torch, a retry fails anew
    attempt(mod, lambda mod=mod: getattr(__import__(mod), "__version__", "imported"))

def device_op():
    import torch
    if "torch_npu" in want["modules"]:
        return str(torch.ones(4).npu().sum().item())
    if torch.cuda.is_available():
        return str(torch.ones(4).cuda().sum().item())
    return "no accelerator: skipped"

def gloo():
    import socket, torch, torch.distributed as dist
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return str(t.tolist())

if out["torch"]["ok"]:
    attempt("device_op", device_op)
    attempt("gloo_all_reduce", gloo)
print(json.dumps(out))
"""

# Errors whose cause is the environment of CANN, not the package (Ascend/pytorch
# torch_npu/_init/core/module_loader.py _check_npu_import; its FAQ on libhccl.so).
_ENV_ERRORS = ("libhccl.so", "libascendcl.so", "libatb.so", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH")
_WHAT = {"device_op": "A tiny device op failed", "gloo_all_reduce": "A one-process Gloo all-reduce failed"}


def deep_probe(ctx, modules: list[str]) -> dict:
    import json
    import subprocess

    try:
        r = subprocess.run([ctx.python, "-c", DEEP_SCRIPT, json.dumps({"modules": modules})],
                           cwd=str(ctx.cwd), env=ctx.env, capture_output=True, text=True,
                           timeout=max(ctx.timeout, 10) * 6, start_new_session=True)
    except subprocess.TimeoutExpired:
        return {"error": f"importing the stack did not finish within {max(ctx.timeout, 10) * 6:g} s"}
    except OSError as exc:
        return {"error": f"cannot run {ctx.python}: {exc.strerror or exc}"}
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        return {"error": f"the interpreter died while importing the stack: {tail[:300]}"}


def _loads_installed(ctx, name: str) -> bool:
    """`import name` resolves to the files of its installed distribution (nothing shadows it)."""
    pkg = package(probe_of(ctx), name)
    dist = installed_dist(pkg) or {}
    return bool(dist.get("files_at")) and dist["files_at"] == winner_path(pkg.get("spec"))


def explained(ctx, name: str, result: dict):
    """The explain engine's root cause of one failure, read from its whole exception chain (the
    chain's first link is printed first, so a real cause outranks the RuntimeError built on it).
    A rule about a shadowing copy is dropped when the probe saw the installed copy load: Python's
    "(most likely due to a circular import)" is then a broken install, not a shadow."""
    from matching.explain import explain_text

    text = result.get("traceback") or result.get("error") or ""
    found = [e for e in explain_text(text) if not e.subsumed_by
             and not (e.category == "imports" and _loads_installed(ctx, name))]
    found.sort(key=lambda e: e.consequence)  # a consequence only when nothing names the cause
    return found[0] if found else None


def _cann_line(ctx, have: dict) -> str:
    """The concrete CANN step: source the one installed, else install the one torch_npu's line names."""
    cann = (ctx.get_facts().get("ascend") or {}).get("cann")
    if cann:
        return f"source {set_env_path(cann)}  (CANN {cann.get('version') or ''} is installed; its environment is not set)"
    row, how = placed("torch_npu", have.get("torch_npu")) if have.get("torch_npu") else (None, "")
    if row is None:
        return "install the CANN your torch_npu is built for (toolkit + kernels/ops), then source its set_env.sh"
    said = "" if how == "listed" else (f", the CANN of torch_npu {row['version']} (torch_npu {have['torch_npu']} "
                                        f"is {SITS[how]})")
    return f"install CANN {row['cann'][0]}{said} (toolkit + kernels/ops), then source its set_env.sh"


def deep_fix(ctx, name: str, result: dict, expl, have: dict) -> str:
    """A fix that follows the innermost cause: the explain rule's, with CANN made concrete."""
    cause = f"{result.get('innermost') or ''}\n{result.get('error') or ''}"
    if any(e in cause for e in _ENV_ERRORS):
        step = _cann_line(ctx, have)
        return f"{step}\n{expl.fix}" if expl else f"{step} (and /usr/local/Ascend/nnal/atb/set_env.sh for libatb)"
    if expl:
        return expl.fix
    if name in _WHAT:
        return "check the device (npu-smi info / nvidia-smi) and the loopback interface (ip link set lo up)"
    pip = matrix()["pip_names"].get(name, name)
    return f"pip install --force-reinstall --no-deps {pip}=={have.get(name) or '<version>'}"


def _deep_groups(ctx, result: dict) -> dict[str, list[tuple[str, dict, object]]]:
    """Failures grouped by cause (one finding per fact: `import torch` and `import torch_npu`
    failing on the same missing libhccl.so is one finding)."""
    groups: dict[str, list] = {}
    for name, r in result.items():
        if r.get("ok"):
            continue
        expl = explained(ctx, name, r)
        key = expl.rule if expl else (r.get("innermost") or r.get("error") or name)
        groups.setdefault(key, []).append((name, r, expl))
    return groups


def _deep_problem(ctx, group: list, have: dict) -> Problem:
    name, r, expl = group[0]
    names = [n for n, _, _ in group]
    imports = [f"`import {n}`" for n in names if n not in _WHAT]
    what = (" and ".join(imports) + (" fails" if len(imports) == 1 else " fail")) if imports else _WHAT[name]
    inner = r.get("innermost") or r.get("error")
    lines = [r["error"]] + ([f"innermost cause: {inner}"] if inner and inner != r["error"] else [])
    if expl:
        lines.append(expl.cause)
    return Problem("fail", "\n".join(lines), deep_fix(ctx, name, r, expl, have),
                   {"results": {n: res for n, res, _ in group}, "rule": expl.rule if expl else None},
                   f"{what}: {expl.title if expl else inner}")


@check("versions.deep", "versions", "The stack imports and runs (--deep)", needs=("deep",), scope="node")
def deep(ctx):
    """What it checks: the stack really imports in the target interpreter (torch, then torch_npu,
    vllm, vllm-ascend where installed), a tiny op runs on the device, and a one-process Gloo
    all-reduce works. A failure's whole exception chain goes through the explain engine, so the
    finding names the innermost cause and its fix follows that cause.
    How the job fails without it: the same import fails in every Ray worker a few minutes in.
    Fix: the explain rule's fix for the innermost cause (e.g. source or install CANN for a missing
    libhccl.so); a reinstall of the package only when nothing explains the failure.
    After the fact: npu-libhccl-missing, npu-libatb-missing, torch-npu-autoload-failed,
    npu-torch-npu-symbol-mismatch, npu-set-device-failed
    """
    have = installed(ctx)
    modules = [m for m in ("torch_npu", "vllm", "vllm_ascend") if have.get(m)]
    result = deep_probe(ctx, modules)
    if "error" in result:
        return [Problem("fail", result["error"],
                        f"run it by hand to see the traceback: {ctx.python} -c 'import torch'", result,
                        "Importing the stack failed")]
    out = [_deep_problem(ctx, g, have) for g in _deep_groups(ctx, result).values()]
    if not out:
        done = ", ".join(f"{k} ({v['seconds']} s)" for k, v in result.items())
        out.append(Problem("pass", done, evidence={"results": result}))
    return out
