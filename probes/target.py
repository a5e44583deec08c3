"""Run BY THE TARGET INTERPRETER (stdlib only, Python >= 3.8): where would each package of the stack
be imported from, which installed distribution owns it, and why the winning sys.path entry is where
it is. Nothing of the stack is imported: `find_spec` of a top-level name only searches the path.

Invoked as `python -c <this file's text> <json request>` from the launch directory, so sys.path is
built exactly as for the launch (`''` first, then PYTHONPATH, site-packages and `.pth` entries).
Prints one JSON document on stdout.
"""
import glob
import importlib.machinery
import importlib.util
import json
import os
import platform
import re
import site
import sys
import sysconfig

def _real(p):
    return os.path.realpath(p) if p else p


def _pth_entries():
    """sys.path entries added by .pth files: entry -> the .pth that added it."""
    dirs = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # virtualenv's old site.py
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    found = {}
    for d in dirs:
        for pth in sorted(glob.glob(os.path.join(d, "*.pth"))):
            try:
                with open(pth, encoding="utf-8", errors="replace") as fh:
                    lines = fh.read().splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith(("import ", "import\t")):
                    # Code run at startup; a quoted directory in it is most likely put on sys.path
                    # (`import sys; sys.path.insert(0, '/src')`), the way a path wins over site-packages.
                    for lit in re.findall(r"['\"]([^'\"]+)['\"]", line):
                        if os.path.isdir(lit):
                            found.setdefault(_real(lit), pth)
                    continue
                found.setdefault(_real(os.path.join(d, line)), pth)
    return found


def _path_reasons(path0_reason):
    """Why each sys.path entry is on the path, in order."""
    pythonpath = [_real(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    pth = _pth_entries()
    site_dirs = set()
    try:
        site_dirs.update(_real(d) for d in site.getsitepackages())
    except AttributeError:
        pass
    try:
        site_dirs.add(_real(site.getusersitepackages()))
    except AttributeError:
        pass
    stdlib = {_real(sysconfig.get_paths().get(k, "")) for k in ("stdlib", "platstdlib")}
    out = []
    for i, entry in enumerate(sys.path):
        real = _real(entry or os.getcwd())
        if i == 0 and path0_reason:
            why = path0_reason
        elif real in pythonpath:
            why = "PYTHONPATH"
        elif real in pth:
            why = "added by " + pth[real]
        elif real in site_dirs:
            why = "site-packages"
        elif real in stdlib or real.endswith(".zip") or "lib-dynload" in real:
            why = "standard library"
        else:
            why = "added at startup (sitecustomize or a .pth import line)"
        out.append({"index": i, "path": real, "why": why})
    return out


def _entry_of(path, entries):
    """The sys.path entry a file was found under (deepest match)."""
    best = None
    for e in entries:
        root = e["path"]
        if path == root or path.startswith(root.rstrip(os.sep) + os.sep):
            if best is None or len(root) > len(best["path"]):
                best = e
    return best


def _copies(name, entries):
    """Every place on sys.path that provides `name`: a package, a module, or a namespace portion."""
    suffixes = importlib.machinery.all_suffixes()
    out = []
    for e in entries:
        base = os.path.join(e["path"], name)
        if os.path.isdir(base):
            init = [s for s in suffixes if os.path.isfile(os.path.join(base, "__init__" + s))]
            kind = "package" if init else "namespace portion"
            out.append({"index": e["index"], "path": base, "kind": kind, "why": e["why"]})
            continue
        for s in suffixes:
            if os.path.isfile(base + s):
                out.append({"index": e["index"], "path": base + s, "kind": "module", "why": e["why"]})
                break
    return out


def _norm(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def _lines(path):
    """A file's lines, lazily: RECORD and METADATA can be megabytes; we stop early."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                yield line.rstrip("\n")
    except OSError:
        return


def _headers(lines):
    """Name / Version / Requires-Dist from METADATA or PKG-INFO (headers end at the first blank line)."""
    out = {"Requires-Dist": []}
    for line in lines:
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key == "Requires-Dist":
            out[key].append(value.strip())
        elif key in ("Name", "Version") and key not in out:
            out[key] = value.strip()
    return out


def _dist_index(entries):
    """normalized distribution name -> [(metadata dir, sys.path entry)], in sys.path order: the
    `*.dist-info` / `*.egg-info` directories importlib.metadata would find."""
    index = {}
    for e in entries:
        try:
            names = os.listdir(e["path"])
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist = name.split("-")[0]
            elif name.endswith(".egg-info"):
                dist = name[: -len(".egg-info")].split("-")[0]
            else:
                continue
            index.setdefault(_norm(dist), []).append((os.path.join(e["path"], name), e["path"]))
    return index


def _dist_info(dist_names, import_name, index):
    """Installed distributions of the package, read from the same METADATA, RECORD and
    direct_url.json importlib.metadata reads. Done by hand: importlib.metadata parses each METADATA
    several times and builds a path object per RECORD line (a second for torch alone)."""
    out = []
    for n in dict.fromkeys(_norm(n) for n in dist_names):
        for meta_dir, root in index.get(n, []):
            out.append(_one_dist(meta_dir, root, import_name))
    return out


def _one_dist(meta_dir, root, import_name):
    meta = os.path.join(meta_dir, "METADATA")
    head = _headers(_lines(meta if os.path.exists(meta) else os.path.join(meta_dir, "PKG-INFO")))
    info = {"name": head.get("Name"), "version": head.get("Version"), "metadata": _real(meta_dir),
            "files_at": None, "editable": False,
            # only the stack's own pins (torch_npu pins its torch), without optional extras
            "requires": [r for r in head["Requires-Dist"] if "extra ==" not in r
                         and re.match(r"(torch|vllm|transformers)\b", r)]}
    direct = _read(os.path.join(meta_dir, "direct_url.json"), 1 << 16)
    if direct:
        try:
            url = json.loads(direct)
            if url.get("dir_info", {}).get("editable"):
                info["editable"] = True
                src = url.get("url", "")
                if src.startswith("file://"):
                    info["source_dir"] = _real(src[len("file://"):])
        except ValueError:
            pass
    if meta_dir.endswith(".egg-info"):  # `setup.py develop`: the egg-info sits beside the package
        cand = os.path.join(root, import_name)
        info["editable"] = True
        info["files_at"] = _real(cand) if os.path.exists(cand) else None
        return info
    # RECORD names every installed file; the first one under the import name says where it lives.
    for line in _lines(os.path.join(meta_dir, "RECORD")):
        path = line.split(",", 1)[0]
        top = path.split("/", 1)[0]
        if top == import_name or ("/" not in path and top.split(".")[0] == import_name
                                  and top.endswith((".py", ".so", ".pyd"))):
            info["files_at"] = _real(os.path.join(root, top))
            break
    if info["files_at"] is None and info.get("source_dir"):
        for cand in (os.path.join(info["source_dir"], import_name),
                     os.path.join(info["source_dir"], "src", import_name)):
            if os.path.exists(cand):
                info["files_at"] = cand
                break
    return info


def _spec(name, entries):
    try:
        spec = importlib.util.find_spec(name)
    except Exception as exc:  # a broken finder on the path, a bad .pth
        return {"error": "%s: %s" % (type(exc).__name__, exc)}
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or [])
    namespace = spec.origin in (None, "namespace") and bool(locations)
    origin = _real(spec.origin) if spec.origin not in (None, "namespace", "built-in", "frozen") else None
    where = origin or (_real(locations[0]) if locations else None)
    entry = _entry_of(where, entries) if where else None
    return {"origin": origin, "locations": [_real(p) for p in locations], "namespace": namespace,
            "entry": entry}


def _read(path, limit=4096):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit)
    except OSError:
        return None


def _torch_build(spec):
    """cpu / cuda / rocm from torch/version.py, read as text (no import)."""
    if not spec or not spec.get("origin"):
        return None
    text = _read(os.path.join(os.path.dirname(spec["origin"]), "version.py"))
    if text is None:
        return None
    found = {}
    for key in ("__version__", "cuda", "hip", "rocm", "xpu"):
        m = re.search(r"^%s\s*(?::[^=]*)?=\s*(.+)$" % re.escape(key), text, re.M)
        if m:
            val = m.group(1).strip()
            found[key] = None if val == "None" else val.strip("'\"")
    kind = "cuda" if found.get("cuda") else "rocm" if (found.get("hip") or found.get("rocm")) else "cpu"
    return {"kind": kind, "version": found.get("__version__"), "cuda": found.get("cuda"),
            "hip": found.get("hip")}


def _module_file(spec, dotted):
    """Does `top.sub.mod` exist under the resolved top-level package? (no import of the parents)"""
    if not spec:
        return None
    parts = dotted.split(".")[1:]
    roots = spec.get("locations") or ([os.path.dirname(spec["origin"])] if spec.get("origin") else [])
    if not parts:
        return spec.get("origin") or (roots[0] if roots else None)
    for root in roots:
        base = os.path.join(root, *parts)
        for cand in (base + ".py", os.path.join(base, "__init__.py"), os.path.join(base, "__main__.py")):
            if os.path.isfile(cand):
                return _real(cand)
    return None


def main(argv):
    req = json.loads(argv[0]) if argv else {}
    path0 = req.get("path0")
    reason = None
    if sys.path and sys.path[0] == "" and not getattr(sys.flags, "safe_path", False):
        sys.path[0] = path0 or os.getcwd()
        reason = req.get("path0_reason") or "launch directory (python -m / -c put it first)"
    entries = _path_reasons(reason)
    packages, index = {}, _dist_index(entries)
    for name, dist_names in req.get("packages", {}).items():
        spec = _spec(name, entries)
        packages[name] = {"spec": spec, "copies": _copies(name, entries),
                          "dists": _dist_info(dist_names, name, index)}
    extra = {}
    torch = packages.get("torch", {}).get("spec")
    extra["torch_build"] = _torch_build(torch if isinstance(torch, dict) else None)
    verl = packages.get("verl", {}).get("spec")
    if isinstance(verl, dict) and verl.get("locations"):
        text = _read(os.path.join(verl["locations"][0], "version", "version"), 64)
        extra["verl_version_file"] = text.strip() if text else None
    module = req.get("module")
    if module:
        top = module.split(".")[0]
        spec = packages.get(top, {}).get("spec") if top in packages else _spec(top, entries)
        if top not in packages:
            packages[top] = {"spec": spec, "copies": _copies(top, entries), "dists": []}
        extra["module"] = {"name": module, "top": top,
                           "file": _module_file(spec if isinstance(spec, dict) else None, module)}
    out = {
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "prefix": sys.prefix, "base_prefix": getattr(sys, "base_prefix", sys.prefix),
                   "implementation": platform.python_implementation(), "machine": platform.machine()},
        "cwd": os.getcwd(),
        "sys_path": entries,
        "packages": packages,
    }
    out.update(extra)
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
