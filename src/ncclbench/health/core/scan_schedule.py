"""Phases of a health scan as rounds of disjoint groups that run at the same time.

One job holds every rank; each round splits it into groups (communicators
split from the world one) that share no GPU, so all groups of a round run
at once and a round costs about one group's time whatever the fleet size:

* local  - every GPU alone (the single-GPU path: a 1-rank all_reduce is a
           device copy), judged over every GPU of the fleet;
* intra  - all GPUs of one host (NVLink / PCIe), judged over hosts;
* rail   - GPU slot i of every host (one NIC rail across the fabric),
           judged over rails;
* pairs  - hosts in disjoint pairs.  With the default "rails" shape a pair
           is split into one 2-rank group per rail ({A:i, B:i}), so every
           NIC of both hosts is measured on its own; the "full" shape runs
           one group with all GPUs of both hosts.  Later rounds re-pair
           suspects with hosts already shown healthy (`localize`).

Disjoint pairs measure n/2 of the n(n-1)/2 host pairs: a link between two hosts the
pairing never puts together is never measured, so a slow one goes unseen.  Up to
`ALL_PAIRS_MAX_HOSTS` hosts the pairs phase is therefore a round-robin tournament
(`round_robin`, SuperBench's pair-wise pattern): every pair once in n-1 rounds, then
suspect links re-run in rounds of disjoint pairs (`PairScan._confirm_pairs`: usually
one round, more where suspects share a host; at most as many as the tournament had).
Above it the disjoint pairs and re-pairing (2-4 rounds) stay the default and the report
says how many host pairs were measured; `--all-pairs` / `--no-all-pairs` choose either
at any size.  At that scale no cable joins two hosts: a pair crosses its leaf switches and,
between two leaves, the path through the spine; told each host's leaf (`--topology`), the
pairs phase crosses every leaf pair instead (`leaf_rounds`: 1 + ceil((L - 1) / chunks) rounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

from .fleet import Fleet

PHASES = ("local", "intra", "rail", "pairs")
# Every host pair measured by default up to this many hosts: the pairs phase then takes 15 tournament
# rounds plus those re-running suspect links (usually one, more where suspects share a host; at most
# 15).  A round costs seconds (2-rank communicators and --bw-size; 8 fake hosts on 4 H100s over 4 Gbit/s
# sockets: 4.4 s for one round, 24 s for the last six of a tournament, issue 25's GPU visit at 3681118),
# so the pairs phase of a 16-host scan stays near a minute; a larger fleet would pay n-1 rounds to
# measure every link.
ALL_PAIRS_MAX_HOSTS = 16


def all_pairs_by_default(nhosts: int) -> bool:
    """Whether the pairs phase measures every host pair when not told (`ALL_PAIRS_MAX_HOSTS`)."""
    return nhosts <= ALL_PAIRS_MAX_HOSTS


PAIR_SHAPES = ("rails", "full")
# Host pairs crossing each leaf pair in the leaf rounds (`leaf_rounds`): a leaf's hosts go in chunks
# of about this many, each chunk to another leaf in the same round, so the L - 1 leaf matchings run
# in (L - 1) / chunks rounds; a path is convicted on two host-disjoint crossing pairs or more
# (`pair_model`), and 8 leave it that many times over.  32 hosts a leaf: 4 chunks, so 1024 hosts
# (32 leaves) take 1 + 8 rounds rather than 1 + 31, 256 hosts (8 leaves) 1 + 2.
LEAF_CROSSINGS = 8


@dataclass(frozen=True)
class Group:
    """One communicator of a round: (host index, GPU slot) members."""

    phase: str
    members: tuple[tuple[int, int], ...]
    rail: int | None = None  # rail groups and rail-split pairs: the GPU slot

    @cached_property
    def hosts(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(h for h, _ in self.members))

    @cached_property
    def shape(self) -> str:
        """Groups of one shape are comparable: they pool into one fleet reference."""
        hosts = self.hosts
        return f"{self.phase}:{len(hosts)}x{len(self.members) // max(1, len(hosts))}"

    def label(self, fleet: Fleet) -> str:
        names = [fleet.hosts[h] for h in self.hosts]
        if self.phase == "local":
            return f"{names[0]} {fleet.unit} {self.members[0][1]}"
        if self.phase == "rail":
            return f"rail {self.rail} ({len(names)} hosts)"
        text = "+".join(names)
        return f"{text} rail {self.rail}" if self.rail is not None else text


@dataclass(frozen=True)
class Round:
    phase: str
    index: int  # 1-based within its phase
    purpose: str  # "fleet" (everyone), "localize" (re-pair suspects), "confirm" (re-run suspects)
    groups: tuple[Group, ...]
    # groups measured only as this round's yardstick: ok in a fleet round, run again beside the
    # suspects so a round slowed as a whole is told from a fault (`localize.PhaseScan._score`)
    controls: frozenset[Group] = frozenset()

    @property
    def name(self) -> str:
        return f"{self.phase} r{self.index}"

    def colors(self, fleet: Fleet) -> list[int]:
        """Per world rank: the index of its group in this round, -1 when idle
        (the color for MPI_Comm_split / ncclCommSplit; -1 -> MPI_UNDEFINED /
        NCCL_SPLIT_NOCOLOR)."""
        out = [-1] * fleet.world_size
        for g, group in enumerate(self.groups):
            for h, s in group.members:
                out[fleet.rank_of(h, s)] = g
        return out


# The group lists depend on the fleet only (and pairs on the pairing), so they are
# built once per fleet: a simulated 1024-host scan runs them a hundred times.
@lru_cache(maxsize=16)
def local_groups(fleet: Fleet) -> tuple[Group, ...]:
    return tuple(Group("local", ((h, s),)) for h in range(fleet.nhosts) for s in range(fleet.gpus(h)))


@lru_cache(maxsize=16)
def intra_groups(fleet: Fleet) -> tuple[Group, ...]:
    """One group per host that has at least two GPUs."""
    return tuple(Group("intra", tuple((h, s) for s in range(fleet.gpus(h))))
                 for h in range(fleet.nhosts) if fleet.gpus(h) >= 2)


@lru_cache(maxsize=16)
def rail_groups(fleet: Fleet) -> tuple[Group, ...]:
    """GPU slot r of every host that has one; only rails present on two hosts or more."""
    out = []
    for r in range(fleet.max_gpus):
        members = tuple((h, r) for h in range(fleet.nhosts) if fleet.gpus(h) > r)
        if len(members) >= 2:
            out.append(Group("rail", members, rail=r))
    return tuple(out)


def pair_groups(fleet: Fleet, pairs: Sequence[tuple[int, int]], shape: str = "rails") -> list[Group]:
    """The groups of host pairs: one 2-rank group per common rail, or one group per pair."""
    return list(_pair_groups(fleet, tuple(pairs), shape))


@lru_cache(maxsize=16)
def _pair_groups(fleet: Fleet, pairs: tuple[tuple[int, int], ...], shape: str) -> tuple[Group, ...]:
    if shape not in PAIR_SHAPES:
        raise ValueError(f"pair shape must be one of {PAIR_SHAPES}, not {shape!r}")
    out = []
    for a, b in pairs:
        if shape == "rails":
            for r in range(min(fleet.gpus(a), fleet.gpus(b))):
                out.append(Group("pairs", ((a, r), (b, r)), rail=r))
        else:
            members = tuple((a, s) for s in range(fleet.gpus(a))) + tuple((b, s) for s in range(fleet.gpus(b)))
            out.append(Group("pairs", members))
    return tuple(out)


def disjoint_pairs(hosts: Sequence[int]) -> tuple[list[tuple[int, int]], int | None]:
    """Neighbours in the given order, (0,1), (2,3), ...; an odd count leaves the last host out."""
    pairs = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts) - 1, 2)]
    leftover = hosts[-1] if len(hosts) % 2 else None
    return pairs, leftover


def round_robin(hosts: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Every pair exactly once, in rounds of disjoint pairs (the circle method):
    n-1 rounds for an even count, n rounds (one host sits out each) for an odd one."""
    items: list[int | None] = list(hosts)
    if len(items) < 2:
        return []
    if len(items) % 2:
        items.append(None)
    n = len(items)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for i in range(n // 2):
            a, b = items[i], items[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if a < b else (b, a))
        rounds.append(pairs)
        items = [items[0], items[-1], *items[1:-1]]  # keep the first, rotate the rest
    return rounds


@dataclass(frozen=True)
class Leaves:
    """The leaf switch of each host of a fleet (`leaf_switches.Topology.leaves_for`): host h hangs off
    leaf `names[of[h]]`.  A host pair under two leaves crosses the path between them."""

    names: tuple[str, ...]
    of: tuple[int, ...]  # host index -> leaf index
    source: str = ""  # the file it was read from, and its format (for the report)

    def path(self, a: int, b: int) -> tuple[int, int] | None:
        """The leaf pair (lower index first) a host pair crosses; None within one leaf."""
        x, y = self.of[a], self.of[b]
        return None if x == y else (min(x, y), max(x, y))

    def path_name(self, path: tuple[int, int]) -> str:
        return f"{self.names[path[0]]}<->{self.names[path[1]]}"

    def members(self, hosts: Sequence[int]) -> dict[int, list[int]]:
        """leaf index -> its hosts among `hosts`, in their order (leaves in order of their first host)."""
        out: dict[int, list[int]] = {}
        for h in hosts:
            out.setdefault(self.of[h], []).append(h)
        return out


def leaf_rounds(hosts: Sequence[int], leaves: Leaves, crossings: int = LEAF_CROSSINGS) -> list[list[tuple[int, int]]]:
    """The pairs phase's fleet rounds over leaves: every leaf pair crossed by host pairs.

    Round 1 pairs each leaf's hosts with each other (the pairs that cross no path: every host
    fast or slow apart from any path).  Then a round robin over the leaves (`round_robin`: every
    leaf pair in one of L - 1 matchings, L for an odd count), `chunks` matchings a round: each
    leaf's hosts split into `chunks` parts (sizes one apart), part j crossing to the leaf's
    partner in the round's j-th matching, host i of one part with host i of the other; chunks =
    smallest leaf // `crossings`, at least 1 (then the round is one matching: L - 1 rounds; with
    two leaves at least 2, so that the round holds pairs within the leaves beside the crossing
    ones).  Hosts a round leaves over (a part beyond the last matching, a leaf
    without partner, the longer of two parts) pair within their leaf, a partner not met before
    first, and those left after that with each other.  So every host is in one pair a round;
    1 + ceil(M / chunks) rounds for M matchings."""
    by_leaf = leaves.members(hosts)
    ids = list(by_leaf)
    if len(ids) < 2:
        return [disjoint_pairs(list(hosts))[0]]
    matchings = round_robin(ids)
    # two leaves: half their hosts at least stay within their leaf, so the crossing pairs' round holds
    # pairs crossing no path to be set against (with more leaves the other leaf pairs' pairs are there)
    chunks = max(2 if len(ids) == 2 else 1, min(len(v) for v in by_leaf.values()) // max(1, crossings))
    parts = {leaf: _split(members, chunks) for leaf, members in by_leaf.items()}
    met: set[tuple[int, int]] = set()
    rounds = [_fill([], [list(v) for v in by_leaf.values()], met)]
    for start in range(0, len(matchings), chunks):
        pairs: list[tuple[int, int]] = []
        idle: dict[int, list[int]] = {leaf: [] for leaf in ids}
        for j in range(chunks):
            partner = {}
            if start + j < len(matchings):
                for x, y in matchings[start + j]:
                    partner[x], partner[y] = y, x
            for leaf in ids:
                mine = parts[leaf][j]
                other = partner.get(leaf)
                if other is None:
                    idle[leaf].extend(mine)
                elif leaf < other:
                    theirs = parts[other][j]
                    k = min(len(mine), len(theirs))
                    pairs.extend((min(a, b), max(a, b)) for a, b in zip(mine[:k], theirs[:k]))
                    idle[leaf].extend(mine[k:])
                    idle[other].extend(theirs[k:])
        rounds.append(_fill(pairs, list(idle.values()), met))
    return rounds


def _split(members: Sequence[int], chunks: int) -> list[list[int]]:
    """`members` in `chunks` consecutive parts whose sizes differ by one at most."""
    q, r = divmod(len(members), chunks)
    out, i = [], 0
    for j in range(chunks):
        size = q + (j < r)
        out.append(list(members[i:i + size]))
        i += size
    return out


def _fill(pairs: list[tuple[int, int]], idle: Sequence[Sequence[int]], met: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """`pairs` and the idle hosts paired within their leaf (each group of `idle` is one leaf's), a
    partner not met before where one is free, then the hosts left over with each other, in order.
    `met` (the pairs of the rounds so far) grows by the round's pairs."""
    out = list(pairs)
    rest: list[int] = []
    for group in idle:
        free = list(group)
        while len(free) >= 2:
            a = free.pop(0)
            b = next((x for x in free if (min(a, x), max(a, x)) not in met), free[0])
            free.remove(b)
            out.append((min(a, b), max(a, b)))
        rest.extend(free)
    out.extend((min(a, b), max(a, b)) for a, b in zip(rest[0::2], rest[1::2]))
    met.update(out)
    return out


def make_round(phase: str, index: int, purpose: str, groups: Sequence[Group],
               controls: Sequence[Group] = ()) -> Round:
    """A round of disjoint groups; `controls` run with them as the round's yardstick."""
    used: set[tuple[int, int]] = set()
    for g in (*groups, *controls):
        for m in g.members:
            if m in used:
                raise ValueError(f"{phase} round {index}: GPU {m} is in two groups")
            used.add(m)
    return Round(phase, index, purpose, (*groups, *controls), frozenset(controls))
