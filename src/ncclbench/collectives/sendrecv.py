"""sendrecv: each rank sends to rank+1 and receives from rank-1 (a ring shift).
busbw = algbw.  Loops over ops like nccl-tests although no reduction happens;
the in-place result is not checked."""

from __future__ import annotations

from ..core.fills import Fill, plain
from .collective import CallArgs, Collective, Communicator, Counts


class SendRecv(Collective):
    name = "sendrecv"
    reduces = True  # nccl-tests prints and loops over the op (docs/behaviour.md §8)
    checks_in_place = False

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        return Counts(count, count, count)

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        return counts.param_count * itemsize

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return 1.0

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        n, r, c = args.nranks, args.rank, args.counts.param_count
        comm.group_start()
        comm.send(send, c, args.dtype, (r + 1) % n)
        comm.recv(recv, c, args.dtype, (r - 1 + n) % n)
        comm.group_end()

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        c = args.counts.param_count
        return [plain(0, c, seed, index=args.rank * c)]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        c, n = args.counts.param_count, args.nranks
        return [plain(0, c, seed, index=((args.rank - 1 + n) % n) * c)]


COLLECTIVE = SendRecv()
