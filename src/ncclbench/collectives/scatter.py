"""scatter: block r of the root's send buffer lands on rank r.  busbw factor (n-1)/n."""

from __future__ import annotations

from ..core.fills import Fill, plain
from .collective import CallArgs, Collective, Communicator, Counts, per_rank_base


class Scatter(Collective):
    name = "scatter"
    rooted = True

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        base = per_rank_base(count, nranks, itemsize)
        return Counts(base * nranks, base, base)

    def in_place_offsets(self, counts: Counts, rank: int) -> tuple[int, int]:
        return 0, counts.param_count * rank

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        return counts.param_count * itemsize * nranks

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return (nranks - 1) / nranks

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        if args.counts.param_count == 0:
            return
        comm.scatter(send, recv, args.counts.param_count, args.dtype, args.root)

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        if args.rank != args.root:
            return []
        return [plain(0, args.counts.send_count, seed)]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        c = args.counts.param_count
        return [plain(0, c, seed, index=args.rank * c)]


COLLECTIVE = Scatter()
