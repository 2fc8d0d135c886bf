"""A tiny deterministic fabric for the health core's tests (not a test module).

Each group's bandwidth is a nominal figure per phase times the factors of the
faults it touches, times a fixed per-group jitter of at most +-0.4 % (a hash
of the group, so the numbers are the same on every run and the tests do not
depend on a random seed)."""

from __future__ import annotations

import zlib

from ncclbench.health.core.round_judge import RoundResult

NOMINAL = {"local": 2000.0, "intra": 360.0, "rail": 48.0, "pairs": 48.0}


class FakeFabric:
    def __init__(self, nic=None, link=None, gpu=None, intra=None, dead=(), dips=None, jitter=0.004, lat_spikes=None):
        self.nic = dict(nic or {})  # (host, rail or None) -> factor
        self.link = dict(link or {})  # frozenset({a, b}) -> factor
        self.gpu = dict(gpu or {})  # (host, slot) -> factor
        self.intra = dict(intra or {})  # host -> factor
        self.dead = set(dead)
        self.dips = dict(dips or {})  # (round name, group members) -> busbw factor, one measurement only
        self.lat_spikes = dict(lat_spikes or {})  # (round name, group members) -> latency factor, one measurement
        self.jitter = jitter
        self.rounds = []

    def factor(self, g) -> float:
        f = 1.0
        if g.phase == "local":
            f *= self.gpu.get(g.members[0], 1.0)
        elif g.phase == "intra":
            h = g.hosts[0]
            f *= min([self.intra.get(h, 1.0)] + [self.gpu.get(m, 1.0) for m in g.members])
        else:
            for h, s in g.members:
                f = min(f, self.nic.get((h, s), 1.0), self.nic.get((h, None), 1.0))
            if g.phase == "pairs":
                f *= self.link.get(frozenset(g.hosts), 1.0)
        return f

    def __call__(self, rnd, fleet=None):
        self.rounds.append(rnd)
        n = len(rnd.groups)
        res = RoundResult.empty(n)
        for i, g in enumerate(rnd.groups):
            if set(g.hosts) & self.dead:
                res.errors[i] = "no answer: timed out"
                continue
            key = repr((rnd.name, g.members))
            j = (zlib.crc32(key.encode()) % 2001 - 1000) / 1000.0 * self.jitter
            dip = self.dips.get((rnd.name, g.members), 1.0)
            res.busbw[i] = NOMINAL[g.phase] * self.factor(g) * (1 + j) * dip
            res.lat_us[i] = 20.0 * (1 + j) * self.lat_spikes.get((rnd.name, g.members), 1.0)
        return res
