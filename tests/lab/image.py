"""A machine image under a temp dir: an interpreter with a stack installed, and a CANN + driver tree."""
from __future__ import annotations

from tests.lab.ascend import lay_cann, lay_driver, sourced_env
from tests.lab.pyenv import SEED_STACK, lay_stack, make_venv
from tests.lab.run import clean_env


def image(tmp_path, stack=SEED_STACK, cann="8.3.RC1", torch_cuda=None, driver="25.3.rc1", **fw):
    """(python, site-packages, Ascend root, env): `stack` installed, CANN `cann` (None: none) and
    the driver laid under the root, and the environment set_env.sh would publish (else just the root)."""
    python, site = make_venv(tmp_path / "env")
    lay_stack(site, stack, torch_cuda=torch_cuda)
    root = tmp_path / "ascend"
    if cann:
        lay_cann(root, cann)
    if driver:
        lay_driver(root, driver, **fw)
    env = clean_env(**sourced_env(root)) if cann else clean_env(DOCTOR_ASCEND_ROOT=str(root))
    return python, site, root, env
