"""The path between two leaf switches in the whole-phase model (health/core/pair_model.py
`_path_tests`): convicted when most pairs crossing it are slow against their rounds while their
hosts are fast elsewhere; never a host."""

import numpy as np

from ncclbench.health.core.pair_model import HOST, Measurement, judge_pairs
from ncclbench.health.core.pair_model import PATH as PATH_KIND
from ncclbench.health.core.scan_schedule import Leaves, leaf_rounds

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
