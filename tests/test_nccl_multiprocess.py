"""create_nccl_workers across two MPI processes on a machine without a GPU:
setup failures are agreed on world-wide, so every process stops with one
clear error instead of some waiting forever for the others."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.mpi

MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")

SCRIPT = textwrap.dedent("""
    from ncclbench.backends.nccl_setup import create_nccl_workers
    from ncclbench.core.config import BenchOptions
    from ncclbench.core.errors import BenchError
    from ncclbench.launch.hostcomm import MpiHostComm
    import sys
    host = MpiHostComm()
    # each rank writes its own file: stdout forwarded by mpiexec may interleave
    out = open(f"{sys.argv[1]}/rank{host.rank}.txt", "w")
    opts = BenchOptions(nccl_lib="/nonexistent/libnccl.so.2" if host.rank == 1 else None)
    try:
        create_nccl_workers(opts, host, "all_reduce")
        print(f"rank {host.rank}: created", file=out, flush=True)
    except BenchError as e:
        print(f"rank {host.rank}: code {int(e.code)}: {e}", file=out, flush=True)
""")


@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_one_bad_process_stops_every_process(tmp_path):
    pytest.importorskip("mpi4py")
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")  # Open MPI as root
    out = subprocess.run([MPIEXEC, "-n", "2", sys.executable, str(script), str(tmp_path)],
                         capture_output=True, text=True, timeout=120, env=env)
    lines = sorted((tmp_path / f"rank{r}.txt").read_text().strip() for r in range(2)
                   if (tmp_path / f"rank{r}.txt").exists())
    assert len(lines) == 2, out.stdout + out.stderr
    assert lines[1] == "rank 1: code 3: NCCL library not found: --nccl-lib=/nonexistent/libnccl.so.2 does not exist"
    # rank 0 fails on its own (no GPU here) or, with a GPU, learns of rank 1's failure
    assert lines[0].startswith(("rank 0: code 2: ", "rank 0: code 3: process 1: NCCL library not found"))
