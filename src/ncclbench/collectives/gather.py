"""gather: every rank's block lands at its slot in the root's receive buffer.
busbw factor (n-1)/n; non-root receive buffers stay untouched."""

from __future__ import annotations

from ..core.fills import Fill, plain, zeros
from .collective import CallArgs, Collective, Communicator, Counts, per_rank_base


class Gather(Collective):
    name = "gather"
    rooted = True

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
        if args.counts.param_count == 0:
            return  # nccl-tests skips the call entirely for a zero count
        comm.gather(send, recv, args.counts.param_count, args.dtype, args.root)

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        c = args.counts.param_count
        return [plain(0, c, seed, index=args.rank * c)]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        c, n = args.counts.param_count, args.nranks
        if args.rank == args.root:
            return [plain(0, c * n, seed)]
        if in_place:  # own block sits at its in-place offset, the rest stays zero
            return [zeros(0, c * args.rank), plain(c * args.rank, c, seed, index=args.rank * c),
                    zeros(c * (args.rank + 1), c * (n - args.rank - 1))]
        return [zeros(0, c * n)]


COLLECTIVE = Gather()
