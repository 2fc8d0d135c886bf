"""all_reduce: every rank gets the reduction of all inputs.  busbw factor 2(n-1)/n
(a ring moves each element n-1 times to reduce and n-1 times to share)."""

from __future__ import annotations

from ..core.fills import Fill, reduce_input, reduce_result
from .collective import CallArgs, Collective, Communicator, Counts


class AllReduce(Collective):
    name = "all_reduce"
    reduces = True

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        return Counts(count, count, count)

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        return counts.param_count * itemsize

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return 2.0 * (nranks - 1) / nranks

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        comm.all_reduce(send, recv, args.counts.param_count, args.dtype, args.op)

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        return [reduce_input(0, args.counts.send_count, seed, args.rank)]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        return [reduce_result(0, args.counts.recv_count, seed)]


COLLECTIVE = AllReduce()
