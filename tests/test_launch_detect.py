"""Launcher detection from the variables each launcher really sets (docs/launching.md)."""

import pytest

from ncclbench.core.errors import BenchError
from ncclbench.launch.detect import _slurm_local_size, derive_token, detect_launch, expand_hostlist, slurm_port


def test_expand_hostlist_ranges_padding_and_plain_names():
    assert expand_hostlist("node[01-03,7],gpu5") == ["node01", "node02", "node03", "node7", "gpu5"]
    assert expand_hostlist("a[8-11]") == ["a8", "a9", "a10", "a11"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("single") == ["single"]
    assert expand_hostlist("x[009-011].dc") == ["x009.dc", "x010.dc", "x011.dc"]
    assert expand_hostlist("x[009-011]-ib") == ["x009-ib", "x010-ib", "x011-ib"]
    assert expand_hostlist("") == []


@pytest.mark.parametrize("bad", ["node[1-", "node]1[", "n[3-1]", "n[a-b]"])
def test_expand_hostlist_rejects_malformed(bad):
    with pytest.raises(ValueError):
        expand_hostlist(bad)


OMPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "PMIX_RANK": "3", "PMIX_NAMESPACE": "prterun-vm-123@1"}
HYDRA = {"PMI_RANK": "1", "PMI_SIZE": "4", "PMI_FD": "9", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4",
         "PMI_HOSTNAME": "vm"}
SLURM = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "1",
         "SLURM_NODEID": "1", "SLURM_NNODES": "2", "SLURM_STEP_NODELIST": "gpu[07-08]",
         "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_STEP_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_ID": "4242",
         "SLURM_STEP_ID": "0"}
TORCHRUN = {"RANK": "6", "WORLD_SIZE": "16", "LOCAL_RANK": "6", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "0",
            "MASTER_ADDR": "head.example", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job7"}


def test_open_mpi():
    i = detect_launch(OMPI)
    assert (i.kind, i.rank, i.size, i.local_rank, i.local_size) == ("ompi", 3, 8, 1, 2)
    assert i.mpi_capable and i.master_addr is None


def test_open_mpi_wins_inside_a_slurm_allocation():
    env = {**SLURM, **OMPI, "SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_STEP_NUM_TASKS": "1"}
    assert detect_launch(env).kind == "ompi"


def test_mpirun_with_exported_master_addr_can_use_tcp():
    i = detect_launch({**OMPI, "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "1234"})
    assert (i.master_addr, i.master_port) == ("10.1.2.3", 1234)


def test_hydra():
    i = detect_launch(HYDRA)
    assert (i.kind, i.rank, i.size, i.local_rank, i.local_size, i.mpi_capable) == ("mpich-hydra", 1, 4, 1, 4, True)


def test_slurm_without_pmi():
    i = detect_launch(SLURM)
    assert (i.kind, i.rank, i.size, i.local_rank, i.local_size) == ("slurm", 5, 8, 1, 4)
    assert i.master_addr == "gpu07" and i.master_port == slurm_port("4242", "0")
    assert not i.mpi_capable  # srun --mpi=none: MPI_Init would make singletons
    assert i.job_id == "4242.0"


def test_srun_pmi2_is_slurm_with_mpi():
    i = detect_launch({**SLURM, "PMI_RANK": "5", "PMI_SIZE": "8", "PMI_FD": "7"})
    assert i.kind == "slurm" and i.mpi_capable


def test_srun_pmix_is_slurm_with_mpi():
    i = detect_launch({**SLURM, "PMIX_RANK": "5", "PMIX_NAMESPACE": "slurm.pmix.4242.0"})
    assert i.kind == "slurm" and i.mpi_capable


def test_hydra_under_slurm_allocation_is_hydra():
    # mpiexec inside sbatch: proxies are srun tasks (one per node) but PMI describes the ranks
    env = {**SLURM, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", **HYDRA}
    assert detect_launch(env).kind == "mpich-hydra"


def test_sbatch_script_itself_is_not_a_step():
    env = {k: v for k, v in SLURM.items() if k not in ("SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS")}
    env["SLURM_PROCID"] = "0"
    assert detect_launch(env).kind == "single"
    env["SLURM_STEP_ID"] = str(0xFFFFFFFB)  # the batch pseudo-step
    assert detect_launch(env).kind == "single"


def test_torchrun_uses_the_port_after_master_port():
    i = detect_launch(TORCHRUN)
    assert (i.kind, i.rank, i.size, i.local_rank, i.local_size) == ("torchrun", 6, 16, 6, 8)
    assert (i.master_addr, i.master_port, i.job_id) == ("head.example", 29501, "job7")


def test_torchrun_under_srun_is_torchrun():
    env = {**SLURM, "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", **TORCHRUN}
    assert detect_launch(env).kind == "torchrun"


def test_plain_env_and_default_port():
    i = detect_launch({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1"})
    assert (i.kind, i.master_addr, i.master_port) == ("env", "10.0.0.1", 29500)


def test_nccl_comm_id():
    i = detect_launch({"RANK": "0", "WORLD_SIZE": "4", "NCCL_COMM_ID": "10.0.0.9:5000"})
    assert (i.kind, i.master_addr, i.master_port, i.comm_id) == ("comm-id", "10.0.0.9", 5001, "10.0.0.9:5000")
    with pytest.raises(BenchError):
        detect_launch({"RANK": "0", "WORLD_SIZE": "4", "NCCL_COMM_ID": "nohostport"})


def test_spawn_vars_win_over_inherited_launchers():
    env = {**SLURM, **TORCHRUN, "SLURM_NTASKS": "1", "NCCLBENCH_SPAWN_RANK": "2", "NCCLBENCH_SPAWN_SIZE": "4",
           "NCCLBENCH_SPAWN_ADDR": "127.0.0.1", "NCCLBENCH_SPAWN_PORT": "4000", "NCCLBENCH_SPAWN_TOKEN": "t0k"}
    i = detect_launch(env)
    assert (i.kind, i.rank, i.size, i.master_port, i.token) == ("ncclbench-spawn", 2, 4, 4000, "t0k")


def test_single_and_overrides():
    i = detect_launch({})
    assert (i.kind, i.rank, i.size) == ("single", 0, 1)
    i = detect_launch({**SLURM, "NCCLBENCH_MASTER_ADDR": "gpu08-ib", "NCCLBENCH_MASTER_PORT": "4100"})
    assert (i.master_addr, i.master_port) == ("gpu08-ib", 4100)


@pytest.mark.parametrize("env", [
    {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "4"},
    {"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "a"},
])
def test_bad_values_are_clear_errors(env):
    with pytest.raises(BenchError) as e:
        detect_launch(env)
    assert e.value.code == 6


def test_tokens_agree_within_a_job_and_differ_between_jobs():
    a = derive_token(detect_launch(SLURM))
    b = derive_token(detect_launch({**SLURM, "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}))
    c = derive_token(detect_launch({**SLURM, "SLURM_JOB_ID": "4243"}))
    assert a == b != c
    assert derive_token(detect_launch({**SLURM, "NCCLBENCH_TOKEN": "s3cret"})) == "s3cret"


def test_slurm_port_range_and_local_size():
    ports = {slurm_port(str(j), str(s)) for j in range(1000, 1100) for s in range(3)}
    assert all(20000 <= p < 30000 for p in ports) and len(ports) > 250
    assert _slurm_local_size({"SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "3"}) == 1
    assert _slurm_local_size({"SLURM_STEP_TASKS_PER_NODE": "2(x3),1", "SLURM_NODEID": "2"}) == 2
