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


def pytest_collection_modifyitems(config, items):
    """GPU tests skip cleanly where no GPU is usable."""
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    sys.path.insert(0, str(SRC))
    from ncclbench.backends.select import gpu_count

    if gpu_count() == 0:
        skip = pytest.mark.skip(reason="no NVIDIA GPU/driver usable here")
        for item in gpu_items:
            item.add_marker(skip)
