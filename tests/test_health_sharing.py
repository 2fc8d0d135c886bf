"""Ranks sharing a device (health/core/sharing.py) and the whole-phase model's load classes and
consistency check (health/core/pair_model.py): the two false alarms of 2026-11-28 and a real fault beside them."""

import numpy as np
import pytest

from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.pair_model import HOST, LINK, Measurement, judge_pairs
from ncclbench.health.core.scan_schedule import Group, Round
from ncclbench.health.core.sharing import round_loads, shared_devices

NAMES = [f"node{i}" for i in range(8)]
FLOOR, Z = 0.01, 3.5


def pairs_round(name, pairs):
    return Round("pairs", 1, "fleet", tuple(Group("pairs", ((a, 0), (b, 0))) for a, b in pairs))


def five_on_two_gpus():
    """5 fake hosts, one rank each, host i on GPU i % 2 of one machine (bench/fakehosts.py)."""
    answers = {r: {"machine": "boot-1", "pci": f"0000:{r % 2:02x}:00.0"} for r in range(5)}
    return Fleet.uniform(5, 1), shared_devices(answers)


def test_gpu_shared_by_fake_hosts_is_found_and_own_gpus_are_not():
    fleet, devices = five_on_two_gpus()
    assert set(devices) == {0, 1, 2, 3, 4} and devices[0] == devices[2] == devices[4] != devices[1]
    own = {r: {"machine": f"boot-{r}", "pci": "0000:01:00.0"} for r in range(4)}  # a real fleet: same bus id, 4 machines
    assert shared_devices(own) == {}
    assert shared_devices({0: {"pci": "0000:01:00.0"}, 1: {"pci": "0000:01:00.0"}}) == {}  # machine unknown: not guessed


def test_crowded_cpus_are_shared_and_roomy_ones_are_not():
    crowded = {r: {"backend": "mpi", "machine": "m", "cpus": [0, 1]} for r in range(4)}
    assert set(shared_devices(crowded)) == {0, 1, 2, 3}
    roomy = {r: {"backend": "mpi", "machine": "m", "cpus": list(range(16))} for r in range(4)}
    assert shared_devices(roomy) == {}
    # GPU ranks whose PCI address is unknown are not CPU ranks: their CPUs are not the device
    gpus = {r: {"backend": "nccl", "machine": "m", "cpus": [0, 1], "pci": None} for r in range(4)}
    assert shared_devices(gpus) == {}


def test_round_load_counts_the_ranks_on_a_pairs_devices_and_flags_time_slicing():
    fleet, devices = five_on_two_gpus()
    # node2+node4 both on GPU 0 beside node0+node1: GPU 0 runs 3 ranks, GPU 1 one
    loads, sliced = round_loads(pairs_round("r2", [(2, 4), (0, 1)]), fleet, devices)
    assert loads == {0: 3, 1: 3}
    assert list(sliced) == [0] and "2 of its ranks share one device" in sliced[0]
    # node0+node3 beside node1+node2: two ranks on each GPU
    loads, sliced = round_loads(pairs_round("r3", [(0, 3), (1, 2)]), fleet, devices)
    assert loads == {0: 2, 1: 2} and sliced == {}
    assert round_loads(pairs_round("r1", [(0, 1)]), fleet, {}) == ({}, {})


def five_host_scan(slow_host=None, factor=0.5):
    """Every pair of 5 fake hosts on 2 GPUs; pairs of rounds that put 3 ranks on GPU 0 run 3 %
    slower (as measured 2026-11-28); a slow host's NIC at `factor`."""
    fleet, devices = five_on_two_gpus()
    rounds = [[(0, 1), (2, 3)], [(0, 2), (1, 3)], [(0, 3), (1, 4)], [(0, 4), (2, 3)], [(1, 2), (3, 4)],
              [(2, 4), (0, 1)], [(2, 4), (0, 3)]]  # round-robin-like, node2+node4 twice beside a third GPU-0 rank
    rng = np.random.default_rng(7)
    out = []
    for k, pairs in enumerate(rounds):
        loads, _ = round_loads(pairs_round(f"r{k}", pairs), fleet, devices)
        for i, (a, b) in enumerate(pairs):
            load = loads.get(i, 1)
            bw = 0.462 * (0.97 if load >= 3 else 1.0) * rng.normal(1.0, 0.002)
            if slow_host in (a, b):
                bw *= factor
            out.append(Measurement((a, b), bw, f"pairs r{k + 1}", load=load))
    return out


def test_five_fake_hosts_healthy_convict_no_link_though_gpu0_pairs_run_3_percent_slower():
    ms = five_host_scan()
    assert {m.load for m in ms} == {2, 3}
    res = judge_pairs(ms, range(5), NAMES, FLOOR, Z)
    assert res.convictions == [], [c.evidence for c in res.convictions]
    assert any("compared with pairs run at the same load" in n for n in res.notes)
    # the same figures without their load (as before): node2+node4, twice at the 3-rank load, is "a slow link"
    flat = [Measurement(m.hosts, m.busbw, m.label) for m in ms]
    assert [(c.kind, c.hosts) for c in judge_pairs(flat, range(5), NAMES, FLOOR, Z).convictions
            if c.confirmed] == [(LINK, (2, 4))]


@pytest.mark.parametrize("factor", [0.75, 0.5, 0.25])
def test_five_fake_hosts_a_slow_nic_is_still_named_across_load_classes(factor):
    res = judge_pairs(five_host_scan(slow_host=1, factor=factor), range(5), NAMES, FLOOR, Z)
    assert [(c.kind, c.hosts, c.confirmed) for c in res.convictions] == [(HOST, (1,), True)], res.notes


def test_a_class_of_too_few_pairs_is_left_out_and_said():
    ms = [Measurement((0, 1), 1.0, "r1"), Measurement((2, 3), 1.0, "r1"), Measurement((0, 2), 1.0, "r2"),
          Measurement((1, 3), 1.0, "r2"), Measurement((0, 3), 0.3, "r3", load=2)]
    res = judge_pairs(ms, range(4), NAMES, FLOOR, Z)
    assert res.convictions == []
    assert any("1 pair(s) measured with 2 ranks on one shared device" in n for n in res.notes), res.notes


def test_slow_pairs_with_no_common_host_convict_nothing_and_say_why():
    """CI, 2026-11-28: 6 CPU-backend ranks on 2 busy cores; 4 of 10 pairs at 0.01x, two holding h2,
    the others not: h2 was convicted.  Pairs as slow without it: the model refuses."""
    fast = {(0, 4): 2.4, (0, 5): 2.5, (1, 5): 2.7, (4, 5): 2.64, (0, 3): 2.45, (1, 3): 2.5}
    slow = {(0, 2): 0.0324, (2, 5): 0.0215, (0, 1): 0.0279, (1, 4): 0.0607}
    ms = [Measurement(k, v, "pairs r1") for k, v in {**fast, **slow}.items()]
    res = judge_pairs(ms, [0, 1, 2, 4, 5], NAMES, 0.10, Z)
    assert res.convictions == []
    assert any(n.startswith("pairs model not judged: node2 measured") and "node0+node1 0.0279" in n
               for n in res.notes), res.notes
    # one slow host alone, the rest fast: still convicted (the check does not cost the real fault)
    ms = [Measurement(k, v, "pairs r1") for k, v in {**fast, (0, 2): 0.0324, (2, 5): 0.0215,
                                                    (2, 4): 0.03}.items()]
    res = judge_pairs(ms, [0, 1, 2, 4, 5], NAMES, 0.10, Z)
    assert [(c.kind, c.hosts) for c in res.convictions if c.confirmed] == [(HOST, (2,))]


def test_a_later_round_divided_by_its_controls_joins_the_fleet_level_not_a_class_of_its_own():
    """A slow link among 5 fake hosts: its fleet round at 3 ranks a GPU, its re-run (already divided
    by its controls) at no load class of its own: two rounds, so the link is confirmed."""
    ms = [m for m in five_host_scan() if m.hosts != (1, 3)]
    ms += [Measurement((1, 3), 0.23, "pairs r2", load=2), Measurement((1, 3), 0.231, "pairs r8", load=0)]
    res = judge_pairs(ms, range(5), NAMES, FLOOR, Z)
    assert [(c.kind, c.hosts, c.confirmed) for c in res.convictions] == [(LINK, (1, 3), True)], res.notes
