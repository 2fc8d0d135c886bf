import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# The user's real result store must never see a test run.  Every test process (and every
# subprocess it starts with a copy of os.environ) finds the default store under this
# sentinel directory instead of ~/.local/share; `_user_store_guard` fails the test after
# which anything appeared there.  Set at import, before any test or fixture runs.
_GUARD_DIR = Path(tempfile.mkdtemp(prefix="ncclbench-store-guard-"))
_REAL_DATA_HOME = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
os.environ["XDG_DATA_HOME"] = str(_GUARD_DIR)


def guard_store_dir() -> Path:
    """Where a process that falls back to the default store writes during the tests."""
    return _GUARD_DIR / "ncclbench"


@pytest.fixture(autouse=True)
def _user_store_guard(request):
    """FAIL a test that wrote to the default result store (the user's
    ~/.local/share/ncclbench outside the tests): tests pass NCCLBENCH_DB or
    NCCLBENCH_NO_STORE=1 to whatever they run."""
    yield
    store = guard_store_dir()
    if store.exists():
        written = sorted(p.name for p in store.iterdir())
        shutil.rmtree(store, ignore_errors=True)
        pytest.fail(f"{request.node.nodeid} wrote to the default result store ({', '.join(written) or 'its directory'}; "
                    f"outside the tests: {_REAL_DATA_HOME}/ncclbench): give what it runs NCCLBENCH_DB or "
                    "NCCLBENCH_NO_STORE=1", pytrace=False)


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
