"""The path between two leaf switches in the whole-phase model (health/core/pair_model.py
`_path_tests`) and in the scan (--topology): convicted when most pairs crossing it are slow
against their rounds while their hosts are fast elsewhere; never a host, never a drain."""

import numpy as np
import pytest

from ncclbench.health.core.findings import LINK, NODE_NIC, PATH
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.leaf_switches import Topology
from ncclbench.health.core.pair_model import HOST, Measurement, judge_pairs
from ncclbench.health.core.pair_model import PATH as PATH_KIND
from ncclbench.health.core.scan import ScanConfig, run_scan
from ncclbench.health.core.scan_schedule import Leaves, leaf_rounds, round_robin
from ncclbench.health.outputs.scan_output import exit_code
from ncclbench.simulation.fabric import Faults, SimFabric, fault_scenario

FLOOR, Z = 0.01, 3.5


def leaves_of(sizes):
    of = tuple(i for i, n in enumerate(sizes) for _ in range(n))
    return Leaves(tuple(f"leaf{i}" for i in range(len(sizes))), of)


def measured(rounds, factor, seed=0, noise=0.005, level=None):
    """One measurement per pair a round: 1.0 x factor(pair) x noise x the round's level."""
    rng = np.random.default_rng(seed)
    return [Measurement(q, factor(q) * float(np.exp(rng.normal(0, noise))) * (level or {}).get(r, 1.0), f"r{r}")
            for r, rnd in enumerate(rounds) for q in rnd]


def convictions(res):
    return [(c.kind, c.hosts, c.path, c.confirmed) for c in res.convictions]


SIZES = [4, 4, 4, 4]
LEAVES = leaves_of(SIZES)
NAMES = [f"n{i}" for i in range(16)]
ROUNDS = leaf_rounds(range(16), LEAVES, crossings=2)


def test_a_slow_path_is_the_path_and_no_host():
    """Every pair crossing leaf0<->leaf1 at half: the path, from its host-disjoint crossing pairs whose
    hosts are fast elsewhere; not its hosts (each fast within its leaf and to other leaves)."""
    slow = lambda q: 0.5 if LEAVES.path(*q) == (0, 1) else 1.0  # noqa: E731
    res = judge_pairs(measured(ROUNDS, slow), range(16), NAMES, FLOOR, Z, LEAVES)
    assert convictions(res) == [(PATH_KIND, (), (0, 1), True)], res
    c = res.convictions[0]
    assert c.evidence[0].startswith(f"path leaf0<->leaf1: {len(c.pairs)} of {len(c.pairs)} pairs crossing it at 0.50x")
    assert c.pairs and all(LEAVES.path(*q) == (0, 1) for q in c.pairs)
    blind = judge_pairs(measured(ROUNDS, slow), range(16), NAMES, FLOOR, Z)  # the same pairs, leaves unknown
    assert all(c.kind != PATH_KIND for c in blind.convictions)


def test_a_slow_nic_is_its_host_not_the_paths_it_crosses():
    slow = lambda q: 0.5 if 5 in q else 1.0  # noqa: E731
    res = judge_pairs(measured(ROUNDS, slow), range(16), NAMES, FLOOR, Z, LEAVES)
    assert convictions(res) == [(HOST, (5,), None, True)], res


def test_one_slow_pair_among_those_crossing_a_path_is_no_path():
    """A path limits every pair crossing it; one slow pair of several is not the path."""
    q0 = next(q for rnd in ROUNDS[1:] for q in rnd if LEAVES.path(*q) == (0, 2))
    res = judge_pairs(measured(ROUNDS, lambda q: 0.5 if q == q0 else 1.0), range(16), NAMES, FLOOR, Z, LEAVES)
    assert all(c.kind != PATH_KIND for c in res.convictions), res
    assert [(c.kind, c.hosts) for c in res.convictions] == [("link", q0)]  # measured once: a suspect link


def test_a_round_slow_as_a_whole_convicts_no_path():
    """A round's level moves for the whole machine: each crossing pair is set against its own round's
    other pairs, so a round 5 % down names no path (pooled with the other rounds it would name the
    round's paths); the same round with one path 10 % below it names that path alone."""
    leaves = leaves_of([4] * 8)
    rounds = leaf_rounds(range(32), leaves, crossings=2)
    names = [f"n{i}" for i in range(32)]
    res = judge_pairs(measured(rounds, lambda q: 1.0, level={2: 0.95}), range(32), names, FLOOR, Z, leaves)
    assert [c for c in res.convictions if c.kind == PATH_KIND or c.confirmed] == [], res
    path = next(leaves.path(*q) for q in rounds[2] if leaves.path(*q))
    slow = judge_pairs(measured(rounds, lambda q: 0.9 if leaves.path(*q) == path else 1.0, level={2: 0.95}),
                       range(32), names, FLOOR, Z, leaves)
    assert [(c.kind, c.path) for c in slow.convictions if c.confirmed] == [(PATH_KIND, path)], slow


def scan(fleet, fabric, topology=None, **kw):
    return run_scan(fleet, ScanConfig(phases=("pairs",), topology=topology, **kw), fabric)


def uniform_topology(fleet, per_leaf):
    return Topology({h: f"leaf{i // per_leaf}" for i, h in enumerate(fleet.hosts)}, "t.txt (HOST LEAF lines)")


@pytest.mark.parametrize("nhosts, factor", [(64, 0.9), (96, 0.75), (64, 0.1)])
def test_the_scan_names_a_slow_path_drains_nobody_and_exits_8(nhosts, factor):
    fleet = Fleet.uniform(nhosts, 8)
    topo = uniform_topology(fleet, 32)
    leaves = topo.leaves_for(fleet.hosts)
    rng = np.random.default_rng([5, nhosts])
    faults, want = fault_scenario("leaf-path", fleet, rng, factor=factor, leaves=leaves)
    rep = scan(fleet, SimFabric(fleet, faults, rng=rng), topo)
    assert [(f.component, f.hosts, f.detail) for f in rep.confirmed] == [(PATH, (), want["detail"])], rep.findings
    assert rep.drain == [] and set(rep.host_status.values()) == {"healthy"} and exit_code(rep) == 8
    assert not [f for f in rep.findings if f.component in (LINK, NODE_NIC)], rep.findings  # folded into the path
    assert any(n.startswith("pairs: every leaf pair crossed") for n in rep.notes), rep.notes
    blind = scan(fleet, SimFabric(fleet, faults, rng=np.random.default_rng([5, nhosts])))
    assert not [f for f in blind.confirmed if f.component == PATH]


def test_the_outputs_name_the_path_and_drain_nobody(tmp_path):
    """The verdict table, the JSON, JUnit and the metrics carry the path as a finding of no host."""
    from ncclbench.health.outputs.scan_output import scan_document, verdict_table
    from ncclbench.output.junit import health_cases
    from ncclbench.output.metrics import health_metrics

    fleet = Fleet.uniform(64, 8)
    topo = uniform_topology(fleet, 32)
    faults = Faults(path={frozenset((0, 1)): 0.5}, leaf_of=topo.leaves_for(fleet.hosts).of)
    rep = scan(fleet, SimFabric(fleet, faults, rng=np.random.default_rng(4)), topo)
    table = verdict_table(rep)
    assert any(line.split()[:3] == ["*", "path", "leaf0<->leaf1"] for line in table.splitlines()), table
    assert "path leaf0<->leaf1: 8 of 8 pairs crossing it at 0.50x" in table
    doc = scan_document(rep, {})
    assert [(f["component"], f["hosts"], f["detail"]) for f in doc["findings"] if f["confirmed"]] == \
        [("path", [], "leaf0<->leaf1")] and doc["drain"] == []
    case = next(c for c in health_cases(doc) if c.name == "leaf0<->leaf1")
    assert case.failure and case.failure.startswith("path leaf0<->leaf1 slow")
    assert 'ncclbench_health_finding{component="path",host="",peer="",detail="leaf0<->leaf1"' in health_metrics(doc)


def test_a_pair_across_a_convicted_path_is_no_evidence_against_its_hosts():
    """256 hosts, a path 5 % slow: node199's pair across it read rails 2 and 3 slow, and its next pair
    dipped on the same rails by noise, so it was "bad with two partners" and drained.  The path
    explains the first pair (PairState.explain): the path alone, nobody drained."""
    fleet = Fleet.uniform(256, 8)
    topo = uniform_topology(fleet, 32)
    rng = np.random.default_rng([777, 256, 7])
    faults, want = fault_scenario("leaf-path", fleet, rng, factor=0.95, leaves=topo.leaves_for(fleet.hosts))
    rep = scan(fleet, SimFabric(fleet, faults, rng=rng), topo)
    assert [(f.component, f.detail) for f in rep.confirmed] == [(PATH, want["detail"])], rep.findings
    assert rep.drain == [] and set(rep.host_status.values()) == {"healthy"}, rep.host_status


def test_every_pair_measured_with_a_topology_judges_the_paths_too():
    """16 hosts, two leaves of 8: the round-robin of every pair crosses the path 64 times; the model
    names the path rather than 64 links."""
    fleet = Fleet.uniform(16, 2)
    topo = uniform_topology(fleet, 8)
    faults = Faults(path={frozenset((0, 1)): 0.8}, leaf_of=topo.leaves_for(fleet.hosts).of)
    rep = scan(fleet, SimFabric(fleet, faults, rng=np.random.default_rng(3)), topo)
    assert [(f.component, f.detail) for f in rep.confirmed] == [(PATH, "leaf0<->leaf1")], rep.findings
    assert "pairs: every host pair measured (120, round-robin)" in rep.notes[0], rep.notes


@pytest.mark.parametrize("nhosts, per_leaf", [(64, 32), (96, 32), (256, 32), (40, 8), (12, 4)])
def test_seeded_healthy_fleets_with_a_topology_convict_nothing(nhosts, per_leaf):
    fleet = Fleet.uniform(nhosts, 8)
    topo = uniform_topology(fleet, per_leaf)
    for seed in range(3 if nhosts >= 256 else 8):
        rep = scan(fleet, SimFabric(fleet, rng=np.random.default_rng([41, nhosts, seed])), topo)
        assert rep.confirmed == [] and rep.drain == [], (seed, rep.findings)


def test_the_leaf_rounds_run_above_the_all_pairs_size_and_the_note_counts_them():
    fleet = Fleet.uniform(256, 8)
    topo = uniform_topology(fleet, 32)
    fabric = SimFabric(fleet, rng=np.random.default_rng(2))
    rep = scan(fleet, fabric, topo)
    fleet_rounds = [r for r in rep.rounds if r.purpose == "fleet"]
    assert len(fleet_rounds) == 3  # 1 within the leaves + ceil(7 matchings / 4 a round)
    note = next(n for n in rep.notes if n.startswith("pairs:"))
    assert note.startswith("pairs: every leaf pair crossed (28 leaf pair(s) of 8 leaves, 8 host pairs each; --topology "
                           "t.txt (HOST LEAF lines)); 384 of 32640 host pairs measured in "), note
    assert len(round_robin(range(8))) == 7


def test_without_a_topology_the_note_says_how_few_host_pairs_were_measured():
    fleet = Fleet.uniform(64, 8)
    rep = scan(fleet, SimFabric(fleet, rng=np.random.default_rng(2)))
    note = next(n for n in rep.notes if n.startswith("pairs:"))
    assert note.startswith("pairs: 32 of 2016 host pairs measured (1.6%, in 1 round(s); every pair takes 63 rounds): "
                           "a slow link between two hosts never paired is not tested; --topology FILE"), note


def test_the_simulated_path_fault_slows_exactly_the_pairs_crossing_it():
    from ncclbench.health.core.fleet import Fleet
    from ncclbench.health.core.scan_schedule import make_round, pair_groups
    from ncclbench.simulation.fabric import FabricSpec, SimFabric, fault_scenario

    fleet = Fleet.uniform(12, 2)
    leaves = leaves_of([4, 4, 4])
    faults, want = fault_scenario("leaf-path", fleet, np.random.default_rng(1), factor=0.5, leaves=leaves)
    x, y = sorted(next(iter(faults.path)))
    assert want == {"component": "path", "hosts": (), "detail": f"leaf{x}<->leaf{y}"}
    fabric = SimFabric(fleet, faults, FabricSpec(sigma_run=0, sigma_block=0, dip_p=0), rng=np.random.default_rng(0))
    pairs = [(0, 4), (1, 5), (2, 9), (3, 10), (6, 8), (7, 11)]  # every leaf pair, twice
    res = fabric(make_round("pairs", 1, "fleet", pair_groups(fleet, pairs)))
    want_bw = [48.0 * (0.5 if leaves.path(a, b) == (x, y) else 1.0) for a, b in pairs for _ in range(2)]  # 2 rails
    assert np.allclose(res.busbw, want_bw), res.busbw


def test_a_host_convicted_in_the_leaf_rounds_sits_out_the_rest():
    """A NIC at a tenth slows every round it is in to its pace: once convicted (bad with two partners)
    it is left out of the later leaf rounds, and still named alone."""
    fleet = Fleet.uniform(256, 8)
    topo = uniform_topology(fleet, 32)
    fabric = SimFabric(fleet, Faults(nic={(37, None): 0.1}), rng=np.random.default_rng(6))
    rep = scan(fleet, fabric, topo)
    assert [(f.component, f.hosts) for f in rep.confirmed] == [(NODE_NIC, ("node037",))], rep.findings
    holding = [r.name for r in fabric.rounds if any(37 in g.hosts for g in r.groups)]
    assert holding == ["pairs r1", "pairs r2"], holding  # 3 leaf rounds in all
    assert len([r for r in fabric.rounds if r.purpose == "fleet"]) == 3


def test_a_host_alone_under_its_leaf_is_named_with_its_leaf_s_paths_beside_it():
    """Three hosts, leaves {node0, node1} and {node2}: a slow path between them is crossed only by
    node2's pairs, the same measurements as node2's NIC: named as that NIC, with the path said."""
    fleet = Fleet.uniform(3, 2)
    topo = Topology({"node0": "leafA", "node1": "leafA", "node2": "leafB"}, "t")
    faults = Faults(path={frozenset((0, 1)): 0.5}, leaf_of=topo.leaves_for(fleet.hosts).of)
    rep = scan(fleet, SimFabric(fleet, faults, rng=np.random.default_rng(1)), topo)
    [f] = rep.confirmed
    assert (f.component, f.hosts) == (NODE_NIC, ("node2",)), rep.findings
    assert "node2 is the only host under leafB: every pair of it crosses leafB's uplinks, so its NIC cannot be " \
           "told from the paths between leafB and the other leaves" in f.evidence
