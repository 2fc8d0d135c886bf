"""broadcast: the root's buffer reaches every rank.  busbw = algbw (the root's
outgoing link is the bottleneck)."""

from __future__ import annotations

from ..core.fills import Fill, plain
from .collective import CallArgs, Collective, Communicator, Counts


class Broadcast(Collective):
    name = "broadcast"
    rooted = True

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        return Counts(count, count, count)

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        return counts.param_count * itemsize

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return 1.0

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        comm.broadcast(send, recv, args.counts.param_count, args.dtype, args.root)

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        if args.rank != args.root:
            return []
        return [plain(0, args.counts.send_count, seed)]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        return [plain(0, args.counts.recv_count, seed)]


COLLECTIVE = Broadcast()
