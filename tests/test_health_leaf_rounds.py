"""The pairs phase's leaf rounds (health/core/scan_schedule.py `leaf_rounds`): round 1 within the
leaves, then a round robin over the leaves, so every leaf pair is crossed by host pairs, each host
in one pair a round, whatever the leaf count (odd, even) or sizes."""

from itertools import combinations

import pytest

from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.scan_schedule import LEAF_CROSSINGS, Leaves, leaf_rounds, make_round, pair_groups


def leaves_of(sizes):
    of = tuple(i for i, n in enumerate(sizes) for _ in range(n))
    return Leaves(tuple(f"leaf{i}" for i in range(len(sizes))), of)


def crossings(rounds, leaves):
    out = {}
    for rnd in rounds:
        for a, b in rnd:
            path = leaves.path(a, b)
            if path is not None:
                out.setdefault(path, set()).add((a, b))
    return out


def disjoint(pairs):
    """How many of `pairs` share no host (greedy)."""
    used, n = set(), 0
    for a, b in sorted(pairs):
        if a not in used and b not in used:
            used |= {a, b}
            n += 1
    return n


@pytest.mark.parametrize("sizes, crossing", [
    ([32] * 2, 8), ([32] * 8, 8), ([32] * 32, 8),  # the simulated fleets: 64, 256, 1024 hosts
    ([32] * 8, 32),  # one matching a round: L - 1 leaf rounds
    ([4] * 5, 2), ([4] * 7, 8),  # odd leaf counts: a leaf sits out each matching
    ([5, 3, 7, 2, 6], 2), ([9, 1, 4], 8), ([3, 3], 8), ([1, 1, 1, 1], 8),  # uneven sizes, one-host leaves
])
def test_every_leaf_pair_crossed_and_every_host_once_a_round(sizes, crossing):
    leaves = leaves_of(sizes)
    hosts = list(range(sum(sizes)))
    rounds = leaf_rounds(hosts, leaves, crossing)
    for rnd in rounds:
        seen = [h for pair in rnd for h in pair]
        assert len(seen) == len(set(seen)), rnd  # disjoint: a host in one pair a round
        assert len(seen) >= len(hosts) - 1  # everybody paired, one left out at most (an odd count)
        make_round("pairs", 1, "fleet", pair_groups(Fleet.uniform(len(hosts), 2), rnd))  # no GPU in two groups
    cross = crossings(rounds[1:], leaves)
    assert set(cross) == set(combinations(range(len(sizes)), 2))  # every leaf pair
    for (x, y), pairs in cross.items():  # ... by host pairs with no host in common, as many as both leaves allow
        assert disjoint(pairs) >= min(sizes[x], sizes[y], crossing) // (2 if len(sizes) == 2 else 1), (x, y, pairs)
    # round 1 within the leaves: only the odd one out of an odd-sized leaf crosses, paired with another such
    assert sum(leaves.path(a, b) is not None for a, b in rounds[0]) <= sum(n % 2 for n in sizes) // 2


@pytest.mark.parametrize("nleaves, rounds", [(2, 2), (8, 3), (32, 9), (5, 3), (7, 3)])
def test_matchings_share_rounds_so_32_leaves_take_9_rounds_not_32(nleaves, rounds):
    """32 hosts a leaf, LEAF_CROSSINGS (8) host pairs a leaf pair: 4 chunks a leaf, 4 matchings a
    round, so 1 + ceil(M / 4) rounds for the M matchings of the round robin (L - 1, L when odd)."""
    leaves = leaves_of([32] * nleaves)
    got = leaf_rounds(list(range(32 * nleaves)), leaves)
    assert len(got) == rounds
    assert all(len(ps) == LEAF_CROSSINGS for ps in crossings(got[1:], leaves).values())


def test_one_matching_a_round_is_l_minus_1_rounds_of_whole_leaves():
    """crossings = the leaf size: every host of a leaf crosses to one leaf a round (the plain round
    robin over the leaves): 1 + 7 rounds for 8 leaves, every leaf pair crossed by all 32 pairs."""
    leaves = leaves_of([32] * 8)
    got = leaf_rounds(list(range(256)), leaves, crossings=32)
    assert len(got) == 8
    assert all(len(ps) == 32 for ps in crossings(got[1:], leaves).values())
    assert all(all(leaves.path(a, b) is not None for a, b in rnd) for rnd in got[1:])


def test_two_leaves_keep_pairs_within_the_leaves_beside_the_crossing_ones():
    """With two leaves every crossing pair crosses the one path: the round must also hold pairs that
    cross nothing, to set them against (the model compares a path's pairs with their round's)."""
    leaves = leaves_of([8, 8])
    got = leaf_rounds(list(range(16)), leaves, crossings=8)
    assert len(got) == 2 and leaves.path_name((0, 1)) == "leaf0<->leaf1"
    within = [p for p in got[1] if leaves.path(*p) is None]
    assert len(within) >= 4 and len(got[1]) - len(within) >= 2
    assert not set(got[1]) & set(got[0])  # a partner not met in round 1


def test_one_leaf_has_no_leaf_round():
    got = leaf_rounds(list(range(6)), leaves_of([6]))
    assert got == [[(0, 1), (2, 3), (4, 5)]]
