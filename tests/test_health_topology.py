"""`ncclbench health --topology FILE` (health/core/leaf_switches.py): each host's leaf switch, read as
HOST LEAF lines, a JSON object or Slurm's topology.conf, hostlists expanded by Slurm's rules; bad
input and a host the file does not place are one line and exit 255, never a traceback."""

import json
import subprocess
import sys
import threading
import time

import pytest

from ncclbench.core.errors import ArgumentError, ExitCode
from ncclbench.health.core.leaf_switches import Topology, check_hosts, expand_hostlist, load_topology, parse_topology
from ncclbench.health.core.scan import ScanConfig
from ncclbench.health.runtime import scan_service as service
from ncclbench.health.runtime.group_measure import GroupSpec


@pytest.mark.parametrize("expr, hosts", [
    ("node[01-03]", ["node01", "node02", "node03"]),
    ("node[8-10]", ["node8", "node9", "node10"]),  # padded to the width of lo as written: none
    ("node[08-10]", ["node08", "node09", "node10"]),
    ("node[001-2]", ["node001", "node002"]),
    ("tux[0-3,12,18-20]", ["tux0", "tux1", "tux2", "tux3", "tux12", "tux18", "tux19", "tux20"]),  # topology.conf(5)
    ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),  # a suffix after the bracket
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),  # brackets before the last expand too, outermost first
    ("a,b[1-2] c", ["a", "b1", "b2", "c"]),  # commas and spaces outside brackets separate
    ("solo", ["solo"]),
    ("n[5-]", ["n5"]),  # Slurm reads an empty hi as lo
])
def test_hostlist_expands_as_slurm_does(expr, hosts):
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize("expr, needle", [
    ("node[3-1]", "backwards"),
    ("node[a-b]", "invalid range"),
    ("node[1-2", "'[' without ']'"),
    ("node1-2]", "']' without '['"),
    ("node[1--2]", "invalid range"),
    ("node[0-70000]", "too many hosts"),
])
def test_hostlist_errors_are_said(expr, needle):
    with pytest.raises(ValueError, match=needle.replace("[", r"\[")):
        expand_hostlist(expr)


TEXT = """# hosts and their leaf switches
node[01-03] leaf1   # three hosts
node04      leaf2

node05 leaf2
"""
SLURM = """# written by slurmibtopology
SwitchName=spine Switches=leaf[1-2] LinkSpeed=200
SwitchName=leaf1 Nodes=node[01-03]
switchname=leaf2 nodes=node04,\\
node05
"""
WANT = {"node01": "leaf1", "node02": "leaf1", "node03": "leaf1", "node04": "leaf2", "node05": "leaf2"}


@pytest.mark.parametrize("text, kind", [
    (TEXT, "HOST LEAF lines"),
    (json.dumps({"node[01-03]": "leaf1", "node04": "leaf2", "node05": "leaf2"}), "JSON"),
    (SLURM, "Slurm topology.conf"),
])
def test_three_formats_give_the_same_leaves(text, kind):
    assert parse_topology(text) == (WANT, kind)


@pytest.mark.parametrize("text, needle", [
    ("node01 leaf1\nnode02\n", "line 2: expected 'HOST LEAF' (two fields), not 'node02'"),
    ("node01 leaf1 extra\n", "line 1: expected 'HOST LEAF'"),
    ("node[01-04] leaf1\nnode03 leaf2\n", "line 2: host node03 is under leaf leaf1 (line 1) and under leaf2"),
    ("node[4-1] leaf1\n", "line 1: invalid range '4-1' in 'node[4-1]' (backwards)"),
    ("# nothing\n\n", "no host in it"),
    ('["node01", "leaf1"]', "JSON must be one object"),
    ('{"node01": 3}', "host 'node01': its leaf must be a non-empty string, not 3"),
    ('{"node01": "leaf1",}', "not valid JSON"),
    ("SwitchName=leaf1 Nodes=n[1-2]\nSwitchName=leaf2 Nodes=n2\n", "line 2: host n2 is under leaf leaf1 (line 1)"),
    ("SwitchName=leaf1 Nodes=n[1-2]\nNodes=n3\n", "line 2: a topology.conf line starts with SwitchName=NAME"),
    ("BlockName=b1 Nodes=n[1-2]\n", "line 1: BlockName= (topology/block) names no leaf switch"),
    ("SwitchName=leaf1 Nodes=n[1-2] fast\n", "line 1: expected Key=Value parameters, not 'fast'"),
])
def test_bad_topology_is_one_line_naming_the_file(tmp_path, text, needle):
    path = tmp_path / "topo.txt"
    path.write_text(text)
    with pytest.raises(ArgumentError) as err:
        load_topology(str(path))
    msg = err.value.message
    assert msg.startswith(f"health: --topology {path}: ") and needle in msg, msg
    assert "\n" not in msg and err.value.code == ExitCode.ARGUMENT


def test_an_unreadable_topology_is_one_line(tmp_path):
    with pytest.raises(ArgumentError, match=r"health: cannot read --topology .*nowhere\.txt: "):
        load_topology(str(tmp_path / "nowhere.txt"))


def test_a_host_matches_its_own_entry_else_one_whose_first_label_it_is():
    topo = Topology({"node01.cluster": "leaf1", "node02": "leaf2", "node02.cluster": "leafX",
                     "node03.a": "leaf1", "node03.b": "leaf2"}, "t")
    assert topo.leaf_of("node01") == "leaf1"
    assert topo.leaf_of("node02") == "leaf2"  # its own entry first
    assert topo.leaf_of("node03") is None  # two entries of that first label disagree: not placed
    assert topo.leaves_for(["node02", "node01"]).of == (0, 1)


def test_a_host_of_the_scan_missing_from_the_file_is_one_line():
    topo = Topology({"h0": "leaf1", "h1": "leaf1"}, "t.txt (HOST LEAF lines)")
    check_hosts(topo, ["h0", "h1"])
    with pytest.raises(ArgumentError) as err:
        check_hosts(topo, ["h0", "h1", "h2", "h3"])
    assert err.value.message == ("health: --topology t.txt (HOST LEAF lines): 2 host(s) of the scan are under no "
                                 "leaf in it (h2, h3); every host of the scan needs its leaf switch")


def _cli(args, env):
    return subprocess.run([sys.executable, "-m", "ncclbench", "health", *args], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("text, needle", [
    ("node01\n", "line 1: expected 'HOST LEAF'"),
    ("SwitchName=leaf1 Nodes=node[1-\n", "'[' without ']'"),
])
def test_the_command_says_a_bad_topology_in_one_line_exit_255(ncclbench_env, tmp_path, text, needle):
    path = tmp_path / "topo.conf"
    path.write_text(text)
    res = _cli(["--backend", "mpi", "--nprocs", "2", "--no-store", "--topology", str(path)], ncclbench_env)
    assert res.returncode == 255, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ncclbench: health: --topology {path}: ") and needle in lines[0]
    assert "Traceback" not in res.stderr


def _measure(job, deadline, stage, inbox):
    """A healthy group's figures, as a rank sends them (no MPI or GPU needed)."""
    return {"nranks": len(job.members), "bw_us": 100.0, "lat_us": 20.0, "wrong": 0, "bw_bytes": 1 << 20,
            "bw_cycles_us": [100.0] * 3, "lat_cycles_us": [20.0] * 3}


def test_a_scan_whose_host_is_under_no_leaf_ends_every_rank_255_with_one_line(monkeypatch, capfd):
    """The ranks' host names are known only once they join: the coordinator checks them against the
    file before anything runs, and every rank leaves with the usage code."""
    monkeypatch.setenv("NCCLBENCH_HEALTH_HOST_MAP", "h0,h1,h2,h3")
    monkeypatch.setenv("NCCLBENCH_HEALTH_ADDR", "127.0.0.1")
    monkeypatch.delenv("NCCLBENCH_HEALTH_PROGRESS", raising=False)
    cfg = ScanConfig(phases=("pairs",), topology=Topology({"h0": "l1", "h1": "l1", "h2": "l2"}, "t.txt (x)"))
    opts = service.ServiceOptions(round_timeout_s=30.0, join_timeout_s=10.0, store=False)
    coordinating = service._coordinator_thread(4, opts, cfg, GroupSpec(bw_bytes=1 << 20), "test")
    ended: dict[int, tuple[int, str]] = {}

    def rank(r: int) -> None:
        join = coordinating if r == 0 else service.JoinPoint(coordinating.where, coordinating.token, r)
        ended[r] = service._join_and_measure(join, opts, _measure, None)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, t0 + 15 - time.monotonic()))
    assert {code for code, _ in ended.values()} == {int(ExitCode.ARGUMENT)} and len(ended) == 4, ended
    err = [x for x in capfd.readouterr().err.splitlines() if x.strip()]
    assert err == ["ncclbench: health: --topology t.txt (x): 1 host(s) of the scan are under no leaf in it (h3); "
                   "every host of the scan needs its leaf switch"], err
