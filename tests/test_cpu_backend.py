"""The CPU backend end to end: real MPI processes, every collective, checking on."""

import json
import re
import subprocess
import sys

import pytest

from ncclbench.collectives import COLLECTIVES

ROW = re.compile(r"^\s+\d+\s+\d+\s+\S+\s+\S*\s+-?\d+\s")


def run_mpi(mpiexec, env, n, args, timeout=120):
    cmd = [mpiexec, "-n", str(n), sys.executable, "-m", "ncclbench"] + args
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def rows_of(text):
    return [line for line in text.splitlines() if ROW.match(line)]


@pytest.mark.mpi
@pytest.mark.parametrize("coll", list(COLLECTIVES))
def test_every_collective_checks_clean_on_4_ranks(mpiexec, ncclbench_env, coll, tmp_path):
    out = tmp_path / "r.json"
    p = run_mpi(mpiexec, ncclbench_env, 4,
                [f"{coll}_perf", "-b", "8", "-e", "256K", "-f", "8", "-n", "3", "-c", "2",
                 "-r", "-1", "--backend", "mpi", "-J", str(out)])
    assert p.returncode == 0, p.stdout + p.stderr
    rows = rows_of(p.stdout)
    roots = 4 if COLLECTIVES[coll].rooted else 1
    assert len(rows) == 6 * roots  # 8, 64, 512, 4K, 32K, 256K
    ip_column = [line.rstrip().rsplit(None, 1)[-1] for line in rows]
    assert ip_column == (["0"] * len(rows) if COLLECTIVES[coll].checks_in_place else ["N/A"] * len(rows))
    assert "# Out of bounds values : 0 OK" in p.stdout
    doc = json.loads(out.read_text())
    assert len(doc["results"]) == len(rows)
    assert all(r["out_of_place"]["nwrong"] == 0 for r in doc["results"])
    expected_ip = 0 if COLLECTIVES[coll].checks_in_place else None
    assert all(r["in_place"]["nwrong"] == expected_ip for r in doc["results"])


@pytest.mark.mpi
def test_integer_and_float_ops_on_3_ranks(mpiexec, ncclbench_env):
    p = run_mpi(mpiexec, ncclbench_env, 3,
                ["all_reduce", "-b", "1K", "-e", "64K", "-f", "8", "-n", "2", "-d", "all", "-o", "all",
                 "--backend", "mpi"])
    assert p.returncode == 0, p.stdout + p.stderr
    types_ops = {(line.split()[2], line.split()[3]) for line in rows_of(p.stdout)}
    assert ("int8", "prod") in types_ops and ("double", "min") in types_ops
    assert ("uint64", "max") in types_ops and ("float", "sum") in types_ops
    # what MPI cannot reduce exactly is skipped with a note, not run
    assert not any(t in ("half", "bfloat16", "f8e4m3") for t, _ in types_ops)
    assert not any(o in ("avg", "mulsum") for _, o in types_ops)
    assert "skipping" in p.stdout


@pytest.mark.mpi
def test_explicit_unsupported_op_is_refused(mpiexec, ncclbench_env):
    p = run_mpi(mpiexec, ncclbench_env, 2, ["all_reduce", "-b", "8", "-e", "8", "-o", "avg", "--backend", "mpi"])
    assert p.returncode == 5
    assert "avg" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.mpi
def test_nprocs_starts_the_mpi_job_itself(ncclbench_env):
    cmd = [sys.executable, "-m", "ncclbench", "all_gather_perf", "-b", "1K", "-e", "4K", "-f", "2",
           "--backend", "mpi", "--nprocs", "4"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=ncclbench_env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("#  Rank") == 4
    assert len(rows_of(p.stdout)) == 3


@pytest.mark.mpi
def test_gpu_only_options_are_refused_by_cpu_backend(mpiexec, ncclbench_env):
    for opt in (["-G", "5"], ["-g", "2"], ["-R", "1"]):
        p = run_mpi(mpiexec, ncclbench_env, 1, ["all_reduce", "-b", "8", "-e", "8", "--backend", "mpi"] + opt)
        assert p.returncode == 5, (opt, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "CPU (MPI) backend" in p.stderr


@pytest.mark.mpi
def test_blocking_modes_aggregation_and_per_iteration(mpiexec, ncclbench_env, tmp_path):
    for extra in (["-z", "1"], ["-z", "2"], ["-z", "3", "-I", "1"], ["-m", "4"], ["-N", "2"],
                  ["-I", "1", "-K", "1", "-n", "5"], ["-u", "1"], ["-a", "3"], ["-C", "1", "-S", "1"]):
        p = run_mpi(mpiexec, ncclbench_env, 2,
                    ["reduce_scatter", "-b", "64", "-e", "4K", "-f", "4", "--backend", "mpi"] + extra)
        assert p.returncode == 0, (extra, p.stdout, p.stderr)
        rows = rows_of(p.stdout)
        assert len(rows) == (8 if "-N" in extra else 4), extra  # 64, 256, 1K, 4K
        assert "# Out of bounds values : 0 OK" in p.stdout


@pytest.mark.mpi
def test_split_runs_groups(mpiexec, ncclbench_env):
    env = dict(ncclbench_env, NCCL_TESTS_SPLIT="MOD 2")
    p = run_mpi(mpiexec, env, 4, ["all_reduce", "-b", "1K", "-e", "1K", "--backend", "mpi"])
    assert p.returncode == 0, p.stdout + p.stderr
    groups = re.findall(r"Group\s+(\d+)", p.stdout)
    assert sorted(groups) == ["0", "0", "1", "1"]


def test_min_bw_gate_fails_run_with_code_7(mpiexec, ncclbench_env):
    env = dict(ncclbench_env, NCCL_TESTS_MIN_BW="1e9")
    p = run_mpi(mpiexec, env, 2, ["all_reduce", "-b", "1K", "-e", "1K", "--backend", "mpi"])
    assert p.returncode == 7
    assert re.search(r"# Avg bus bandwidth    : \S+ FAILED", p.stdout)


@pytest.mark.mpi
def test_benchmark_runs_the_preflight_checks(mpiexec, ncclbench_env):
    """An NCCL_* variable set on one rank only is flagged in the banner (spec: launch traps)."""
    base = [sys.executable, "-m", "ncclbench", "all_reduce", "-b", "8", "-e", "8", "--backend", "mpi"]
    cmd = [mpiexec, "-n", "1", "-env", "NCCL_ALGO", "Ring"] + base + [":", "-n", "1"] + base
    p = subprocess.run(cmd, capture_output=True, text=True, env=ncclbench_env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    banner = [line for line in p.stdout.splitlines() if "NCCL_ALGO" in line]
    assert banner and banner[0].startswith("# ") and "differs between ranks" in banner[0]


@pytest.mark.mpi
def test_alltoallv_matrix_file_and_summary(mpiexec, ncclbench_env, tmp_path):
    matrix = tmp_path / "m.txt"
    matrix.write_text("0 64 128 16 9\n32 0 48 0 9\n1000 16 0 16 9\n5 300 64 0 9\n7 7 7 7 7\n")
    env = dict(ncclbench_env, NCCL_TESTS_ALLTOALLV_MATRIX_FILE=str(matrix), NCCL_TESTS_ALLTOALLV_MATRIX_SCALE="2",
               NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY="1")
    p = run_mpi(mpiexec, env, 4, ["alltoallv_perf", "-b", "4K", "-e", "4K", "-c", "2", "--backend", "mpi"])
    assert p.returncode == 0, p.stdout + p.stderr
    rows = rows_of(p.stdout)
    assert len(rows) == 1 and rows[0].split()[1] == "0"  # count column is 0 in matrix mode
    assert rows[0].split()[8] == "0"  # #wrong out-of-place
    summary = [line for line in p.stdout.splitlines() if line.startswith("#   rank=")]
    assert len(summary) == 8  # 4 ranks x (out-of-place, in-place)
    # row 2 = 1000,16,0,16 scaled by 2 and rounded down to 16: 2000+32+0+32
    assert "rank=2 send_bytes=2064 " in "\n".join(summary)
    assert "mode=matrix nranks=4 matrix_dim=5 scale=2.000" in p.stdout  # the 5th row/column is unused

    bad = run_mpi(mpiexec, env, 4, ["alltoallv_perf", "-b", "1K", "-e", "4K", "--backend", "mpi"])
    assert bad.returncode == 1 and "-b must equal -e" in bad.stderr
    small = run_mpi(mpiexec, env, 4, ["alltoallv_perf", "-b", "1K", "-e", "1K", "--backend", "mpi"])
    assert small.returncode == 1 and "at least" in small.stderr
    matrix.write_text("0 1\n1 0\n")
    tiny = run_mpi(mpiexec, env, 4, ["alltoallv_perf", "-b", "4K", "-e", "4K", "--backend", "mpi"])
    assert tiny.returncode == 1 and "smaller than the 4 ranks" in tiny.stderr and "Traceback" not in tiny.stderr


@pytest.mark.mpi
def test_alltoallv_generated_summary(mpiexec, ncclbench_env):
    env = dict(ncclbench_env, NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY="1", NCCL_TESTS_ALLTOALLV_SPREAD="0.5")
    p = run_mpi(mpiexec, env, 3, ["alltoallv", "-b", "3K", "-e", "3K", "--backend", "mpi"])
    assert p.returncode == 0, p.stdout + p.stderr
    heads = [line for line in p.stdout.splitlines() if "PRINT_SUMMARY: mode=generated nranks=3" in line]
    assert len(heads) == 2 and "spread=0.500" in heads[0]
    sends = {line.split()[2] for line in p.stdout.splitlines() if line.startswith("#   rank=")}
    assert len(sends) == 1  # circulant pattern: every rank sends the same total
