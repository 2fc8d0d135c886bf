"""Pre-flight: the pure checks over gathered facts, and `preflight` run for real
under ncclbench's launcher, RANK/WORLD_SIZE, Slurm-style variables and mpiexec."""

import json
import shutil
import subprocess

import pytest
from launch_helpers import PY, child_env, finish, free_port, start

from ncclbench.launch.facts import GpuFact, RankFacts, collect_rank_facts, facts_from_dict
from ncclbench.launch.preflight_checks import assigned_gpus, check_facts, format_rank_table, local_ranks

GIB = 2**30


def _gpus(n, host_tag="a"):
    return [GpuFact(i, f"GPU-{host_tag}{i:07d}-0000-0000-0000-000000000000", f"0000:{0x10 + i:02x}:00",
                    "NVIDIA H200", 140 * GIB) for i in range(n)]


def _rank(rank, host="n1", gpus=2, size=None, env=None, **kw):
    base = dict(rank=rank, size=size if size is not None else 4, host=host, boot_id=f"boot-{host}",
                pid=1000 + rank, gpus=_gpus(gpus, host[-1]) if gpus else [], driver_version="570.86.15",
                cuda_driver_version="12.8", nccl_version="2.28.9", python="3.11.7", env=env or {},
                shm_total=64 * GIB, shm_free=64 * GIB, local_rank=0)
    base.update(kw)
    return RankFacts(**base)


def _checks(findings):
    return {(f.level, f.check) for f in findings}


def test_clean_two_hosts_has_no_error():
    facts = [_rank(0, "n1"), _rank(1, "n1"), _rank(2, "n2"), _rank(3, "n2")]
    assert local_ranks(facts) == [0, 1, 0, 1]
    assert assigned_gpus(facts) == [[0], [1], [0], [1]]
    out = check_facts(facts, 4, 1, True)
    assert not [f for f in out if f.level == "error"], out


def test_independent_copies():
    out = check_facts([_rank(0, size=8)], 8, 1, True)
    assert ("error", "independent-copies") in _checks(out)
    assert "started 8 processes but they formed a world of 1" in str(out)


def test_more_ranks_than_gpus_on_a_host():
    facts = [_rank(r, "n1", gpus=2) for r in range(4)]
    out = check_facts(facts, 4, 1, True)
    assert ("error", "too-few-gpus") in _checks(out)
    msg = next(f.message for f in out if f.check == "too-few-gpus")
    assert "n1" in msg and "rank(s) 2-3 see only 2 GPU(s)" in msg and "NCCL_TESTS_DEVICE=0" in msg
    # -g 2 with two ranks also needs 4
    assert ("error", "too-few-gpus") in _checks(check_facts([_rank(0, gpus=2), _rank(1, gpus=2)], 2, 2, True))


def test_same_gpu_for_two_ranks():
    # one GPU per process (CUDA_VISIBLE_DEVICES per rank) but both processes were given the same one
    same = _gpus(1)
    facts = [_rank(0, "c1", gpus=0, size=2, env={"NCCL_TESTS_DEVICE": "0"}),
             _rank(1, "c1", gpus=0, size=2, env={"NCCL_TESTS_DEVICE": "0"})]
    facts[0].gpus, facts[1].gpus = same, same
    out = check_facts(facts, 2, 1, True)
    assert ("error", "duplicate-gpu") in _checks(out)
    assert "used by rank 0 (device 0 on c1), rank 1 (device 0 on c1)" in str(out)
    # two containers with different host names sharing one physical GPU: caught by UUID
    facts = [_rank(0, "podA", gpus=0, size=2), _rank(1, "podB", gpus=0, size=2)]
    facts[0].gpus, facts[1].gpus = same, same
    assert ("error", "duplicate-gpu") in _checks(check_facts(facts, 2, 1, True))


def test_nccl_variables_that_differ_are_listed():
    facts = [_rank(0, env={"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5"}), _rank(1, env={"NCCL_IB_HCA": "mlx5"}),
             _rank(2, "n2", env={"NCCL_IB_HCA": "mlx5_1"}), _rank(3, "n2", env={"NCCL_IB_HCA": "mlx5"})]
    out = [f for f in check_facts(facts, 4, 1, True) if f.check == "nccl-env"]
    assert {f.level for f in out} == {"warn"}
    text = " ".join(f.message for f in out)
    assert "NCCL_DEBUG differs between ranks: 'INFO' on ranks 0 (n1); unset on ranks 1-3" in text
    assert "NCCL_IB_HCA differs" in text and "'mlx5_1' on ranks 2 (n2)" in text
    assert "mpirun -x NCCL_DEBUG" in text


def test_small_dev_shm_and_version_mismatch():
    facts = [_rank(0, "n1", shm_total=64 * 2**20), _rank(1, "n2", nccl_version="2.27.3", driver_version="560.1")]
    out = check_facts(facts, 2, 1, True)
    assert ("error", "shm") in _checks(out)
    shm = next(f.message for f in out if f.check == "shm")
    assert "/dev/shm on n1 (ranks 0) is only 64 MiB" in shm and "--shm-size" in shm and "medium: Memory" in shm
    versions = [f for f in out if f.check == "version"]
    assert {(f.level, f.message.split(" differs")[0]) for f in versions} == {
        ("error", "NCCL version"), ("warn", "NVIDIA driver version")}
    # without GPUs a small /dev/shm is only a warning
    cpu = [_rank(0, "n1", gpus=0, shm_total=64 * 2**20, size=1)]
    assert ("warn", "shm") in _checks(check_facts(cpu, 1, 1, False))


def test_gpus_required_but_missing():
    facts = [_rank(0, "n1"), _rank(1, "n2", gpus=0, gpu_note="no NVIDIA driver (libcuda.so.1 not found)")]
    out = check_facts(facts, 2, 1, None)
    assert "rank 1 on n2 sees no GPU (no NVIDIA driver" in str(out)
    out = check_facts([_rank(0, gpus=0, size=1)], 1, 1, None)
    assert _checks(out) == {("info", "no-gpu")}


def test_rank_table_has_nccl_tests_lines_and_hosts():
    facts = [_rank(0, "n1"), _rank(1, "n1"), _rank(2, "n2", nccl_version="2.27.3"), _rank(3, "n2")]
    text = format_rank_table(facts)
    lines = text.splitlines()
    assert lines[0].startswith("#  Rank  0 Pid   1000 on         n1 device  0 [0000:10:00] NVIDIA H200 GPU-1")
    assert lines[3].startswith("#  Rank  3 Pid   1003 on         n2 device  1 [0000:11:00]")
    host2 = next(line for line in lines if line.startswith("# Host         n2"))
    assert "NCCL 2.27.3 (!)" in host2 and "ranks 2-3, 2 GPU(s)" in host2
    two = format_rank_table([_rank(0, "n1", gpus=4, size=1)], gpus_per_rank=2).splitlines()
    assert [ln.split(" device ")[1][:2] for ln in two[:2]] == [" 0", " 1"] and "Rank  1" in two[1]


def test_collect_rank_facts_here():
    f = collect_rank_facts(None)
    assert f.host and f.pid > 0 and f.boot_id
    assert f.shm_total and f.shm_total > 0
    assert all(k.startswith(("NCCL_", "CUDA_")) for k in f.env)
    assert facts_from_dict(json.loads(json.dumps(f.to_dict()))) == f
    if not f.gpus:
        assert f.gpu_note


# -- the command, for real ------------------------------------------------------------------

PREFLIGHT = ["-m", "ncclbench", "preflight"]


def test_preflight_single_process():
    code, out, err = finish(start(PREFLIGHT), 60)
    assert code == 0, err
    assert "launcher: none (single process)" in out and "#  Rank  0 Pid" in out and "preflight OK" in out


def test_preflight_nprocs_and_json(tmp_path):
    path = tmp_path / "pf.json"
    code, out, err = finish(start(PREFLIGHT + ["--nprocs", "3", "--json", str(path)]), 60)
    assert code == 0, err
    assert out.count("#  Rank ") == 3 and "launcher: ncclbench --nprocs; host communication: tcp" in out
    doc = json.loads(path.read_text())
    assert doc["ok"] and [f["rank"] for f in doc["facts"]] == [0, 1, 2]


def _env_ranks(n, per_rank_env, extra_args=()):
    return [start(PREFLIGHT + list(extra_args), env=child_env(**per_rank_env(r))) for r in range(n)]


def test_preflight_over_rank_world_size_env_warns_about_nccl_variables():
    port = free_port()
    procs = _env_ranks(2, lambda r: dict(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                          MASTER_PORT=str(port), **({"NCCL_DEBUG": "INFO"} if r else {})))
    res = [finish(p, 60) for p in procs]
    assert [c for c, _, _ in res] == [0, 0], res
    out = res[0][1]
    assert "launcher: RANK/WORLD_SIZE environment; host communication: tcp" in out
    assert "WARN: NCCL_DEBUG differs between ranks: unset on ranks 0" in out and "'INFO' on ranks 1" in out
    assert res[1][1] == ""  # only rank 0 prints


def test_preflight_over_slurm_variables():
    job = str(free_port())  # any job id; the port is derived from it
    procs = _env_ranks(3, lambda r: dict(SLURM_PROCID=str(r), SLURM_NTASKS="3", SLURM_STEP_NUM_TASKS="3",
                                          SLURM_LOCALID=str(r), SLURM_STEP_NODELIST="localhost",
                                          SLURM_JOB_ID=job, SLURM_STEP_ID="0", SLURM_NODEID="0"))
    res = [finish(p, 60) for p in procs]
    assert [c for c, _, _ in res] == [0, 0, 0], res
    assert "launcher: srun; host communication: tcp" in res[0][1] and res[0][1].count("#  Rank ") == 3


def test_preflight_under_mpiexec_and_the_independent_copies_trap():
    mpiexec = shutil.which("mpiexec", path=str(__import__("pathlib").Path(PY).parent)) or shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec here (pip install mpich)")
    ok = subprocess.run([mpiexec, "-n", "2", PY, *PREFLIGHT], env=child_env(), capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert "host communication: mpi" in ok.stdout and ok.stdout.count("#  Rank ") == 2
    # Without PMI_FD, MPI_Init in each process cannot reach mpiexec: every process is a singleton
    # while PMI_SIZE says 2, exactly what happens when mpi4py's MPI is not the mpirun's.
    trap = subprocess.run([mpiexec, "-n", "2", "env", "-u", "PMI_FD", PY, *PREFLIGHT], env=child_env(),
                          capture_output=True, text=True, timeout=60)
    assert trap.returncode == 6, (trap.stdout, trap.stderr)
    assert "started 2 processes, but MPI in this one sees a world of 1" in trap.stderr
    assert "Traceback" not in trap.stderr


def test_preflight_small_dev_shm_in_a_mount_namespace():
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "-m", "true"], capture_output=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("cannot create a mount namespace here (needs root and unshare)")
    port = free_port()
    procs = []
    for r in range(2):
        env = child_env(RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = [PY, *PREFLIGHT]
        if r == 1:  # this rank's /dev/shm is a 64 MiB tmpfs, as in a default docker container
            cmd = [unshare, "-m", "sh", "-c", 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"', "sh", *cmd]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    res = [finish(p, 60) for p in procs]
    out = res[0][1]
    assert res[0][0] == 0, res  # no GPU here: a warning, not an error
    assert "(ranks 1) is only 64 MiB" in out and "--shm-size" in out, out


def test_preflight_bad_arguments_are_one_line():
    code, out, err = finish(start(PREFLIGHT + ["--backend", "gloo"]), 30)
    assert code == 255 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_preflight_backend_mpi_with_nprocs_uses_mpiexec():
    code, out, err = finish(start(PREFLIGHT + ["--nprocs", "2", "--backend", "mpi"]), 60)
    assert code == 0, err
    assert "launcher: mpiexec (MPICH Hydra / PMI); host communication: mpi" in out
