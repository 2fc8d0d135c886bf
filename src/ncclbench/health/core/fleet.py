"""Which ranks sit on which host: the fleet a health scan judges.

Hosts are told apart by the host name every rank reports, nothing else, so a
network-namespace host with its own UTS name counts as a host (as the launch
tests build them), and so does each node of a real cluster.  A rank's GPU
slot is its position among the ranks of its host in world-rank order, which
is GPU i of the node under the usual one-rank-per-GPU launch (srun
--ntasks-per-node 8, mpirun --map-by ppr:8:node); rail i is slot i of every
host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Fleet:
    hosts: tuple[str, ...]  # in the order of their first rank
    ranks: tuple[tuple[int, ...], ...]  # world ranks of each host; index = GPU slot
    # what one slot of a host is, decided once from the backend the ranks run: a GPU (NCCL
    # ranks), or a rank of the CPU backend, which drives no GPU ("vm gpu 3" named a CPU rank a
    # GPU).  Labels print it; readers key on the slot number (`Finding.slot`), never on the label.
    unit: str = "gpu"

    @property
    def unit_word(self) -> str:
        """The slot in a sentence: 'GPU', or 'rank' on the CPU backend."""
        return "GPU" if self.unit == "gpu" else self.unit

    def units(self, n: int) -> str:
        """'1 GPU', '4 GPUs'; '2 ranks' on the CPU backend."""
        return f"{n} {self.unit_word}" + ("" if n == 1 else "s")

    @classmethod
    def from_rank_hosts(cls, rank_hosts: Sequence[str]) -> Fleet:
        """Group world ranks by the host name each one reported (index = rank)."""
        order: dict[str, list[int]] = {}
        for rank, host in enumerate(rank_hosts):
            order.setdefault(host, []).append(rank)
        return cls(tuple(order), tuple(tuple(r) for r in order.values()))

    @classmethod
    def uniform(cls, nhosts: int, gpus: int, prefix: str = "node") -> Fleet:
        """nhosts hosts of `gpus` ranks each, block-ordered (simulation, tests)."""
        width = len(str(max(nhosts - 1, 0)))
        hosts = tuple(f"{prefix}{i:0{width}d}" for i in range(nhosts))
        return cls(hosts, tuple(tuple(range(i * gpus, (i + 1) * gpus)) for i in range(nhosts)))

    @property
    def nhosts(self) -> int:
        return len(self.hosts)

    @property
    def world_size(self) -> int:
        return sum(len(r) for r in self.ranks)

    def gpus(self, host: int) -> int:
        return len(self.ranks[host])

    @property
    def min_gpus(self) -> int:
        return min((len(r) for r in self.ranks), default=0)

    @property
    def max_gpus(self) -> int:
        return max((len(r) for r in self.ranks), default=0)

    def rank_of(self, host: int, slot: int) -> int:
        return self.ranks[host][slot]

    def where(self, rank: int) -> tuple[int, int]:
        """(host index, GPU slot) of a world rank."""
        for h, ranks in enumerate(self.ranks):
            if rank in ranks:
                return h, ranks.index(rank)
        raise KeyError(rank)

    def problems(self, expected_hosts: Sequence[str] | None = None) -> list[str]:
        """One line per way this fleet limits the scan; the phases that can run still run."""
        out: list[str] = []
        if self.world_size == 1:
            out.append("one GPU only: only the single-GPU path (local phase) runs; "
                       "intra-node, rail and pair phases need more GPUs or hosts")
        elif self.nhosts < 2:
            out.append(f"1 host ({self.hosts[0]}): the inter-node phases (rail, pairs) need at least 2 hosts; "
                       "running the local and intra-node phases only")
        elif self.nhosts % 2:
            out.append(f"odd host count ({self.nhosts}): one host sits out the first pair round "
                       "and is paired with a host shown healthy in the next")
        if self.nhosts and self.min_gpus != self.max_gpus:
            counts = ", ".join(f"{h}: {len(r)}" for h, r in zip(self.hosts, self.ranks))
            out.append(f"uneven GPUs per host ({_clip(counts)}): pairs test rails 0-{self.min_gpus - 1} on "
                       f"every host, higher rails only between hosts that have them")
        if expected_hosts is not None:
            want, have = list(dict.fromkeys(expected_hosts)), set(self.hosts)
            missing = [h for h in want if h not in have]
            extra = [h for h in self.hosts if h not in set(want)]
            if missing or extra:
                parts = []
                if missing:
                    parts.append(f"listed but not in the job: {_clip(', '.join(missing))}")
                if extra:
                    parts.append(f"in the job but not listed: {_clip(', '.join(extra))}")
                out.append("host list disagrees with the launcher (" + "; ".join(parts)
                           + "): judging the hosts that are in the job; listed hosts that are absent are reported "
                           "as not tested")
        return out


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
