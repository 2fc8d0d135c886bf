"""ncclbench's own launchers, with real child processes."""

import re
import time

from launch_helpers import child_env, finish, start

RUN = ("import sys\nfrom ncclbench.launch.spawn import LocalSpawnLauncher\n"
       "sys.exit(LocalSpawnLauncher({n}, {argv!r}, module='spawn_child', timeout_s={t}).run())")


def _launch(n, argv, t=10.0, **env):
    return start(["-c", RUN.format(n=n, argv=argv, t=t)], env=child_env(**env))


def test_ranks_form_one_job_and_only_rank_zero_prints():
    code, out, err = finish(_launch(4, ["ok"], CUDA_VISIBLE_DEVICES="3,1"), 60)
    assert code == 0, err
    assert out.splitlines() == ["rank 0 of 4 via ncclbench-spawn/tcp CUDA_VISIBLE_DEVICES=3,1"]
    assert "stderr line from rank 0" in err
    for r in (1, 2, 3):
        assert f"[rank {r}] stderr line from rank {r}" in err


def test_a_failing_rank_ends_the_job_with_its_code_and_shows_its_stdout():
    t0 = time.monotonic()
    code, out, err = finish(_launch(3, ["fail", "2", "3"]), 60)
    assert code == 3, (out, err)
    assert "rank 2 (host" in err and "died" in err  # the survivors name it themselves
    assert "[rank 2 stdout] rank 2 of 3" in err
    assert time.monotonic() - t0 < 15


def test_survivors_that_do_not_exit_are_terminated_within_the_grace_time():
    t0 = time.monotonic()
    code, out, err = finish(_launch(3, ["fail-hang", "1", "5"], t=1.0), 60)
    assert code == 5, (out, err)
    assert time.monotonic() - t0 < 1.0 + 3.0 + 8.0


def test_spawn_mpiexec_runs_an_mpi_job():
    script = ("import sys\nfrom ncclbench.launch.spawn import spawn_mpiexec\n"
              "sys.exit(spawn_mpiexec(3, ['ok'], module='spawn_child', timeout_s=60))")
    code, out, err = finish(start(["-c", script]), 90)
    assert code == 0, err
    # mpiexec may interleave the ranks' lines, so look for each rank's text anywhere
    found = re.findall(r"rank (\d) of 3 via mpich-hydra/mpi CUDA_VISIBLE_DEVICES=None", out)
    assert sorted(found) == ["0", "1", "2"], out


def test_spawn_mpiexec_without_mpiexec_is_a_clear_error():
    script = ("import sys\nfrom ncclbench.core.errors import BenchError\nfrom ncclbench.launch import spawn\n"
              "spawn.find_mpiexec = lambda: None\n"
              "try:\n    spawn.spawn_mpiexec(2, ['ok'])\nexcept BenchError as e:\n"
              "    print(int(e.code), e.message)\n")
    code, out, err = finish(start(["-c", script]), 30)
    assert out.startswith("5 ") and "pip install 'ncclbench[mpi]'" in out, (out, err)


def test_strip_nprocs():
    from ncclbench.launch.spawn import strip_nprocs

    assert strip_nprocs(["all_reduce_perf", "--nprocs", "4", "-b", "8", "--nprocs=2", "-g", "1"]) == [
        "all_reduce_perf", "-b", "8", "-g", "1"]
