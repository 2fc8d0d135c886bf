"""Unix manners of the benchmark command (issue 24 item 5) and the store traps of item 6
that a user meets from the command line: each through a real process, the CPU backend
under MPICH's mpiexec where a job is started (`--nprocs`)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from ncclbench.core.config import BenchOptions
from ncclbench.core.results import RunInfo
from ncclbench.store.db import TUNE_SOURCE, ResultStore

SMALL = ["-b", "8", "-e", "64", "-f", "2", "--backend", "mpi"]


@pytest.fixture
def env(ncclbench_env, tmp_path, mpiexec):
    """The tests' environment with a store of this test's own (runs are recorded)."""
    e = dict(ncclbench_env)
    e.pop("NCCLBENCH_NO_STORE", None)
    e["NCCLBENCH_DB"] = str(tmp_path / "r.sqlite")
    e["PATH"] = os.path.dirname(mpiexec) + os.pathsep + e.get("PATH", "")
    return e


def ncclbench(env, *args, timeout=60, **kw):
    return subprocess.run([sys.executable, "-m", "ncclbench", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, **kw)


def stored(env) -> list[tuple]:
    if not os.path.exists(env["NCCLBENCH_DB"]):
        return []
    with sqlite3.connect(env["NCCLBENCH_DB"]) as c:
        return c.execute("SELECT id, status, argv, end_reason FROM runs ORDER BY id").fetchall()


def test_a_closed_pipe_ends_the_job_quietly(env):
    """`ncclbench ... --nprocs 2 | head -3`: exit 0, nothing on stderr, the run kept as interrupted."""
    p = subprocess.Popen([sys.executable, "-m", "ncclbench", "all_reduce", "-b", "8", "-e", "256M", "-f", "2",
                          "--backend", "mpi", "--nprocs", "2"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    head = [p.stdout.readline()]
    while head[-1] and head[-1].startswith(b"#"):  # up to the first row: the run is in the store by then
        head.append(p.stdout.readline())
    p.stdout.close()  # what `head` does once it has its lines
    rc = p.wait(timeout=60)
    err = p.stderr.read().decode()
    assert head[0].startswith(b"# ncclbench") and head[-1].split()[0] == b"8" and rc == 0, (rc, err)
    assert err == "", err
    [(_, status, _, reason)] = stored(env)
    assert status == "interrupted" and "closed pipe" in reason


def test_a_closed_pipe_ends_a_single_process_run_quietly(env):
    p = subprocess.Popen([sys.executable, "-m", "ncclbench", "all_reduce", "-b", "8", "-e", "256M", "-f", "2",
                          "--backend", "mpi"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = p.stdout.readline()
    while line.startswith(b"#"):
        line = p.stdout.readline()
    p.stdout.close()
    rc = p.wait(timeout=60)
    err = p.stderr.read().decode()
    assert rc == 0 and err == "", (rc, err)
    [(_, status, _, reason)] = stored(env)
    assert status == "interrupted" and "closed pipe" in reason


def test_a_json_name_that_is_not_written_is_one_line_before_the_run(env, tmp_path):
    p = ncclbench(env, "all_reduce", *SMALL, "-J", str(tmp_path / "out.txt"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and "out.txt" in lines[0] and ".json" in lines[0], p.stderr
    assert not (tmp_path / "out.txt").exists() and "# Out of bounds values" in p.stdout


def test_a_missing_baseline_fails_before_the_sweep(env):
    start = time.monotonic()
    p = ncclbench(env, "all_reduce", "-b", "8", "-e", "1G", "-f", "2", "--backend", "mpi", "--nprocs", "2",
                  "--baseline", "nosuch")
    assert p.returncode == 255, (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "nosuch" in p.stderr, p.stderr
    assert "Abort" not in p.stderr and "Collective test starting" not in p.stdout
    assert stored(env) == [] and time.monotonic() - start < 30  # no sweep ran (8 B - 1 GiB would take minutes)


@pytest.mark.parametrize("argv,code,needle", [
    (["allreduce", "-b", "8"], 255, "did you mean 'all_reduce'?"),
    (["histroy"], 255, "did you mean 'history'?"),
    (["all_reduce", "--backed", "mpi"], 255, "did you mean '--backend'?"),
])
def test_typos_get_did_you_mean_and_255(env, argv, code, needle):
    p = ncclbench(env, *argv)
    assert p.returncode == code and needle in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr


def test_nccl_tests_typos_keep_nccl_tests_usage_and_exit_0(env):
    p = ncclbench(env, "all_reduce", "--itres", "3")
    assert p.returncode == 0 and p.stdout.startswith("invalid option '?'\nUSAGE: all_reduce_perf"), p.stdout


def test_options_before_the_collective_and_the_command_line_recorded_as_typed(env):
    """docs/torchrun.md's form works, and the stored command line (with --nprocs) re-runs as recorded."""
    typed = ["--nprocs", "2", "all_reduce_perf", *SMALL]
    p = ncclbench(env, *typed)
    assert p.returncode == 0, p.stderr
    [(_, status, argv, _)] = stored(env)
    recorded = json.loads(argv)
    assert status == "complete" and recorded[0] == "all_reduce_perf" and "--nprocs" in recorded
    again = ncclbench(env, *recorded)
    assert again.returncode == 0, again.stderr
    assert [json.loads(a) for _, _, a, _ in stored(env)] == [recorded, recorded]
    assert again.stdout.count("Rank  ") == 2  # both ranks ran again


def test_mpiexec_ctrl_c_lines_stay_on_stderr(env):
    p = subprocess.Popen([sys.executable, "-m", "ncclbench", "all_reduce", "-b", "1M", "-e", "64M", "-f", "2",
                          "-n", "200", "-c", "0", "--backend", "mpi", "--nprocs", "2"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out = []
    for line in p.stdout:  # wait for the first result row: the job is in its sweep
        out.append(line)
        if line.strip() and not line.startswith("#"):
            break
    p.send_signal(signal.SIGINT)
    rest, err = p.communicate(timeout=60)
    out.append(rest)
    assert p.returncode == 130, err
    assert "[mpiexec@" not in "".join(out), "".join(out)
    assert "SIGINT received" in err


def test_mpiexec_bad_termination_block_goes_to_stderr(env):
    """A rank killed mid-run: MPICH's 'BAD TERMINATION' block is launcher noise, on stderr;
    stdout keeps the table alone."""
    p = subprocess.Popen([sys.executable, "-m", "ncclbench", "all_reduce", "-b", "1M", "-e", "64M", "-f", "2",
                          "-n", "200", "-c", "0", "--backend", "mpi", "--nprocs", "2"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out = []
    for line in p.stdout:
        out.append(line)
        if line.strip() and not line.startswith("#"):
            break
    pid = int(re.search(r"Rank +1 Group +\d+ Pid +(\d+)", "".join(out)).group(1))
    os.kill(pid, signal.SIGKILL)
    rest, err = p.communicate(timeout=60)
    out.append(rest)
    assert p.returncode != 0 and "BAD TERMINATION" in err and "died" in err, err
    assert not [ln for ln in "".join(out).splitlines() if ln.startswith(("=", "YOUR APPLICATION"))], out


def test_progress_bar_on_a_terminal_with_nprocs(env):
    """stderr a terminal, the table to a pipe: rank 0 draws the bar through mpiexec."""
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-m", "ncclbench", "all_reduce", "-b", "64K", "-e", "4M", "-f", "2",
                          "-c", "0", "--backend", "mpi", "--nprocs", "2"], env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    out = p.stdout.read()
    assert p.wait(timeout=60) == 0
    assert b"all_reduce_perf" in seen and b"/7" in seen, seen[-2000:]  # rich's 'done/total' column
    assert b"Out of bounds values" in out and b"\x1b[" not in out  # the table stays clean


def test_tune_candidates_are_not_latest(tmp_path):
    """After `tune`, `latest` / `latest~1` still name the newest benchmark runs."""
    with ResultStore(tmp_path / "r.sqlite") as s:
        info = RunInfo("all_reduce_perf", ["all_reduce_perf"], "mpi", "0", None, None, "")
        runs = [s.begin_run(info, BenchOptions()) for _ in range(2)]
        for _ in range(3):
            s.begin_run(info, BenchOptions(), source=TUNE_SOURCE)
        assert s.resolve("latest") == runs[1] and s.resolve("latest~1") == runs[0]
        assert s.latest_run_id() == runs[1] + 3  # still there, under their own ids


def test_history_hides_tune_candidates_unless_asked(env):
    """A tune stores one run per candidate (10 on the CPU backend): `history` lists the user's runs
    and says how many candidates it left out; `history --tune` lists and marks them."""
    with ResultStore(env["NCCLBENCH_DB"]) as s:
        info = RunInfo("all_reduce_perf", ["all_reduce_perf"], "mpi", "0", None, None, "")
        s.begin_run(info, BenchOptions())
        s.begin_run(info, BenchOptions(), source=TUNE_SOURCE)
    p = ncclbench(env, "history")
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert p.returncode == 0 and len(lines) == 1 and lines[0].rstrip().endswith("ncclbench"), p.stdout
    assert "# 1 tune candidate run(s) not listed: ncclbench history --tune" in p.stdout
    p = ncclbench(env, "history", "--tune")
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert p.returncode == 0 and len(lines) == 2, p.stdout
    assert lines[0].rstrip().endswith("tune candidate") and lines[1].rstrip().endswith("ncclbench"), p.stdout


def test_a_closed_pipe_ends_a_local_spawn_job_quietly():
    """The launcher of GPU jobs (one process per GPU, `--nprocs` with NCCL): rank 0's reader
    leaves; rank 0 ends as ncclbench does on a BrokenPipeError, the other rank fails for want
    of it; the launcher exits 0 and says nothing."""
    from launch_helpers import child_env

    run = ("import sys\nfrom ncclbench.launch.spawn import LocalSpawnLauncher\n"
           "sys.exit(LocalSpawnLauncher(2, [], module='pipe_child', timeout_s=10).run())")
    p = subprocess.Popen([sys.executable, "-c", run], env=child_env(NCCLBENCH_NO_STORE="1"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    head = [p.stdout.readline() for _ in range(3)]
    p.stdout.close()
    rc = p.wait(timeout=60)
    err = p.stderr.read().decode()
    assert all(head) and rc == 0, (rc, err)
    assert err == "", err
