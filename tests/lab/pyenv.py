"""Real interpreters with real site directories.

`make_venv` creates a virtual environment (no pip, fast) whose interpreter doctor probes exactly as
it would a user's. `pip_install` really installs a tiny package built from source with pip (RECORD,
INSTALLER, direct_url.json written by pip). `lay_dist` writes a package plus the dist-info that pip
would write, for stacks too big to install here (torch_npu, vllm-ascend): the files doctor reads are
the same METADATA / RECORD pip produces, and nothing is ever imported.
"""
from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path


def make_venv(where: Path) -> tuple[Path, Path]:
    """(interpreter, site-packages) of a new virtual environment."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    python = where / "bin" / "python"
    site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    return python, site


def write_package(root: Path, name: str, version: str, init: bool = True, extra: dict | None = None) -> Path:
    """A source tree `root/name/` with an __init__.py that would announce itself if imported."""
    pkg = root / name
    pkg.mkdir(parents=True, exist_ok=True)
    if init:
        (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n")
    for rel, text in (extra or {}).items():
        f = pkg / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return pkg


def pip_install(site: Path, dist: str, version: str, import_name: str | None = None,
                work: Path | None = None) -> None:
    """Install a tiny real distribution into `site` with pip (offline, no deps): a wheel is built
    here with zipfile (a wheel is a zip with a dist-info), and pip unpacks it and writes RECORD,
    INSTALLER and the rest as for any package."""
    import base64
    import hashlib
    import zipfile

    import_name = import_name or dist.replace("-", "_")
    stem = f"{dist.replace('-', '_')}-{version}"
    files = {f"{import_name}/__init__.py": f"__version__ = {version!r}\n",
             f"{stem}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\n",
             f"{stem}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: doctor-tests\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    record = [f"{n},{digest(t)},{len(t.encode())}" for n, t in files.items()]
    files[f"{stem}.dist-info/RECORD"] = "\n".join(record + [f"{stem}.dist-info/RECORD,,"]) + "\n"
    wheel = (work or site.parent) / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for n, t in files.items():
            zf.writestr(n, t)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, text=True)


def lay_dist(site: Path, dist: str, version: str, import_name: str | None = None,
             requires: list[str] = (), files: dict | None = None) -> Path:
    """A package and its `*.dist-info` as pip lays them out (METADATA, RECORD, INSTALLER)."""
    import_name = import_name or dist.replace("-", "_")
    pkg = write_package(site, import_name, version, extra=files)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    meta = ["Metadata-Version: 2.1", f"Name: {dist}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n\n")
    (info / "INSTALLER").write_text("pip\n")
    record = [f"{p.relative_to(site)},," for p in sorted(pkg.rglob("*")) if p.is_file()]
    record += [f"{info.name}/{n},," for n in ("METADATA", "INSTALLER", "RECORD")]
    (info / "RECORD").write_text("\n".join(record) + "\n")
    return pkg


def torch_version_py(version: str, cuda: str | None = None) -> str:
    """torch/version.py as torch's build writes it."""
    cuda_s = repr(cuda) if cuda else "None"
    return (f"from typing import Optional\n__version__ = {version!r}\ndebug = False\n"
            f"cuda: Optional[str] = {cuda_s}\nhip: Optional[str] = None\n")


# The seed article's image: verl-8.3.rc1-910b-ubuntu22.04-py3.11 (a known-good set).
SEED_STACK = {
    "torch": "2.7.1+cpu",
    "torch_npu": "2.7.1",
    "vllm": "0.11.0+empty",
    "vllm-ascend": "0.11.0rc1",
    "verl": "0.7.0.dev0",
    "transformers": "4.57.1",
    # verl's own Requires-Dist pulls these in (ray[default]>=2.41.0, wandb): the image has them
    "ray": "2.51.1",
    "wandb": "0.22.3",
}


def lay_stack(site: Path, stack: dict[str, str], torch_cuda: str | None = None) -> None:
    for dist, version in stack.items():
        if dist == "torch":
            lay_dist(site, "torch", version, files={"version.py": torch_version_py(version, torch_cuda)})
        elif dist == "torch_npu":
            base = version.split("+")[0]
            lay_dist(site, "torch_npu", version, requires=[f"torch=={base.split('.post')[0]}+cpu"])
        else:
            lay_dist(site, dist, version)


def python_minor() -> str:
    return sysconfig.get_python_version()


def venv_over(where: Path, base_site: str | Path) -> tuple[Path, Path]:
    """A virtual environment that also sees `base_site` (a .pth line, as --system-site-packages
    would for a base interpreter): big packages installed there stay importable, and what is
    installed into the new site comes first."""
    python, site = make_venv(where)
    (site / "base-site.pth").write_text(f"{base_site}\n")
    return python, site


def pip_into(site: Path, *requirements: str) -> None:
    """Really install published wheels into `site` with pip (no deps: the base site has them)."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                    "--target", str(site), *requirements], check=True, capture_output=True, text=True)
