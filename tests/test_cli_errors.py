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
