"""Choosing the host communicator (the multi-process paths run for real in
test_launch_spawn, test_preflight and test_netns)."""

import pytest

from ncclbench.core.errors import BenchError
from ncclbench.launch.bootstrap import make_host_comm, mpi_impossible_reason
from ncclbench.launch.detect import detect_launch
from ncclbench.launch.hostcomm import SingleHostComm

SLURM = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_ID": "0",
         "SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "localhost"}


def test_single_process_needs_no_network():
    assert isinstance(make_host_comm(detect_launch({}), 5), SingleHostComm)
    one = detect_launch({"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"})
    assert isinstance(make_host_comm(one, 5), SingleHostComm)


def test_backend_mpi_needs_an_mpi_launch():
    assert "srun without PMI (--mpi=none)" in mpi_impossible_reason(detect_launch(SLURM))
    assert mpi_impossible_reason(detect_launch({**SLURM, "PMI_RANK": "0", "PMI_SIZE": "2"})) is None
    torch = detect_launch({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "TORCHELASTIC_RUN_ID": "x"})
    with pytest.raises(BenchError) as e:
        make_host_comm(torch, 5, require_mpi=True)
    assert e.value.code == 6 and "mpiexec -n N" in e.value.message


def test_no_rendezvous_address_is_a_clear_error():
    with pytest.raises(BenchError) as e:
        make_host_comm(detect_launch({"RANK": "1", "WORLD_SIZE": "2"}), 5)
    assert e.value.code == 6 and "set MASTER_ADDR and MASTER_PORT" in e.value.message


def test_forcing_an_unknown_host_comm_is_refused(monkeypatch):
    monkeypatch.setenv("NCCLBENCH_HOSTCOMM", "gloo")
    with pytest.raises(BenchError):
        make_host_comm(detect_launch({}), 5)
