"""ncclbench under a real Slurm (one node, started by tests/slurm_cluster.py): srun
launches it with PMI (--mpi=pmi2: the CPU backend's MPI job) and without
(--mpi=none: ncclbench's own TCP rendezvous), and `health --drain-action slurm`
drains the node through scontrol, which sinfo shows with the reason; the node is
resumed after.  The fault is real measurement judged against a baseline no CPU
reaches (1000 GB/s), so the scan convicts the host for certain."""

from __future__ import annotations

import sys

import pytest
import slurm_cluster

from ncclbench.health.outputs.drain import resume_commands

pytestmark = pytest.mark.mpi
PY = sys.executable


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def pmi2(slurm):
    listed = slurm.run("srun", "--mpi=list")
    if "pmi2" not in listed.stdout + listed.stderr:
        pytest.skip("this Slurm has no pmi2 plugin")


@pytest.fixture
def task_env(ncclbench_env, slurm, tmp_path):
    """What srun's tasks inherit: ncclbench's source, no result store, this Slurm."""
    return dict(ncclbench_env, SLURM_CONF=slurm.env["SLURM_CONF"], NCCLBENCH_DB=str(tmp_path / "r.sqlite"))


def test_srun_with_pmi2_runs_the_cpu_backend(slurm, pmi2, task_env):
    p = slurm.run("srun", "-n", "2", "--mpi=pmi2", PY, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "64K",
                  "-f", "8", "--backend", "mpi", env=task_env)
    assert p.returncode == 0, p.stdout + p.stderr + slurm.logs()
    ranks = [line for line in p.stdout.splitlines() if line.startswith("#  Rank")]
    assert len(ranks) == 2 and f" on {slurm.node:>10} " in ranks[1]  # one MPI job of 2 ranks, not 2 singletons
    assert "# Out of bounds values : 0 OK" in p.stdout
    assert p.stdout.count("# Collective test concluded") == 1  # rank 0 alone writes


def test_srun_without_pmi_uses_ncclbench_rendezvous(slurm, task_env):
    p = slurm.run("srun", "-n", "2", "--mpi=none", PY, "-m", "ncclbench", "preflight", env=task_env)
    assert p.returncode == 0, p.stdout + p.stderr
    first = p.stdout.splitlines()[0]
    assert "2 process(es) on 1 host(s)" in first and "launcher: srun" in first and "host communication: tcp" in first
    # the CPU backend's collectives are MPI's: without PMI it says so in one line, nccl-tests' usage exit 6
    p = slurm.run("srun", "-n", "2", "--mpi=none", PY, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "8",
                  "--backend", "mpi", env=task_env)
    assert p.returncode == 6 and "srun without PMI (--mpi=none)" in p.stderr


def test_srun_one_task_with_nprocs_is_one_line_exit_255(slurm, task_env):
    """The launcher made the ranks: --nprocs under it is bad input (before: exit 6 on a line that
    suggested --nprocs); tests/test_nprocs_under_launcher.py covers every command without Slurm."""
    p = slurm.run("srun", "-n", "1", "--mpi=none", PY, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "8",
                  "--backend", "mpi", "--nprocs", "2", env=task_env)
    assert p.returncode == 255, p.stdout + p.stderr
    assert p.stderr.count("ncclbench:") == 1 and "Traceback" not in p.stderr
    assert "but srun started this process (rank 0 of 1): ask it for the ranks (srun -n 2)" in p.stderr


def test_health_drains_the_node_and_sinfo_shows_the_reason(slurm, pmi2, task_env, tmp_path):
    base = tmp_path / "impossible.json"
    base.write_text('{"name": "impossible", "busbw": {"local:1x1": [1000, 10]}, "lat_us": {}}')
    health = ["srun", "-n", "2", "--mpi=pmi2", PY, "-m", "ncclbench", "health", "--backend", "mpi", "--phases",
              "local", "--bw-size", "64K", "-n", "5", "--cycles", "1", "--baseline", str(base), "--no-store",
              "--drain-action", "slurm"]
    assert slurm.wait_state(("idle",)) == "idle"  # the previous test's job may still be completing
    try:
        dry = slurm.run(*health, "--dry-run", env=task_env)
        assert dry.returncode == 8, dry.stdout + dry.stderr
        # CPU-backend ranks drive no GPU: the reason names them as ranks (issue 32)
        line = f"scontrol update NodeName={slurm.node} State=DRAIN 'Reason=ncclbench health: rank 0 slow; rank 1 slow'"
        assert line in dry.stdout.splitlines()
        assert slurm.wait_state(("idle", "drained")) == "idle"  # a dry run changes nothing
        assert slurm.node_state()[1] == "none"
        p = slurm.run(*health, env=task_env)
        assert p.returncode == 8, p.stdout + p.stderr
        assert f"# faults found: 2 (exit 8); drain: {slurm.node}" in p.stdout
        assert slurm.wait_state(("drained",)) == "drained"
        state, reason = slurm.node_state()
        assert reason == "ncclbench health: rank 0 slow; rank 1 slow"
        listed = slurm.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout.strip()
        assert listed == f"{slurm.node}|{reason}"
        # a drained node takes no new job: srun waits (and gives up at --immediate)
        blocked = slurm.run("srun", "-n", "1", "--immediate=2", "true")
        assert blocked.returncode != 0
    finally:
        for cmd in resume_commands("slurm", [slurm.node]):
            slurm.run(*cmd)
    assert slurm.wait_state(("idle",)) == "idle"
    assert slurm.run("srun", "-n", "1", "true").returncode == 0  # back in service
