"""A simulated fabric for the health scan, and a time model for its rounds.

`SimFabric` answers `run_scan`'s rounds the way a cluster would: each group's
bandwidth is the nominal figure of its kind, times the capacity factors of
the parts it crosses (the slowest part bounds a ring), times measurement
noise.  So the schedule, the judgement and the localization scored by
`bench/health_sim.py` are exactly the code of the real scan.

Nominal figures (GB/s, busbw at a large size; constants of `FabricSpec`):
* one NIC rail, 2 ranks on 2 hosts: 48 - CX-7 NDR 400G gives 46-49 GB/s per
  NIC (NVIDIA maintainer, nccl-tests #267 and #290);
* all GPUs of one host: 365 - 8x H200 all_reduce ring, NVLS off, 8 GiB: 365.6
  (ml-engineering, quoted in shared/reference/landscape.md 4.2); this repo's
  4x H200 measured 365.2 (shared/reference/baseline-h200.md);
* two whole hosts (16 GPUs): 368 - 2x8 H100 ring, together-nccl-tests README;
* one GPU alone (1-rank all_reduce = a device copy, algbw): 2000 - an
  assumption (HBM3e copy); the local phase is judged relative to the fleet,
  so this number only sets the phase's time, which is small either way.

Noise (a group's value = nominal x factor x exp(N(0, sigma_run)) x median
over `cycles` timed blocks of exp(N(0, sigma_block)) x an occasional dip):
* sigma_run = 1.2 %, the run-to-run scatter of one group on a new
  communicator: this repo's recorded all_reduce busbw at >= 64 MiB spread
  (max-min)/median 0.49-0.69 % over 5 runs on 4 GPUs and 1.54-2.06 % over 3
  runs on 2 GPUs (bench/results/compare-2026-11-21-repeats-{4,2}gpu-busbw.json); a range of
  2.06 % over 3 runs is sigma ~1.2 % (range/1.69).  baseline-h200.md says
  "1-3 % from run to run"; bench/health_sim.py also runs 0.5, 2 and 3 %;
* sigma_block = 0.25 %, the scatter of one timed block of 20 iterations:
  per-iteration CV 1.5 % at 16 MiB on 4x H200
  (shared/reference/nccl-tests-output/all_reduce_4proc_per_iter.json), / sqrt(20)
  ~0.34 %, rounded down as iterations of one block are not independent;
* dips: with probability 0.5 % a block loses U(0, 6 %) - an assumption standing
  for transient congestion (health checks needed retries because healthy nodes
  occasionally dipped: Azure/azurehpc PR #690; NVIDIA/nccl #1469);
* latency: sigma 3 % (small-message times moved 0.5-0.9 us between two runs
  of the same command: bench/results/gpu-h200x4-2026-11-21-hypercube.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..health.core.fleet import Fleet
from ..health.core.round_judge import RoundResult
from ..health.core.scan_schedule import Leaves, Round


@dataclass(frozen=True)
class FabricSpec:
    nic_gbs: float = 48.0
    intra_gbs: float = 365.0
    full_pair_gbs: float = 368.0
    local_gbs: float = 2000.0
    sigma_run: float = 0.012
    sigma_block: float = 0.0025
    dip_p: float = 0.005
    dip_max: float = 0.06
    sigma_lat: float = 0.03
    cycles: int = 3  # timed blocks per group; the group's value is their median


@dataclass
class Faults:
    """Capacity factors (1.0 = healthy) of the parts of the fabric."""

    nic: dict[tuple[int, int | None], float] = field(default_factory=dict)  # (host, rail or None=all)
    link: dict[frozenset[int], float] = field(default_factory=dict)  # {a, b} -> factor, every rail
    # {leaf x, leaf y} -> factor: the path between two leaf switches (an uplink, a spine port), which
    # every host pair crossing between those leaves shares, on every rail; `leaf_of` says which
    # leaf each host hangs off (host index -> leaf index)
    path: dict[frozenset[int], float] = field(default_factory=dict)
    leaf_of: tuple[int, ...] = ()
    gpu: dict[tuple[int, int], float] = field(default_factory=dict)  # (host, slot)
    intra: dict[int, float] = field(default_factory=dict)  # host -> NVLink/PCIe factor
    dead: set[int] = field(default_factory=set)  # hosts whose processes died
    hung: set[int] = field(default_factory=set)  # hosts whose processes stopped answering


@dataclass(frozen=True)
class TimeModel:
    """Seconds a round costs on a real cluster (the simulator adds them up).

    Per round: communicator creation + the ops at both sizes + the result
    exchange; a round where a group does not answer lasts `round_timeout_s`.
    * creation of a communicator of n ranks, from NCCL's own "Init timings"
      lines: 2 ranks 0.15 s (ncclCommSplit, NVIDIA/nccl #1605), 8 ranks 0.66 s
      (nccl-tests #273), 16 ranks over 2 nodes 1.5-2.2 s (nccl-tests #319; the
      worst, 2.2 s, is used); above 16 ranks + n x `bootstrap_step_s` per
      bootstrap allgather step (3 allgathers; the step is an assumption: Meta
      measured "a few 100 ms" bootstrap allgathers at large scale, NVIDIA/nccl
      PR #1791);
    * with communicators split from a world one (`path="split"`), the world
      communicator is made once: `world_init_s` = 150 s, the "2.5-minute init
      time at large scale (above certain K GPUs)" NVIDIA/nccl #1156 reports
      (Jan 2024) - a pessimistic figure, kept so the bound is not flattered -
      and each split runs one bootstrap allgather over the parent.  With
      `path="direct"` each group is made by ncclCommInitRank from a unique id
      sent over the host communicator, and no world NCCL communicator exists;
    * ops: `cycles` x (warmup + iters) ops at `bw_bytes` + (warmup + lat_iters)
      at `lat_bytes`, + 1 checked op of each (-c 1), at the slowest group's
      busbw (time = bytes x 2(n-1)/n / busbw + latency);
    * `exchange_s` = 0.1 s per round: results gathered to rank 0 and the next
      round's colors broadcast (~100 B per rank over MPI) - an assumption.
    """

    bw_bytes: int = 1 << 30
    lat_bytes: int = 8
    warmup: int = 5
    iters: int = 20
    lat_iters: int = 100
    cycles: int = 3
    init_table: tuple[tuple[int, float], ...] = ((1, 0.15), (2, 0.15), (8, 0.66), (16, 2.2))
    bootstrap_step_s: float = 1e-4
    world_init_s: float = 150.0
    exchange_s: float = 0.1
    round_timeout_s: float = 30.0
    path: str = "direct"

    def init_s(self, nranks: int) -> float:
        xs, ys = zip(*self.init_table)
        if nranks <= xs[-1]:
            return float(np.interp(nranks, xs, ys))
        return self.init_table[-1][1] + 3 * nranks * self.bootstrap_step_s

    def op_s(self, nbytes: int, busbw_gbs: float, nranks: int, lat_us: float) -> float:
        factor = 2 * (nranks - 1) / nranks if nranks > 1 else 1.0  # 1 rank: algbw (a copy)
        return nbytes * factor / (busbw_gbs * 1e9) + lat_us * 1e-6

    def round_s(self, world_size: int, group_ranks: int, slow_busbw: float, lat_us: float,
                answered: bool) -> float:
        if not answered:
            return self.round_timeout_s + self.exchange_s
        bw = self.op_s(self.bw_bytes, slow_busbw, group_ranks, lat_us)
        lat = self.op_s(self.lat_bytes, slow_busbw, group_ranks, lat_us)
        ops = self.cycles * (self.warmup + self.iters) * bw + (self.warmup + self.lat_iters) * lat + bw + lat
        create = self.init_s(group_ranks)
        if self.path == "split":
            create += 3 * world_size * self.bootstrap_step_s
        return create + ops + self.exchange_s

    def setup_s(self) -> float:
        return self.world_init_s if self.path == "split" else 0.0


class SimFabric:
    """Answers `run_scan`'s rounds from capacities, faults and noise; keeps a clock."""

    def __init__(self, fleet: Fleet, faults: Faults | None = None, spec: FabricSpec = FabricSpec(),
                 time_model: TimeModel = TimeModel(), rng: np.random.Generator | None = None):
        self.fleet, self.spec, self.tm = fleet, spec, time_model
        self.faults = faults or Faults()
        self.rng = rng or np.random.default_rng()
        H, G = fleet.nhosts, fleet.max_gpus
        self.nic = np.ones((H, G))
        for (h, r), f in self.faults.nic.items():
            if r is None:
                self.nic[h, :] *= f
            else:
                self.nic[h, r] *= f
        self.gpu = np.ones((H, G))
        for (h, s), f in self.faults.gpu.items():
            self.gpu[h, s] *= f
        self.intra = np.ones(H)
        for h, f in self.faults.intra.items():
            self.intra[h] *= f
        self.link = dict(self.faults.link)
        self.path = dict(self.faults.path)
        self.leaf = np.array(self.faults.leaf_of, dtype=np.int64)
        if self.path and self.leaf.size != H:
            raise ValueError("a path fault needs the leaf of every host (Faults.leaf_of)")
        self.silent = np.zeros(H, dtype=bool)
        self.silent[list(self.faults.dead | self.faults.hung)] = True
        self.clock_s = time_model.setup_s()
        self.rounds: list[Round] = []
        self.round_args: list[tuple[int, int, float, float, bool]] = []  # round_s's arguments, per round

    def scan_s(self, tm: TimeModel) -> float:
        """The rounds run so far, timed under another time model (e.g. the split path)."""
        return tm.setup_s() + sum(tm.round_s(*args) for args in self.round_args)

    # -- capacity of each group ----------------------------------------------------------------
    def _link_factor(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.ones(len(a))
        for pair, f in self.link.items():
            x, y = tuple(pair)
            out[((a == x) & (b == y)) | ((a == y) & (b == x))] *= f
        if self.path:
            la, lb = self.leaf[a], self.leaf[b]
            for pair, f in self.path.items():
                x, y = tuple(pair)
                out[((la == x) & (lb == y)) | ((la == y) & (lb == x))] *= f
        return out

    def _factors(self, rnd: Round) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(capacity factor, nominal GB/s, latency us) per group."""
        s, groups = self.spec, rnd.groups
        n = len(groups)
        if rnd.phase == "local":
            h = np.array([g.members[0][0] for g in groups])
            k = np.array([g.members[0][1] for g in groups])
            return self.gpu[h, k], np.full(n, s.local_gbs), np.full(n, 5.0)
        if rnd.phase == "intra":
            h = np.array([g.hosts[0] for g in groups])
            gmin = np.array([self.gpu[g.hosts[0], : len(g.members)].min() for g in groups])
            return np.minimum(self.intra[h], gmin), np.full(n, s.intra_gbs), np.full(n, 15.0)
        if rnd.phase == "rail":
            f = np.empty(n)
            lat = np.empty(n)
            for i, g in enumerate(groups):
                hs = np.array(g.hosts)
                ring = self._link_factor(hs, np.roll(hs, -1)).min()
                f[i] = self.nic[hs, g.rail].min() * ring
                lat[i] = 20.0 + 5.0 * math.log2(len(hs))
            return f, np.full(n, s.nic_gbs), lat
        a = np.array([g.hosts[0] for g in groups])
        b = np.array([g.hosts[1] for g in groups])
        link = self._link_factor(a, b)
        if groups and groups[0].rail is not None:
            r = np.array([g.rail for g in groups])
            return np.minimum(self.nic[a, r], self.nic[b, r]) * link, np.full(n, s.nic_gbs), np.full(n, 20.0)
        nic = np.minimum(self.nic[a].min(axis=1), self.nic[b].min(axis=1))
        return nic * link, np.full(n, s.full_pair_gbs), np.full(n, 46.0)

    def noise(self, n: int) -> np.ndarray:
        """Multiplicative measurement noise of n groups (see the module docstring)."""
        s, rng = self.spec, self.rng
        blocks = np.exp(rng.normal(0.0, s.sigma_block, (n, s.cycles)))
        dips = rng.random((n, s.cycles)) < s.dip_p
        blocks[dips] *= 1.0 - rng.uniform(0.0, s.dip_max, int(dips.sum()))
        return np.exp(rng.normal(0.0, s.sigma_run, n)) * np.median(blocks, axis=1)

    # -- the run_round callable -----------------------------------------------------------------
    def __call__(self, rnd: Round) -> RoundResult:
        self.rounds.append(rnd)
        n = len(rnd.groups)
        factor, nominal, lat = self._factors(rnd)
        bw = nominal * factor * self.noise(n)
        lat_us = lat * np.exp(self.rng.normal(0.0, self.spec.sigma_lat, n))
        silent = np.zeros(n, dtype=bool)
        if self.silent.any():
            silent = np.array([bool(self.silent[list(g.hosts)].any()) for g in rnd.groups])
        bw[silent] = np.nan
        lat_us[silent] = np.nan
        errors = {int(i): f"no answer within {self.tm.round_timeout_s:.0f} s" for i in np.flatnonzero(silent)}
        ranks = max(len(g.members) for g in rnd.groups)
        answered = bw[np.isfinite(bw)]
        slow = float(answered.min()) if answered.size else float(nominal[0])
        args = (self.fleet.world_size, ranks, slow, float(np.nanmax(lat)), not silent.any())
        self.round_args.append(args)
        wall = self.tm.round_s(*args)
        self.clock_s += wall
        return RoundResult(bw, lat_us, np.zeros(n, dtype=np.int64), errors, wall)

    def pair_values(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whole-host pair busbw for arrays of pairs (the peers' 2-node all_reduce),
        one timed block each (nccl-tests prints one average per run); NaN when silent."""
        nic = np.minimum(self.nic[a].min(axis=1), self.nic[b].min(axis=1))
        s, rng = self.spec, self.rng
        n = len(a)
        block = np.exp(rng.normal(0.0, s.sigma_block, n))
        dips = rng.random(n) < s.dip_p
        block[dips] *= 1.0 - rng.uniform(0.0, s.dip_max, int(dips.sum()))
        out = s.full_pair_gbs * nic * self._link_factor(a, b) * np.exp(rng.normal(0.0, s.sigma_run, n)) * block
        out[self.silent[a] | self.silent[b]] = np.nan
        return out


def fault_scenario(kind: str, fleet: Fleet, rng: np.random.Generator, factor: float = 0.9,
                   round1_pairs: Mapping[int, int] | None = None,
                   leaves: Leaves | None = None) -> tuple[Faults, dict[str, Any]]:
    """One injected fault of `kind` on a random part, and what a correct scan names.  "leaf-path":
    the path between two random leaves of `leaves` (each host's leaf switch)."""
    H, G = fleet.nhosts, fleet.min_gpus
    x = int(rng.integers(H))
    if kind == "healthy":
        return Faults(), {}
    if kind == "leaf-path":
        if leaves is None or len(leaves.names) < 2:
            raise ValueError("a leaf-path fault needs two leaves or more")
        i, j = sorted(int(v) for v in rng.choice(len(leaves.names), 2, replace=False))
        return (Faults(path={frozenset((i, j)): factor}, leaf_of=leaves.of),
                {"component": "path", "hosts": (), "detail": leaves.path_name((i, j))})
    if kind == "nic-node":
        return Faults(nic={(x, None): factor}), {"component": "node nic", "hosts": (x,), "detail": "all rails"}
    if kind == "nic-rail":
        r = int(rng.integers(G))
        return Faults(nic={(x, r): factor}), {"component": "node nic", "hosts": (x,), "detail": f"rail {r}"}
    if kind in ("link-r1", "link-random"):
        if kind == "link-r1" and round1_pairs is not None:
            y = round1_pairs.get(x)
            while y is None:  # the odd host has no round-1 partner
                x = int(rng.integers(H))
                y = round1_pairs.get(x)
        else:
            y = int(rng.integers(H - 1))
            y += y >= x
        a, b = sorted((x, y))
        return Faults(link={frozenset((a, b)): factor}), {"component": "link", "hosts": (a, b), "detail": "all rails"}
    if kind == "dead":
        return Faults(dead={x}), {"component": "no answer", "hosts": (x,), "detail": ""}
    if kind == "gpu":
        s = int(rng.integers(G))
        return Faults(gpu={(x, s): factor}), {"component": "gpu", "hosts": (x,), "detail": f"gpu {s}"}
    if kind == "intra":
        return Faults(intra={x: factor}), {"component": "node intra", "hosts": (x,), "detail": None}
    raise ValueError(f"unknown fault kind {kind!r}")
