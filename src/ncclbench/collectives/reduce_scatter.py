"""reduce_scatter: rank r gets block r of the reduction of all inputs.
busbw factor (n-1)/n."""

from __future__ import annotations

from ..core.fills import Fill, reduce_input, reduce_result
from .collective import CallArgs, Collective, Communicator, Counts, per_rank_base


class ReduceScatter(Collective):
    name = "reduce_scatter"
    reduces = True

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
        comm.reduce_scatter(send, recv, args.counts.param_count, args.dtype, args.op)

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        return [reduce_input(0, args.counts.send_count, seed, args.rank)]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        c = args.counts.param_count
        return [reduce_result(0, c, seed, index=args.rank * c)]


COLLECTIVE = ReduceScatter()
