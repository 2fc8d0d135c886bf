import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


@pytest.fixture(scope="session")
def ncclbench_env():
    """Environment for subprocesses: the package on PYTHONPATH, no result store
    writes outside a temp dir, NVLS off (harmless without GPUs)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("NCCLBENCH_NO_STORE", "1")
    env["NCCL_NVLS_ENABLE"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="session")
def mpiexec():
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        pytest.fail("no mpiexec found: install the test extra (pip install -e '.[test]', MPICH wheel)")
    return exe


@pytest.fixture(autouse=True)
def _gpu_guard(request):
    """Tests marked `gpu` skip cleanly where no GPU is usable."""
    if request.node.get_closest_marker("gpu") is None:
        return
    sys.path.insert(0, str(SRC))
    from ncclbench.backends.select import gpu_count

    if gpu_count() == 0:
        pytest.skip("no NVIDIA GPU/driver usable here")
