"""`ncclbench health` across network-namespace hosts with real faults (CPU backend).

Six hosts (tests/netns_hosts.py: one namespace, veth and host name each, joined
by a bridge); one rank per host under MPICH's mpiexec, data over the veth
links (UCX over TCP only, MPIR_CVAR_NOLOCAL=1).  One fault per run, so the
faulty pairs stay a minority of the three (fleet statistics need that).  Every
link is shaped with `tc` to 100 Mbit/s both ways, far below what the two shared
CPUs move, so the network and not the scheduler sets the pace (unshaped or at
400 Mbit/s, CPU-bound pairs scattered 2x on a loaded machine and were, rightly,
not judged); then:
* slow node: one host's link at 25 Mbit/s both ways;
* slow link: traffic between two hosts (a filter on the peer's address) at
  25 Mbit/s, everything else at 100;
* hung: one host's rank stopped with SIGSTOP mid-scan;
* dead: one host's rank killed mid-scan (MPICH then ends the whole job).
The coordinator runs outside the MPI job (`--serve`), with mpiexec, in a seventh
namespace that holds no rank (so no judged host also carries the test's machinery).
health must name exactly those, blame no other host, and end in bounded time.
"""

import json
import os
import secrets
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest
from health_runtime_helpers import PY, rank_pids
from launch_helpers import child_env, free_port
from netns_hosts import netns_hosts

pytestmark = [pytest.mark.netns, pytest.mark.mpi]

NHOSTS = 6
BASE_RATE, SLOW_RATE = "100mbit", "25mbit"  # far below what 2 busy cores move, so the network sets the pace
# --judge busbw: the faults here are bandwidth faults, and on 2 shared cores an 8-byte time is the
# scheduler's (22 us in one pair, 0.5-1.2 ms in the next); latency is still measured and reported.
SCAN = ["--phases", "local,pairs", "--bw-size", "256K", "--lat-size", "8", "-n", "5", "-w", "1", "--cycles", "3",
        "--judge", "busbw"]


def _tc(ns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "tc", *args], check=True, capture_output=True, text=True, timeout=20)


def shape(hosts, slow_host=None, slow_link=None):
    """Every host's link at BASE_RATE both ways (its egress, and the bridge port towards
    it), so the network and not the two shared CPUs sets the pace; the slow host's at
    SLOW_RATE; a slow link as an htb class filtered on the peer's address, at each end."""
    for i, h in enumerate(hosts):
        tag, n = h.name.rsplit("h", 1)  # netns_hosts names: <tag>h<n>, the bridge <tag>sw, its ports <tag>p<n>
        rate = SLOW_RATE if i == slow_host else BASE_RATE
        if slow_link is not None and i in slow_link:
            other = hosts[slow_link[1] if i == slow_link[0] else slow_link[0]]
            _tc(h.name, "qdisc", "add", "dev", h.veth, "root", "handle", "1:", "htb", "default", "10")
            _tc(h.name, "class", "add", "dev", h.veth, "parent", "1:", "classid", "1:10", "htb", "rate", rate)
            _tc(h.name, "class", "add", "dev", h.veth, "parent", "1:", "classid", "1:20", "htb", "rate", SLOW_RATE)
            _tc(h.name, "filter", "add", "dev", h.veth, "protocol", "ip", "parent", "1:", "prio", "1", "u32",
                "match", "ip", "dst", f"{other.addr}/32", "flowid", "1:20")
        else:
            _tc(h.name, "qdisc", "add", "dev", h.veth, "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms")
        _tc(f"{tag}sw", "qdisc", "add", "dev", f"{tag}p{n}", "root", "tbf", "rate", rate, "burst", "256kb",
            "latency", "50ms")


def start(ctl, hosts, tmp_path, timeout_s=20, scan=SCAN):
    """The coordinator (in `ctl`, outside the job) and the ranks (mpiexec from `ctl`, one per host);
    `scan`: the scan's options."""
    port, token = free_port(), secrets.token_hex(8)
    js, drain = tmp_path / "health.json", tmp_path / "drain.txt"
    env = child_env(NCCLBENCH_HEALTH_TOKEN=token, NCCLBENCH_HEALTH_PROGRESS="1", NCCLBENCH_NO_STORE="1")
    tag = secrets.token_hex(6)
    coord = subprocess.Popen(ctl.cmd([PY, "-m", "ncclbench", "health", "--serve", f"0.0.0.0:{port}", "--ranks",
                                           str(len(hosts)), *scan, "--round-timeout", str(timeout_s),
                                           "--json", str(js), "--drain", str(drain)]),
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wrapper = tmp_path / "enter-netns"
    wrapper.write_text('#!/bin/sh\n[ "$1" = "-x" ] && shift\nhost=$1; shift\n'
                       'exec ip netns exec "$host" unshare --uts sh -c "hostname $host && exec $*"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    mpiexec = str(Path(PY).parent / "mpiexec")
    if not os.path.exists(mpiexec):
        pytest.skip("MPICH's mpiexec is not installed beside this Python (pip install mpich)")
    cmd = [mpiexec, "-launcher", "ssh", "-launcher-exec", str(wrapper), "-localhost", ctl.addr,
           "-hosts", ",".join(h.name for h in hosts), "-n", str(len(hosts)), "-ppn", "1",
           # data over the veth links: UCX over TCP only (its shared-memory transports cross namespaces)
           "-genv", "UCX_TLS", "tcp,self", "-genv", "MPIR_CVAR_NOLOCAL", "1", "-genv", "FI_PROVIDER", "tcp",
           "-genv", "NCCLBENCH_TEST_TAG", tag,
           PY, "-m", "ncclbench", "health", "--backend", "mpi", "--coordinator", f"{ctl.addr}:{port}",
           "--round-timeout", str(timeout_s)]
    ranks = subprocess.Popen(ctl.cmd(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return coord, ranks, tag, js, drain


def finish(coord, ranks, bound_s):
    t0 = time.monotonic()
    try:
        out, err = coord.communicate(timeout=bound_s)
    except subprocess.TimeoutExpired:
        coord.kill()
        ranks.kill()
        raise AssertionError(f"the coordinator did not end within {bound_s} s") from None
    try:
        ranks.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        ranks.kill()
        ranks.communicate()
    return coord.returncode, out, err, time.monotonic() - t0


def confirmed(js):
    doc = json.loads(js.read_text())
    return doc, sorted((f["component"], tuple(f["hosts"]), f["detail"]) for f in doc["findings"] if f["confirmed"])


def groups(doc) -> str:
    """Every pair measurement, for a failure message that explains itself."""
    return "\n".join(f"{r['round']}: {g['group']}: busbw {g['busbw']} lat {g['lat_us']} {g['status']} {g['why'] or ''}"
                     for r in doc["measurements"] if r["round"].startswith("pairs") for g in r["groups"])


def _drained(drain) -> list[str]:
    """The drain file's hosts (its `#` lines name hosts not judged: not drained)."""
    return [line for line in drain.read_text().splitlines() if not line.startswith("#")]


def _wait_progress(proc_err_lines, text, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(text in line for line in proc_err_lines):
            return True
        time.sleep(0.05)
    return False


def test_slow_node_is_named_exactly(tmp_path):
    with netns_hosts(NHOSTS + 1) as (ctl, *hosts):
        shape(hosts, slow_host=4)
        coord, ranks, _, js, drain = start(ctl, hosts, tmp_path)
        code, out, err, elapsed = finish(coord, ranks, 240)
        doc, found = confirmed(js)
        names = [h.name for h in hosts]
        assert code == 8, (out, err, groups(doc))
        assert found == [("node nic", (names[4],), "all rails")], out + groups(doc)
        assert _drained(drain) == [names[4]]
        # the others: healthy, or not judged where a group's cycles disagreed (said, never guessed)
        assert all(s in ("healthy", "not judged") for h, s in doc["host_status"].items() if h != names[4]), out
        nic = [f for f in doc["findings"] if f["component"] == "node nic"][0]
        assert nic["measured"] < 0.5 * nic["expected"]  # 25 against 100 Mbit/s, in the numbers


def test_slow_link_is_named_exactly_and_drains_no_host(tmp_path):
    """A link the first round of disjoint pairs (0-1, 2-3, 4-5) never measures (issue 25's GPU visit: one
    round, node1-node3 unseen, 'healthy'): by default 6 hosts are paired every way, so it is found."""
    with netns_hosts(NHOSTS + 1) as (ctl, *hosts):
        shape(hosts, slow_link=(1, 3))
        coord, ranks, _, js, drain = start(ctl, hosts, tmp_path)
        code, out, err, elapsed = finish(coord, ranks, 240)
        doc, found = confirmed(js)
        names = [h.name for h in hosts]
        assert code == 8, (out, err, groups(doc))
        assert found == [("link", (names[1], names[3]), "all rails")], out + groups(doc)
        assert _drained(drain) == []  # a slow link is the fabric's: no host to drain
        assert all(s in ("healthy", "not judged") for s in doc["host_status"].values()), out
        rounds = [r["name"] for r in doc["rounds"] if r["name"].startswith("pairs")]
        assert rounds == [f"pairs r{i}" for i in range(1, NHOSTS + 1)]  # n-1 tournament rounds, one to confirm
        assert "pairs: every host pair measured (15, round-robin)" in doc["notes"]


def _fault_mid_scan(tmp_path, sig):
    with netns_hosts(NHOSTS + 1) as (ctl, *hosts):
        coord, ranks, tag, js, drain = start(ctl, hosts, tmp_path, timeout_s=8)
        lines: list[str] = []
        import threading

        reader = threading.Thread(target=lambda: lines.extend(coord.stderr), daemon=True)
        reader.start()
        assert _wait_progress(lines, "local r1", 120), lines
        pids = {}
        deadline = time.monotonic() + 10
        while len(pids) < NHOSTS and time.monotonic() < deadline:
            pids = rank_pids(tag)
            time.sleep(0.1)
        assert len(pids) == NHOSTS, pids
        os.kill(pids[4], sig)
        t0 = time.monotonic()
        try:
            coord.wait(timeout=120)
            out = coord.stdout.read()
        finally:
            try:
                os.kill(pids[4], signal.SIGKILL)
            except OSError:
                pass
        elapsed = time.monotonic() - t0
        try:
            ranks.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            ranks.kill()
        doc, found = confirmed(js)
        names = [h.name for h in hosts]
        return coord.returncode, out, "".join(lines), elapsed, doc, found, names, pids[4]


def _only_the_stopped_host_is_named(found, stopped, status):
    """The stopped or killed rank's host is the one confirmed finding ('no answer'), and no other
    host is faulty.  With every host pair measured (the default) the rounds after a rank hung or
    died run while its partners spin on this 2-core machine, slow as a whole: before later rounds
    carried controls (pairs that were ok, run beside the re-runs) the scan confirmed a healthy link
    (CI, z -2.6 then -2.1) and a healthy host (z -1.2) there (issue 22)."""
    assert found == [("no answer", (stopped,), "")], found
    assert status[stopped] == "faulty", status
    others = [s for h, s in status.items() if h != stopped]
    # a host whose re-run the fault cut short, or whose group's cycles disagreed, is said so
    assert all(s in ("healthy", "partly tested", "suspect", "not judged") for s in others), status


def test_hung_host_is_named_and_the_scan_goes_on(tmp_path):
    code, out, err, elapsed, doc, found, names, pid = _fault_mid_scan(tmp_path, signal.SIGSTOP)
    assert code == 8, (out, err)
    _only_the_stopped_host_is_named(found, names[4], doc["host_status"])
    ev = " ".join(f for x in doc["findings"] for f in x["evidence"])
    assert f"rank 4 (host {names[4]}, pid {pid})" in ev
    assert elapsed < 60


def test_killed_host_is_named_and_what_was_measured_is_kept(tmp_path):
    code, out, err, elapsed, doc, found, names, pid = _fault_mid_scan(tmp_path, signal.SIGKILL)
    assert code == 8, (out, err)
    _only_the_stopped_host_is_named(found, names[4], doc["host_status"])
    ev = " ".join(f for x in doc["findings"] for f in x["evidence"])
    assert f"rank 4 (host {names[4]}, pid {pid}) died" in ev
    assert doc["rounds"] and doc["rounds"][0]["name"] == "local r1" and doc["rounds"][0]["answered"] == NHOSTS
    assert doc["host_status"][names[4]] == "faulty", doc["host_status"]
    assert elapsed < 30


_COORD = """
import sys
from ncclbench.health.runtime.control_channel import Coordinator
from ncclbench.health.runtime.live_rounds import advertised_address
c = Coordinator(1, "tok")
print(f"{advertised_address()}:{c.port}", flush=True)
c.wait_joined(30)
print("joined", c.ranks[0].host, flush=True)
"""
_RANK = """
import os, sys
from ncclbench.health.runtime.control_channel import RankLink
from ncclbench.health.runtime.live_rounds import rank_info
addr, _, port = sys.argv[1].rpartition(":")
RankLink(addr, int(port), "tok", rank_info(0), timeout_s=10).close()
"""


def _unresolvable(h, argv):
    """argv on host `h` under a host name its /etc/hosts does not know (a fake host's, a pod's)."""
    inner = "hostname fake-" + h.name + " && exec " + " ".join(f"'{a}'" for a in argv)
    return ["ip", "netns", "exec", h.name, "unshare", "--uts", "sh", "-c", inner]


def test_an_env_launched_rank0_advertises_the_address_other_hosts_reach():
    """Rank 0 of an env launch (MASTER_ADDR = its own veth address) coordinates health: the
    address it advertises is its veth's, not loopback (the host name resolves to nothing
    there), and a rank on another host joins it; the rank's host is its NCCL_HOSTID."""
    with netns_hosts(2) as (h0, h1):
        env = child_env(MASTER_ADDR=h0.addr, MASTER_PORT="29500")
        coord = subprocess.Popen(_unresolvable(h0, [PY, "-c", _COORD]), env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            where = coord.stdout.readline().strip()
            assert where.startswith(h0.addr + ":"), (where, coord.stderr.read() if not where else "")
            rank = subprocess.run(_unresolvable(h1, [PY, "-c", _RANK, where]),
                                  env=child_env(MASTER_ADDR=h0.addr, NCCL_HOSTID="node1"),
                                  capture_output=True, text=True, timeout=30)
            assert rank.returncode == 0, rank.stderr
            assert coord.stdout.readline().strip() == "joined node1"
        finally:
            coord.kill()
            coord.communicate()
