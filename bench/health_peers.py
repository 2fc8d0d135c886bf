"""The peers' bad-node strategies, on the same simulated fabric as ncclbench health.

Rules as read from their code and docs (shared/reference/explain-and-fleet.md §C):

together-style (find_stragglers.py, 2026-05 version): disjoint 2-node groups,
each a separate job running `all_reduce_perf -b 8G -e 8G -w 2 -n 5` (ring);
z = (busbw - median) / max(stdev, 0.5 % of median) against a stored baseline
(sorted samples of a healthy run, top and bottom quartile dropped, median and
stdev of the rest); a group with z < -2 or no busbw is bad; round 2 pairs each
node of a bad group with a distinct node of a healthy group (|z| <= 2),
round-robin, all at once; no busbw -> candidate_bad, z < -2 ->
candidate_bad_perf.  Those two are the nodes it names; it has no link verdict.

SuperBench-style (pair-wise pattern + rule-file diagnosis): every pair once in
a round-robin tournament (n-1 rounds of n/2 pairs, one MPI launch per group);
the `variance` rule with the documented example criterion `x < -0.05` on
(busbw - baseline) / baseline flags a pair, `failure_check` flags a pair with
no result.  How flagged pairs become machines is our decoding (the docs give no
rule for pairs): a node is named when more than half of its pairs are flagged,
a link when a flagged pair's two nodes are both not named.

Both measure whole-host pairs (16 GPUs) with one timed run per job: the
fabric's `pair_values`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from ncclbench.health.core.scan_schedule import round_robin
from ncclbench.simulation.fabric import SimFabric, TimeModel

JOB_START_S = 5.0  # Slurm/mpirun step start on idle nodes: an assumption, the same for both peers
POLL_S = 30.0  # together's watchdog polls every 30 s (find_stragglers.py)
PEER_BYTES = 8 << 30  # -b 8G -e 8G
PEER_OPS = 2 + 5 + 1  # -w 2 -n 5, and nccl-tests' default -c 1 checked op


@dataclass
class PeerOutcome:
    nodes: set[int]
    links: set[tuple[int, int]]
    rounds: int
    time_s: float


def peer_round_s(tm: TimeModel, busbw: float) -> float:
    """One 2-node job: start, NCCL init of 16 ranks, the ops."""
    return JOB_START_S + tm.init_s(16) + PEER_OPS * tm.op_s(PEER_BYTES, busbw, 16, 46.0)


def trimmed_baseline(values: np.ndarray) -> tuple[float, float]:
    """together's stored baseline: drop the top and bottom quartile, median and stdev of the rest."""
    v = sorted(float(x) for x in values if np.isfinite(x))
    q = len(v) // 4
    kept = v[q: len(v) - q] if len(v) >= 3 else v
    return statistics.median(kept), statistics.stdev(kept) if len(kept) > 1 else 0.0


def together_scan(fabric: SimFabric, baseline: tuple[float, float], tm: TimeModel) -> PeerOutcome:
    H = fabric.fleet.nhosts
    a = np.arange(0, H - 1, 2)
    b = a + 1
    med, sd = baseline
    sigma = max(sd, 0.005 * med)
    bw1 = fabric.pair_values(a, b)
    z1 = (bw1 - med) / sigma
    bad = ~np.isfinite(bw1) | (z1 < -2)
    rounds, time_s = 1, math.ceil(peer_round_s(tm, float(np.nanmin(bw1))) / POLL_S) * POLL_S
    pool = [int(x) for pair in zip(a[~bad & (np.abs(z1) <= 2)], b[~bad & (np.abs(z1) <= 2)]) for x in pair]
    suspects = [int(x) for pair in zip(a[bad], b[bad]) for x in pair]
    flagged: set[int] = set()
    if suspects and pool:
        partners = np.array([pool[i % len(pool)] for i in range(len(suspects))])
        s = np.array(suspects)
        bw2 = fabric.pair_values(s, partners)
        z2 = (bw2 - med) / sigma
        flagged = {int(x) for x, v, z in zip(s, bw2, z2) if not np.isfinite(v) or z < -2}
        rounds += 1
        time_s += math.ceil(peer_round_s(tm, float(np.nanmin(bw2)) if np.isfinite(bw2).any() else 1.0)
                            / POLL_S) * POLL_S
    elif suspects:
        flagged = set(suspects)  # nothing healthy to re-pair with: both sides stay candidates
    return PeerOutcome(flagged, set(), rounds, time_s)


_TOURNAMENTS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def tournament_pairs(nhosts: int) -> tuple[np.ndarray, np.ndarray]:
    if nhosts not in _TOURNAMENTS:
        pairs = [p for rnd in round_robin(list(range(nhosts))) for p in rnd]
        arr = np.array(pairs, dtype=np.int64)
        _TOURNAMENTS[nhosts] = (arr[:, 0], arr[:, 1])
    return _TOURNAMENTS[nhosts]


def superbench_scan(fabric: SimFabric, baseline_median: float, tm: TimeModel) -> PeerOutcome:
    H = fabric.fleet.nhosts
    a, b = tournament_pairs(H)
    bw = fabric.pair_values(a, b)
    flagged = ~np.isfinite(bw) | ((bw - baseline_median) / baseline_median < -0.05)
    per_node = np.bincount(a[flagged], minlength=H) + np.bincount(b[flagged], minlength=H)
    total = np.bincount(a, minlength=H) + np.bincount(b, minlength=H)
    named = per_node > total / 2
    links = {(int(x), int(y)) for x, y in zip(a[flagged], b[flagged]) if not named[x] and not named[y]}
    rounds = H - 1 if H % 2 == 0 else H
    return PeerOutcome({int(x) for x in np.flatnonzero(named)}, links, rounds,
                       rounds * peer_round_s(tm, fabric.spec.full_pair_gbs))
