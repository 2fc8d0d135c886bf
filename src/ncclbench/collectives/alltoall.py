"""alltoall: block j of rank i's send buffer goes to block i of rank j.
Count is per peer (rounded down to 16 bytes); busbw factor (n-1)/n; the
in-place result is not checked (as nccl-tests)."""

from __future__ import annotations

from ..core.fills import Fill, plain
from .all_gather import block_seed
from .collective import CallArgs, Collective, Communicator, Counts, per_rank_base


class AllToAll(Collective):
    name = "alltoall"
    checks_in_place = False

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        base = per_rank_base(count, nranks, itemsize)
        return Counts(base * nranks, base * nranks, base)

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        return counts.param_count * itemsize * nranks

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return (nranks - 1) / nranks

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        comm.alltoall(send, recv, args.counts.param_count, args.dtype)

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        return [plain(0, args.counts.send_count, block_seed(seed, args.rank))]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        c = args.counts.param_count
        return [plain(j * c, c, block_seed(seed, j), index=args.rank * c) for j in range(args.nranks)]


COLLECTIVE = AllToAll()
