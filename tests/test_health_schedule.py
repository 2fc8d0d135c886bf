"""health.core.fleet and health.core.scan_schedule: hosts from rank host names, phases as disjoint groups."""

import itertools

import pytest

from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan_schedule import (
    Group,
    disjoint_pairs,
    intra_groups,
    local_groups,
    make_round,
    pair_groups,
    rail_groups,
    round_robin,
)


def test_ranks_grouped_by_host_name_in_any_rank_order():
    fleet = Fleet.from_rank_hosts(["b", "a", "b", "a", "c"])
    assert fleet.hosts == ("b", "a", "c")
    assert fleet.ranks == ((0, 2), (1, 3), (4,))
    assert fleet.where(3) == (1, 1) and fleet.rank_of(0, 1) == 2
    assert fleet.min_gpus == 1 and fleet.max_gpus == 2 and fleet.world_size == 5


def test_problems_are_one_line_each_and_name_what_still_runs():
    assert "only the single-GPU path" in Fleet.from_rank_hosts(["a"]).problems()[0]
    one_host = Fleet.from_rank_hosts(["a"] * 4).problems()
    assert len(one_host) == 1 and "at least 2 hosts" in one_host[0] and "local and intra-node" in one_host[0]
    odd = Fleet.uniform(5, 2).problems()
    assert len(odd) == 1 and "odd host count (5)" in odd[0]
    uneven = Fleet.from_rank_hosts(["a", "a", "b", "b", "b"]).problems()
    assert len(uneven) == 1 and "uneven GPUs per host (a: 2, b: 3)" in uneven[0] and "rails 0-1" in uneven[0]
    listed = Fleet.uniform(2, 1, prefix="n").problems(["n0", "n7"])
    assert len(listed) == 1 and "listed but not in the job: n7" in listed[0] and "not listed: n1" in listed[0]
    assert all("\n" not in line for line in one_host + odd + uneven + listed)
    assert Fleet.uniform(4, 8).problems() == []


def test_local_intra_and_rail_groups():
    fleet = Fleet.from_rank_hosts(["a", "a", "a", "b", "b", "c"])  # 3, 2 and 1 GPUs
    assert len(local_groups(fleet)) == 6
    intra = intra_groups(fleet)
    assert [g.hosts for g in intra] == [(0,), (1,)]  # c has one GPU: no intra-node group
    rails = rail_groups(fleet)
    assert [(g.rail, g.hosts) for g in rails] == [(0, (0, 1, 2)), (1, (0, 1))]  # slot 2 only on host a
    assert rails[0].shape == "rail:3x1" and intra[0].shape == "intra:1x3"


def test_pair_groups_by_rail_or_whole_host():
    fleet = Fleet.from_rank_hosts(["a"] * 4 + ["b"] * 3)
    by_rail = pair_groups(fleet, [(0, 1)], "rails")
    assert [(g.members, g.rail) for g in by_rail] == [(((0, r), (1, r)), r) for r in range(3)]
    assert by_rail[0].shape == "pairs:2x1" and by_rail[0].label(fleet) == "a+b rail 0"
    full = pair_groups(fleet, [(0, 1)], "full")
    assert len(full) == 1 and len(full[0].members) == 7 and full[0].rail is None
    with pytest.raises(ValueError):
        pair_groups(fleet, [(0, 1)], "triangles")


def test_disjoint_pairs_leave_the_odd_host_out():
    assert disjoint_pairs([0, 1, 2, 3]) == ([(0, 1), (2, 3)], None)
    assert disjoint_pairs([4, 1, 7]) == ([(4, 1)], 7)
    assert disjoint_pairs([3]) == ([], 3)


@pytest.mark.parametrize("n", range(2, 10))
def test_round_robin_meets_every_pair_once_in_disjoint_rounds(n):
    rounds = round_robin(list(range(n)))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    seen = []
    for pairs in rounds:
        hosts = [h for p in pairs for h in p]
        assert len(hosts) == len(set(hosts))  # disjoint within a round
        seen.extend(pairs)
    assert sorted(seen) == sorted(itertools.combinations(range(n), 2))


def test_a_round_refuses_a_gpu_in_two_groups_and_gives_split_colors():
    fleet = Fleet.uniform(3, 2)
    with pytest.raises(ValueError, match="in two groups"):
        make_round("x", 1, "fleet", [Group("pairs", ((0, 0), (1, 0))), Group("pairs", ((1, 0), (2, 0)))])
    rnd = make_round("pairs", 1, "fleet", pair_groups(fleet, [(0, 2)]))
    # ranks: host0 = 0,1; host1 = 2,3 (idle); host2 = 4,5
    assert rnd.colors(fleet) == [0, 1, -1, -1, 0, 1]
