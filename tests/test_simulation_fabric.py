"""simulation.fabric (the fabric the scale benchmark uses) and bench/health_peers.py
(the peers' decision rules on it): noise-free numbers are exact, faults land on
the parts they name, the time model follows its stated constants."""

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan import ScanConfig, run_scan
from ncclbench.health.core.scan_schedule import make_round, pair_groups, rail_groups
from ncclbench.simulation.fabric import FabricSpec, Faults, SimFabric, TimeModel, fault_scenario

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import health_peers  # noqa: E402

QUIET = FabricSpec(sigma_run=0.0, sigma_block=0.0, dip_p=0.0, sigma_lat=0.0)


def test_noise_free_pairs_show_exactly_the_faulty_parts():
    fleet = Fleet.uniform(4, 2)
    faults = Faults(nic={(1, 0): 0.9, (3, None): 0.8}, link={frozenset({0, 2}): 0.5})
    fab = SimFabric(fleet, faults, QUIET, rng=np.random.default_rng(0))
    rnd = make_round("pairs", 1, "fleet", pair_groups(fleet, [(0, 1), (2, 3)]))
    res = fab(rnd)
    assert list(res.busbw) == pytest.approx([48 * 0.9, 48.0, 48 * 0.8, 48 * 0.8])
    rnd2 = make_round("pairs", 2, "localize", pair_groups(fleet, [(0, 2)]))
    assert list(fab(rnd2).busbw) == pytest.approx([24.0, 24.0])
    rails = fab(make_round("rail", 1, "fleet", rail_groups(fleet)))
    # ring 0-1-2-3-0 on rail 0: host 1's NIC (0.9) and host 3 (0.8) -> 0.8; the 0-2 link is not on the ring
    assert list(rails.busbw) == pytest.approx([48 * 0.8, 48 * 0.8])


def test_silent_host_gives_no_answer_and_the_round_lasts_the_timeout():
    fleet = Fleet.uniform(4, 2)
    tm = TimeModel(round_timeout_s=7.0)
    fab = SimFabric(fleet, Faults(hung={2}), QUIET, tm, np.random.default_rng(0))
    res = fab(make_round("pairs", 1, "fleet", pair_groups(fleet, [(0, 1), (2, 3)])))
    assert np.isnan(res.busbw[2:]).all() and np.isfinite(res.busbw[:2]).all()
    assert set(res.errors) == {2, 3} and res.wall_s == pytest.approx(7.0 + tm.exchange_s)


def test_median_of_cycles_removes_a_single_dip():
    spec = replace(QUIET, dip_p=1.0, dip_max=0.06, cycles=1)
    fab = SimFabric(Fleet.uniform(2, 1), None, spec, rng=np.random.default_rng(3))
    assert (fab.noise(1000) < 1.0).all()  # every block dips with one cycle
    spec3 = replace(QUIET, dip_p=0.01, dip_max=0.5, cycles=3)
    fab3 = SimFabric(Fleet.uniform(2, 1), None, spec3, rng=np.random.default_rng(3))
    assert (fab3.noise(2000) > 0.999).mean() > 0.99  # one dipped block of three is outvoted


def test_time_model_follows_its_constants():
    tm = TimeModel()
    assert tm.init_s(2) == 0.15 and tm.init_s(16) == 2.2
    assert tm.init_s(1024) == pytest.approx(2.2 + 3 * 1024 * 1e-4)
    # 1 GiB at 48 GB/s busbw between 2 ranks: factor 1
    assert tm.op_s(1 << 30, 48.0, 2, 0.0) == pytest.approx((1 << 30) / 48e9)
    direct = tm.round_s(8192, 2, 48.0, 20.0, True)
    split = replace(tm, path="split")
    assert split.round_s(8192, 2, 48.0, 20.0, True) == pytest.approx(direct + 3 * 8192 * 1e-4)
    assert split.setup_s() == 150.0 and tm.setup_s() == 0.0


@pytest.mark.parametrize("kind", ["nic-node", "nic-rail", "link-r1", "dead", "gpu", "intra"])
def test_each_injected_fault_is_named_by_the_scan(kind):
    fleet = Fleet.uniform(16, 4)
    rng = np.random.default_rng(5)
    r1 = {a: a ^ 1 for a in range(16)}
    faults, want = fault_scenario(kind, fleet, rng, factor=0.85, round1_pairs=r1)
    fab = SimFabric(fleet, faults, FabricSpec(), TimeModel(), rng)
    rep = run_scan(fleet, ScanConfig(), fab)
    names = {fleet.hosts[h] for h in want["hosts"]}
    hits = [f for f in rep.confirmed if f.component == want["component"] and set(f.hosts) == names]
    assert hits, [(f.component, f.hosts, f.detail) for f in rep.findings]
    assert want["detail"] is None or hits[0].detail == want["detail"]


def test_together_rules_flag_the_slow_node_after_re_pairing():
    fleet = Fleet.uniform(8, 8)
    tm = TimeModel()
    fab = SimFabric(fleet, Faults(nic={(5, None): 0.8}), QUIET, tm, np.random.default_rng(0))
    out = health_peers.together_scan(fab, (368.0, 1.0), tm)
    assert out.nodes == {5} and out.links == set() and out.rounds == 2
    assert out.time_s == 2 * health_peers.POLL_S  # each round waits for the 30 s watchdog poll


def test_together_baseline_drops_the_quartiles():
    med, sd = health_peers.trimmed_baseline(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0]))
    assert med == 4.5 and sd == pytest.approx(np.std([3.0, 4.0, 5.0, 6.0], ddof=1))


def test_superbench_rules_name_a_node_and_a_link():
    fleet = Fleet.uniform(8, 2)
    tm = TimeModel()
    faults = Faults(nic={(2, None): 0.8}, link={frozenset({4, 7}): 0.8})
    fab = SimFabric(fleet, faults, QUIET, tm, np.random.default_rng(0))
    out = health_peers.superbench_scan(fab, 368.0, tm)
    assert out.nodes == {2} and out.links == {(4, 7)} and out.rounds == 7
