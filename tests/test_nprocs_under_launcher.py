"""`--nprocs N` under a launcher (`srun -n 1 --mpi=none ncclbench ... --nprocs 2`):
before, the benchmark ignored --nprocs and failed with exit 6 on a message that
suggested --nprocs (or, on GPUs, silently ran the launcher's one rank); now every
command that takes --nprocs says in one line that the launcher made the ranks and
what to ask it for, exit 255 (bad input).  Slurm is mimicked with its variables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ncclbench.core.errors import BenchError, ExitCode
from ncclbench.launch.bootstrap import mpi_impossible_reason
from ncclbench.launch.detect import check_nprocs, detect_launch

# what srun -n 1 --mpi=none sets for its one task
SLURM_ONE = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1", "SLURM_STEP_ID": "0",
             "SLURM_JOB_ID": "123", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_STEP_NODELIST": "localhost",
             "SLURM_MPI_TYPE": "none"}


@pytest.mark.parametrize("env, ask", [
    (SLURM_ONE, "srun -n 2"),
    ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "1"}, "mpirun -n 2"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"}, "the launcher's option"),
])
def test_nprocs_under_a_launcher_is_bad_input(env, ask):
    launch = detect_launch(env)
    check_nprocs(None, launch)  # the launcher's ranks, as started: fine
    with pytest.raises(BenchError) as info:
        check_nprocs(2, launch)
    assert info.value.code == ExitCode.ARGUMENT and ask in info.value.message
    assert f"started this process (rank {launch.rank} of {launch.size})" in info.value.message


def test_nprocs_without_a_launcher_or_in_ncclbenchs_own_ranks_is_honoured():
    check_nprocs(2, detect_launch({}))
    check_nprocs(2, detect_launch({"NCCLBENCH_SPAWN_SIZE": "2", "NCCLBENCH_SPAWN_RANK": "1",
                                   "NCCLBENCH_SPAWN_PORT": "1"}))


def test_the_mpi_launch_hint_does_not_suggest_nprocs_under_the_same_launcher():
    assert "ncclbench --nprocs N outside srun" in mpi_impossible_reason(detect_launch(SLURM_ONE))


@pytest.mark.parametrize("args", [
    ["all_reduce_perf", "-b", "8", "-e", "8", "--backend", "mpi", "--nprocs", "2"],  # was exit 6
    ["all_reduce_perf", "-b", "8", "-e", "8", "--backend", "nccl", "--nprocs", "2"],
    ["health", "--backend", "mpi", "--nprocs", "2"],
    ["preflight", "--nprocs", "2"],
    ["tune", "all_reduce", "-b", "8", "-e", "8", "--backend", "mpi", "--nprocs", "2"],
])
def test_srun_one_task_with_nprocs_is_one_line_exit_255(args, ncclbench_env):
    res = subprocess.run([sys.executable, "-m", "ncclbench", *args], env={**ncclbench_env, **SLURM_ONE},
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 255, res
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert "--nprocs 2 starts ranks where no launcher did, but srun started this process" in res.stderr
