"""Bad input ends with one clear stderr line and nccl-tests' exit code, never a traceback."""

import subprocess
import sys

import pytest


def run(env, *args, timeout=60):
    return subprocess.run([sys.executable, "-m", "ncclbench", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.parametrize("args,code,needle", [
    (["no_such_perf"], 255, "unknown collective"),
    (["all_reduce_perf", "-b", "0"], 255, "minbytes"),
    (["all_reduce_perf", "-b", "-8"], 255, "invalid size specified for 'minbytes'"),
    (["all_reduce_perf", "-b", "1M", "-e", "1K"], 255, "invalid sizes for 'minbytes' and 'maxbytes'"),
    (["all_reduce_perf", "-e", "1X"], 255, "invalid size specified for 'maxbytes'"),
    (["all_reduce_perf", "-d", "complex"], 255, "complex"),
    (["all_reduce_perf", "-o", "xor"], 255, "xor"),
    (["all_reduce_perf", "-t", "0"], 255, "thread"),
    (["all_reduce_perf", "-g", "-1"], 255, "GPU"),
    (["all_reduce_perf", "--backend", "tpu"], 255, "backend"),
    (["all_reduce_perf", "-b", "8", "-e", "8", "-J", "/nonexistent-dir/x.json", "--backend", "mpi"], 255,
     "/nonexistent-dir/x.json"),
])
def test_bad_input_one_line_and_exit_code(ncclbench_env, args, code, needle):
    p = run(ncclbench_env, *args)
    assert p.returncode == code, (p.stdout, p.stderr)
    err = p.stderr.strip().splitlines()
    assert "Traceback" not in p.stderr
    assert err and needle.lower() in p.stderr.lower(), p.stderr
    assert len([line for line in err if not line.startswith("Warning")]) == 1, p.stderr


def test_help_exits_zero_with_nccl_tests_usage(ncclbench_env):
    p = run(ncclbench_env, "all_reduce_perf", "-h")
    assert p.returncode == 0
    assert p.stdout.startswith("USAGE: all_reduce_perf ")
    assert "--backend" in p.stdout


def test_unknown_option_prints_usage_and_exits_zero_like_nccl_tests(ncclbench_env):
    p = run(ncclbench_env, "all_reduce_perf", "-q", "1")
    assert p.returncode == 0
    assert "invalid option" in p.stderr + p.stdout
    assert "USAGE: all_reduce_perf" in p.stdout


def test_top_level_help_and_list(ncclbench_env):
    p = run(ncclbench_env, "--help")
    assert p.returncode == 0 and "preflight" in p.stdout and "all_reduce" in p.stdout
    p = run(ncclbench_env, "list")
    assert p.returncode == 0
    for word in ("hypercube", "alltoallv", "f8e5m2", "mulsum", "backends"):
        assert word in p.stdout


def test_list_names_the_timed_call_path(ncclbench_env):
    from ncclbench.nccl.loader import wheel_library_path

    if wheel_library_path() is None:
        pytest.skip("nvidia-nccl wheel not installed")
    p = run(dict(ncclbench_env, NCCLBENCH_CALLS="ctypes"), "list")
    assert p.returncode == 0 and "timed NCCL calls: ctypes (pre-converted arguments)" in p.stdout
    p = run(dict(ncclbench_env, NCCLBENCH_CALLS="cython"), "list")
    assert "timed NCCL calls: unknown (NCCLBENCH_CALLS='cython'" in p.stdout


def test_zero_iterations_exit_0_with_nccl_tests_inf_rows(ncclbench_env):
    """nccl-tests with -n 0 prints time `inf` and bandwidths 0 and exits 0 (it
    divides by the 0 iterations); ncclbench used to end in an IndexError."""
    p = run(ncclbench_env, "all_reduce_perf", "-b", "8", "-e", "64", "-f", "8", "-n", "0", "--backend", "mpi",
            "--no-store")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stdout + p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("    ") and "sum" in line]
    assert len(rows) == 2 and all(line.count("inf") == 2 for line in rows), p.stdout
    assert "per-iteration skip (-K) must be between 0 and -1. Disabling." in p.stderr  # as nccl-tests warns


def test_negative_cycle_count_is_refused(ncclbench_env):
    p = run(ncclbench_env, "all_reduce_perf", "-b", "8", "-e", "8", "-N", "-5", "--backend", "mpi")
    assert p.returncode == 255 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines() == ["ncclbench: invalid cycle count (-N -5): must not be negative "
                                             "(0 runs forever)"]


def test_started_ranks_inherit_the_backend_through_the_environment(monkeypatch):
    """The parent's choice reaches the children without editing their command line."""
    from ncclbench.backends.select import BACKEND_ENV
    from ncclbench.benchmark import orchestrate as bench
    from ncclbench.core.config import Backend

    seen = {}

    class Launcher:
        def __init__(self, nprocs, argv, env):
            seen.update(nprocs=nprocs, argv=argv, env=env)

        def run(self):
            return 0

    monkeypatch.setattr(bench, "LocalSpawnLauncher", Launcher)
    args = ["-b", "8", "-J", "x--backend.json", "--nprocs", "3"]
    assert bench.spawn(Backend.NCCL, 3, ["all_reduce_perf", *args[:4]], None) == 0
    assert seen["argv"] == ["all_reduce_perf", "-b", "8", "-J", "x--backend.json"]
    assert seen["env"][BACKEND_ENV] == "nccl" and seen["nprocs"] == 3
