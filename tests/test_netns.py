"""Multi-host launch for real: 3 hosts as network namespaces on this machine.

Ranks on different hosts form a job over the TCP rendezvous (Slurm-style and
RANK/WORLD_SIZE variables), the CPU backend's MPI job spans the hosts through
MPICH's launcher (its "ssh" step replaced by entering the namespace), and the
fault cases end within their bounds naming the right rank and host.  Without
root/CAP_NET_ADMIN the tests skip saying so (CI sets NCCLBENCH_REQUIRE_NETNS=1
to make that a failure instead).
"""

import importlib.util
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest
from launch_helpers import PY, TESTS, child_env, finish, free_port
from netns_hosts import netns_hosts

pytestmark = pytest.mark.netns

PREFLIGHT = [PY, "-m", "ncclbench", "preflight"]
WORKER = [PY, str(TESTS / "rdzv_worker.py")]


def _popen(host, argv, env):
    return subprocess.Popen(host.cmd(argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_slurm_style_job_across_three_hosts():
    with netns_hosts(3) as hosts:
        job = str(free_port())
        nodelist = f"{hosts[0].name[:-1]}[0-2]"  # e.g. nbt123h[0-2], resolved through each host's /etc/hosts
        before = hosts[1].rx_bytes()
        procs = [_popen(h, PREFLIGHT, child_env(
            SLURM_PROCID=str(r), SLURM_NTASKS="3", SLURM_STEP_NUM_TASKS="3", SLURM_LOCALID="0", SLURM_NODEID=str(r),
            SLURM_STEP_NODELIST=nodelist, SLURM_STEP_TASKS_PER_NODE="1(x3)", SLURM_JOB_ID=job, SLURM_STEP_ID="0"))
            for r, h in enumerate(hosts)]
        res = [finish(p, 60) for p in procs]
        assert [c for c, _, _ in res] == [0, 0, 0], res
        out = res[0][1]
        assert "3 process(es) on 3 host(s); launcher: srun; host communication: tcp" in out
        for r, h in enumerate(hosts):
            assert re.search(rf"#  Rank  {r} Pid +\d+ on +{h.name} device", out), out
        assert hosts[1].rx_bytes() > before  # the job really talked over host 1's link


def test_env_launch_across_hosts_and_a_wrong_token():
    with netns_hosts(3) as hosts:
        port = free_port()

        def env(r, token="shared-secret"):
            return child_env(RANK=str(r), WORLD_SIZE="3", MASTER_ADDR=hosts[0].addr, MASTER_PORT=str(port),
                             NCCLBENCH_TOKEN=token)

        procs = [_popen(h, PREFLIGHT, env(r)) for r, h in enumerate(hosts)]
        res = [finish(p, 60) for p in procs]
        assert [c for c, _, _ in res] == [0, 0, 0], res
        assert "on 3 host(s); launcher: RANK/WORLD_SIZE environment" in res[0][1]

        t0 = time.monotonic()
        procs = [_popen(h, PREFLIGHT + ["-T", "3"], env(r, "shared-secret" if r < 2 else "other"))
                 for r, h in enumerate(hosts)]
        res = [finish(p, 30) for p in procs]
        assert res[2][0] == 6 and "refused this process: token mismatch" in res[2][2], res[2]
        assert res[0][0] == 4, res[0]
        assert "rank 2 (never connected)" in res[0][2] and f"{hosts[2].name} {hosts[2].addr}" in res[0][2]
        assert "token mismatch" in res[0][2]
        assert res[1][0] == 4 and "rank 2 (never connected)" in res[1][2]
        assert time.monotonic() - t0 < 3 + 8


def test_rank_that_never_starts_and_rank_killed_mid_run_across_hosts():
    with netns_hosts(3) as hosts:
        port = free_port()
        t0 = time.monotonic()
        args = lambda r, sc: WORKER + [str(r), "3", hosts[0].addr, str(port), "tok", "3", sc]  # noqa: E731
        procs = [_popen(hosts[r], args(r, "normal"), child_env()) for r in (0, 1)]
        res = [finish(p, 30) for p in procs]
        for code, out, _ in res:
            assert code == 4 and "2 of 3 ranks arrived; rank 2 (never connected)" in out, out
        assert time.monotonic() - t0 < 3 + 8

        port = free_port()
        t0 = time.monotonic()
        args = lambda r, sc: WORKER + [str(r), "3", hosts[0].addr, str(port), "tok", "30", sc]  # noqa: E731
        procs = [_popen(hosts[r], args(r, "die"), child_env()) for r in range(3)]
        res = [finish(p, 40) for p in procs]
        assert res[2][0] == 9
        for code, out, _ in res[:2]:
            assert code == 4, out
            assert f"rank 2 (host {hosts[2].name}, {hosts[2].addr}" in out and "died" in out, out
        assert time.monotonic() - t0 < 10  # noticed by EOF, far inside the 30 s timeout


def _hydra(hosts, tmp_path, argv, n_per_host=1):
    """mpiexec on host 0; each proxy starts inside its host's namespace (instead of ssh)."""
    wrapper = tmp_path / "enter-netns"
    wrapper.write_text('#!/bin/sh\n# Hydra\'s ssh launcher calls: <this> -x HOST "COMMAND"\n'
                       '[ "$1" = "-x" ] && shift\nhost=$1; shift\n'
                       'exec ip netns exec "$host" unshare --uts sh -c "hostname $host && exec $*"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    mpiexec = str(Path(PY).parent / "mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip("MPICH's mpiexec is not installed beside this Python (pip install mpich)")
    cmd = [mpiexec, "-launcher", "ssh", "-launcher-exec", str(wrapper), "-localhost", hosts[0].addr,
           "-hosts", ",".join(h.name for h in hosts), "-n", str(len(hosts) * n_per_host), "-ppn", str(n_per_host),
           # data over the veth links, not through shared memory the namespaces still share
           "-genv", "UCX_TLS", "tcp,self", "-genv", "MPIR_CVAR_NOLOCAL", "1", "-genv", "FI_PROVIDER", "tcp",
           *argv]
    return subprocess.run(hosts[0].cmd(cmd), env=child_env(NCCLBENCH_NO_STORE="1"), capture_output=True, text=True, timeout=120)


def test_cpu_backend_mpi_job_spans_hosts(tmp_path):
    with netns_hosts(3) as hosts:
        before = hosts[2].rx_bytes()
        if importlib.util.find_spec("ncclbench.backends.mpi_cpu") is not None:
            run = _hydra(hosts, tmp_path, [PY, "-m", "ncclbench", "all_reduce_perf", "-b", "8", "-e", "1M", "-f",
                                           "4", "-c", "1", "--backend", "mpi"])
            assert run.returncode == 0, (run.stdout, run.stderr)
            assert "# Out of bounds values : 0 OK" in run.stdout, run.stdout
            for h in hosts:
                assert re.search(rf"on +{h.name} ", run.stdout), run.stdout
        else:  # until the CPU backend lands: the same MPI job shape with mpi4py
            run = _hydra(hosts, tmp_path, [PY, str(TESTS / "netns_mpi_allreduce.py")])
            assert run.returncode == 0, (run.stdout, run.stderr)
            lines = sorted(run.stdout.splitlines())
            assert lines == [f"rank {r} host {h.name} allreduce ok" for r, h in enumerate(hosts)], run.stdout
        assert hosts[2].rx_bytes() - before > 1 << 20  # at least the 1 MiB payload crossed host 2's link


def test_preflight_under_mpiexec_across_hosts(tmp_path):
    with netns_hosts(2) as hosts:
        run = _hydra(hosts, tmp_path, [*PREFLIGHT, "--backend", "mpi"], n_per_host=2)
        assert run.returncode == 0, (run.stdout, run.stderr)
        assert "4 process(es) on 2 host(s); launcher: mpiexec (MPICH Hydra / PMI); host communication: mpi" \
            in run.stdout
        assert re.search(rf"# Host +{hosts[1].name}: ranks 2-3", run.stdout), run.stdout
