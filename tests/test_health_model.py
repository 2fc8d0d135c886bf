"""The whole-phase model (health/core/pair_model.py): a slow host or link among few hosts, where
one component sits in a large share of the pairs and the round's median cannot see it."""

import numpy as np
import pytest
from health_helpers import FakeFabric

from ncclbench.health.core.findings import LINK, NODE_NIC
from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.pair_model import HOST, Measurement, judge_pairs
from ncclbench.health.core.round_judge import thresholds_for
from ncclbench.health.core.scan import ScanConfig, run_scan
from ncclbench.health.outputs.scan_output import exit_code
from ncclbench.simulation.fabric import SimFabric, fault_scenario

NAMES = [f"node{i}" for i in range(8)]


def scan(fleet, fabric, gpus=True):
    return run_scan(fleet, ScanConfig(phases=("pairs",), thresholds=thresholds_for(gpus)), fabric)


def confirmed(rep):
    return [(f.component, f.hosts, f.verdict) for f in rep.findings if f.confirmed]


@pytest.mark.parametrize("gpus", [True, False])
@pytest.mark.parametrize("slow", [0, 2, 3])
def test_four_hosts_one_nic_at_half_is_named_alone(slow, gpus):
    """The fake-host run of 2026-11-28 on 2x H200: every pair with node2 at 0.47 against 0.92 GB/s
    in 3 rounds read "4 healthy", exit 0.  One host in half the pairs: now named, exit 8, no other
    host; on the GPU floors and the CPU backend's wider ones, whichever host it is."""
    fleet = Fleet.uniform(4, 1)
    rep = scan(fleet, FakeFabric(nic={(slow, None): 0.51}), gpus)
    name = f"node{slow}"
    assert confirmed(rep) == [(NODE_NIC, (name,), "slow")], rep.findings
    assert exit_code(rep) == 8
    assert rep.drain == [name]
    assert {h for h, st in rep.host_status.items() if st != "healthy"} == {name}, rep.host_status
    ev = " ".join(e for f in rep.findings for e in f.evidence)
    assert f"{name}: 3 of 3 pairs at 0.5" in ev, ev


@pytest.mark.parametrize("nhosts", [3, 4, 5, 6, 7])
@pytest.mark.parametrize("factor", [0.75, 0.25])
def test_small_fleets_name_one_slow_host(nhosts, factor):
    """3 to 7 hosts: one host's NIC at 75 % or 25 % of the others is named, nothing else."""
    fleet = Fleet.uniform(nhosts, 1)
    rep = scan(fleet, FakeFabric(nic={(1, None): factor}))
    assert confirmed(rep) == [(NODE_NIC, ("node1",), "slow")], rep.findings
    assert exit_code(rep) == 8


@pytest.mark.parametrize("nhosts", [3, 4, 5, 6, 7])
def test_small_fleets_name_one_slow_link_and_drain_nobody(nhosts):
    """A pair slow while both its hosts are fast with everyone else is the link: no host drained."""
    fleet = Fleet.uniform(nhosts, 1)
    rep = scan(fleet, FakeFabric(link={frozenset((0, 2)): 0.5}))
    assert confirmed(rep) == [(LINK, ("node0", "node2"), "slow")], rep.findings
    assert rep.drain == []


@pytest.mark.parametrize("nhosts", [3, 4, 5, 8])
def test_simulated_fleets_with_eight_rails_find_a_ten_percent_nic(nhosts):
    """The simulated fabric (measured noise, 8 GPUs a host): a host's NICs at 90 % are named on
    every seed tried, and healthy fleets of the same seeds confirm nothing."""
    fleet = Fleet.uniform(nhosts, 8)
    for seed in range(3):
        rng = np.random.default_rng([seed, nhosts])
        faults, want = fault_scenario("nic-node", fleet, rng)
        rep = run_scan(fleet, ScanConfig(phases=("pairs",)), SimFabric(fleet, faults, rng=rng))
        assert confirmed(rep) == [(NODE_NIC, (f"node{want['hosts'][0]}",), "slow")], rep.findings
        healthy = run_scan(fleet, ScanConfig(phases=("pairs",)), SimFabric(fleet, rng=np.random.default_rng(seed)))
        assert confirmed(healthy) == [], healthy.findings


def _tournament(values: dict[tuple[int, int], float], rounds: int = 1) -> list[Measurement]:
    return [Measurement(p, v, f"r{r}") for r in range(rounds) for p, v in values.items()]


def test_model_tells_a_host_from_a_link():
    """The host common to all slow pairs is the host; a pair slow while both hosts are fast
    elsewhere is the link (confirmed only when two rounds measured it slow)."""
    host = {(0, 1): 1.0, (0, 2): 0.5, (0, 3): 1.0, (1, 2): 0.5, (1, 3): 1.0, (2, 3): 0.5}
    res = judge_pairs(_tournament(host), range(4), NAMES, 0.01, 3.5)
    assert [(c.kind, c.hosts, c.confirmed) for c in res.convictions] == [(HOST, (2,), True)]
    link = {(0, 1): 1.0, (0, 2): 0.5, (0, 3): 1.0, (1, 2): 1.0, (1, 3): 1.0, (2, 3): 1.0}
    once = judge_pairs(_tournament(link), range(4), NAMES, 0.01, 3.5)
    assert [(c.kind, c.hosts, c.confirmed) for c in once.convictions] == [("link", (0, 2), False)]
    twice = judge_pairs(_tournament(link, 2), range(4), NAMES, 0.01, 3.5)
    assert [(c.kind, c.hosts, c.confirmed) for c in twice.convictions] == [("link", (0, 2), True)]


def test_model_a_one_off_dip_convicts_nothing():
    """A pair slow in one round and fine when measured again is noise: its best round counts."""
    ms = _tournament({(0, 1): 1.0, (0, 2): 1.0, (0, 3): 1.0, (1, 2): 1.0, (1, 3): 1.0, (2, 3): 1.0})
    ms = [Measurement(m.hosts, 0.5 if m.hosts == (0, 2) else m.busbw, m.label) for m in ms]
    ms.append(Measurement((0, 2), 1.0, "r9"))
    assert judge_pairs(ms, range(4), NAMES, 0.01, 3.5).convictions == []


def test_model_censored_measurement_convicts_only_below_its_bound():
    """An upper bound (a group past the deadline) enters at its bound: a bound below the others
    convicts, and the evidence says it was a bound; a bound above them convicts nothing."""
    base = {(0, 1): 1.0, (0, 3): 1.0, (1, 3): 1.0}
    for bound, want in ((0.1, [(2,)]), (2.0, [])):
        ms = _tournament(base) + [Measurement(p, bound, "r0", upper_bound=True) for p in ((0, 2), (1, 2), (2, 3))]
        res = judge_pairs(ms, range(4), NAMES, 0.01, 3.5)
        assert [c.hosts for c in res.convictions] == want
        if want:
            assert "(upper bound)" in res.convictions[0].evidence[0]


def test_model_does_not_judge_a_fleet_that_scatters():
    """Pairs scattering over 6x with no host or pair apart from the rest (a loaded machine):
    nothing convicted, every reference set scatters past judge.SCATTER_LIMIT."""
    scatter = {(0, 1): 1.0, (0, 2): 0.25, (0, 3): 0.6, (1, 2): 0.4, (1, 3): 0.15, (2, 3): 0.8}
    assert judge_pairs(_tournament(scatter, 2), range(4), NAMES, 0.01, 3.5).convictions == []


def test_model_two_hosts_judge_nothing_and_say_so():
    """Two hosts make one pair: nothing to compare it with (a baseline or the line rate would)."""
    res = judge_pairs(_tournament({(0, 1): 0.2}, 3), range(2), NAMES, 0.01, 3.5)
    assert res.convictions == [] and "too few" in res.notes[0]


def _notes(rep):
    return " ".join(rep.notes) if hasattr(rep, "notes") else ""


def test_two_hosts_say_which_reference_judged_them():
    """Two hosts: not judged without a reference (and the report says what would judge them);
    with a stored scan of these hosts, judged against it: a pair at half of it is slow, and with
    one pair nothing says which side, so both hosts are suspects (exit 9), never healthy."""
    from ncclbench.health.core.round_judge import Baseline

    fleet = Fleet.uniform(2, 1)
    rep = scan(fleet, FakeFabric(nic={(1, None): 0.5}))
    assert confirmed(rep) == [] and exit_code(rep) == 9
    assert "not judged" in _notes(rep) and "--baseline FILE" in _notes(rep), _notes(rep)
    base = Baseline({"pairs:2x1": (48.0, 0.3)}, name="good", hosts=("node0", "node1"))
    judged = run_scan(fleet, ScanConfig(phases=("pairs",), baseline=base), FakeFabric(nic={(1, None): 0.5}))
    assert exit_code(judged) == 9 and "healthy" not in judged.host_status.values(), judged.host_status
    assert {f.hosts for f in judged.findings if f.verdict.startswith("suspect")} == {("node0",), ("node1",)}
    assert "judged against baseline good" in _notes(judged), _notes(judged)


def test_a_baseline_of_another_shape_is_one_line_and_judges_nothing():
    """A baseline saved on 8-GPU hosts used on 4-GPU hosts of the same names: one line naming
    both shapes (ArgumentError: exit 255); on 8-GPU hosts, or one-GPU shapes only, it is used."""
    from ncclbench.core.errors import ArgumentError
    from ncclbench.health.core.round_judge import Baseline
    from ncclbench.health.outputs.baseline_file import check_baseline_hosts

    base = Baseline({"intra:1x8": (300.0, 3.0), "pairs:2x8": (40.0, 0.4)}, name="b8", hosts=("node0", "node1"))
    with pytest.raises(ArgumentError, match=r"^health: baseline b8 was saved on hosts of 8 GPU\(s\), this scan's "
                                            r"hosts have 4: another shape, not judged against it$"):
        check_baseline_hosts(base, Fleet.uniform(2, 4))
    check_baseline_hosts(base, Fleet.uniform(2, 8))
    check_baseline_hosts(Baseline({"local:1x1": (600.0, 30.0)}, hosts=("node0",)), Fleet.uniform(2, 4))


@pytest.mark.parametrize("nhosts", [3, 4])
def test_small_fleet_nvlink_judged_against_the_other_hosts_alone(nhosts):
    """3-4 hosts: a host's NVLink at 75 % is a third or a quarter of its fleet reference; judged
    against the other hosts' figures alone it is named (on every seed tried), nothing else."""
    fleet = Fleet.uniform(nhosts, 8)
    for seed in range(4):
        rng = np.random.default_rng([seed, nhosts, 5])
        faults, want = fault_scenario("intra", fleet, rng, factor=0.75)
        rep = run_scan(fleet, ScanConfig(phases=("local", "intra")), SimFabric(fleet, faults, rng=rng))
        assert [(f.component, f.hosts) for f in rep.confirmed] == [("node intra", (f"node{want['hosts'][0]}",))], \
            rep.findings


class _Bounded:
    """FakeFabric whose groups holding `host` had not finished: their busbw is an upper bound."""

    def __init__(self, fabric, host, bound):
        self.fabric, self.host, self.bound = fabric, host, bound

    def __call__(self, rnd):
        res = self.fabric(rnd)
        for i, g in enumerate(rnd.groups):
            if self.host in g.hosts:
                res.busbw[i] = self.bound
                res.upper_bound[i] = "had not finished by the round's deadline"
        return res


def test_a_round_result_bound_reaches_the_model_as_censored():
    """RoundResult.upper_bound (a group past its round's deadline) enters the model as an upper bound,
    and a host whose every pair is bounded below the others is named with that said."""
    from ncclbench.health.core.pair_phase import PairScan

    fleet = Fleet.uniform(4, 1)
    ps = PairScan(fleet, thresholds_for(True))
    fabric = _Bounded(FakeFabric(), 2, 1.0)
    while (rnd := ps.next_round()) is not None:
        ps.record(rnd, fabric(rnd))
    ms = ps.measurements()
    assert {m.upper_bound for m in ms if 2 in m.hosts} == {True}
    assert {m.upper_bound for m in ms if 2 not in m.hosts} == {False}
    res = ps.model()
    assert [c.hosts for c in res.convictions] == [(2,)]
    assert "(upper bound)" in res.convictions[0].evidence[0]


def test_three_hosts_ten_percent_link_is_re_run_and_named():
    """3 simulated hosts (8 rails): a link at 90 % that the round's own reference (3 pairs, the slow
    one among them) does not flag is a suspect of the whole-phase model, re-run, and named; before
    the model's suspects were re-run, 3 of these 20 fleets ended with it unconfirmed."""
    fleet = Fleet.uniform(3, 8)
    for t in range(20):
        rng = np.random.default_rng([1, 3, 2, t])
        faults, want = fault_scenario("link-random", fleet, rng, factor=0.9)
        rep = run_scan(fleet, ScanConfig(), SimFabric(fleet, faults, rng=rng))
        assert [(f.component, f.hosts) for f in rep.confirmed] == \
            [(LINK, tuple(f"node{h}" for h in want["hosts"]))], (t, rep.findings)


def test_model_a_host_whose_pairs_disagree_is_not_one_slow_nic():
    """CI, 2026-11-28 (6 CPU-backend hosts on 2 cores): one host's pairs measured 0.23, 0.064, 1.18 and
    0.46 GB/s against 2.9 for three pairs without it.  A NIC limits all its pairs alike; pairs that
    disagree 18x are the scheduler's, not a NIC: not convicted.  The same host with its pairs agreeing
    is."""
    others = {(0, 1): 2.9, (2, 3): 2.85, (1, 5): 2.95}
    scattered = {(0, 4): 0.231, (1, 4): 0.0643, (2, 4): 1.18, (4, 5): 0.457}
    assert judge_pairs(_tournament(others | scattered), range(6), NAMES, 0.1, 3.5).convictions == []
    agreeing = {k: 0.4 for k in scattered}
    res = judge_pairs(_tournament(others | agreeing), range(6), NAMES, 0.1, 3.5)
    assert [c.hosts for c in res.convictions] == [(4,)]
