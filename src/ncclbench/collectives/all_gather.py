"""all_gather: rank j's block lands at block j of every rank's receive buffer.
Count per rank is rounded down to 16 bytes; busbw factor (n-1)/n."""

from __future__ import annotations

from ..core.fills import Fill, plain
from .collective import CallArgs, Collective, Communicator, Counts, per_rank_base


def block_seed(seed: int, rank: int) -> int:
    """Seed of the plain stream owned by `rank` (nccl-tests uses 33*rep + rank)."""
    return 33 * seed + rank


class AllGather(Collective):
    name = "all_gather"

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        base = per_rank_base(count, nranks, itemsize)
        return Counts(base, base * nranks, base)

    def in_place_offsets(self, counts: Counts, rank: int) -> tuple[int, int]:
        return counts.param_count * rank, 0

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        return counts.param_count * itemsize * nranks

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return (nranks - 1) / nranks

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        comm.all_gather(send, recv, args.counts.param_count, args.dtype)

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        return [plain(0, args.counts.send_count, block_seed(seed, args.rank))]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        c = args.counts.param_count
        return [plain(j * c, c, block_seed(seed, j)) for j in range(args.nranks)]


COLLECTIVE = AllGather()
