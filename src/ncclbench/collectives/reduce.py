"""reduce: the root gets the reduction of all inputs; other ranks' receive
buffers stay untouched.  busbw = algbw."""

from __future__ import annotations

from ..core.fills import Fill, reduce_input, reduce_result, zeros
from .collective import CallArgs, Collective, Communicator, Counts


class Reduce(Collective):
    name = "reduce"
    reduces = True
    rooted = True

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        return Counts(count, count, count)

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        return counts.param_count * itemsize

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return 1.0

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        comm.reduce(send, recv, args.counts.param_count, args.dtype, args.op, args.root)

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        return [reduce_input(0, args.counts.send_count, seed, args.rank)]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        n = args.counts.recv_count
        if args.rank == args.root:
            return [reduce_result(0, n, seed)]
        # Non-root: unchanged -- zeroed before the call (out-of-place), own input (in-place).
        return [reduce_input(0, n, seed, args.rank)] if in_place else [zeros(0, n)]


COLLECTIVE = Reduce()
