"""hypercube: an all-gather by recursive doubling over send/recv, exchanging
count*mask elements with rank XOR mask for mask = 1, 2, 4, ...  Needs a
power-of-two rank count.  algbw counts the bytes each rank receives,
c*(n-1); busbw = algbw."""

from __future__ import annotations

from ..core.fills import Fill, plain
from .all_gather import block_seed
from .collective import CallArgs, Collective, Communicator, Counts, per_rank_base


class Hypercube(Collective):
    name = "hypercube"
    op_label = ""

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        base = per_rank_base(count, nranks, itemsize)
        return Counts(base, base * nranks, base)

    def in_place_offsets(self, counts: Counts, rank: int) -> tuple[int, int]:
        return counts.param_count * rank, 0

    def check_nranks(self, nranks: int) -> str | None:
        if nranks & (nranks - 1):
            return f"nRanks {nranks} is not a power of 2, skipping"
        return None

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        return counts.param_count * itemsize * (nranks - 1)

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return 1.0

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        n, r, c = args.nranks, args.rank, args.counts.param_count
        nbytes = c * args.dtype.itemsize
        if send != recv + r * nbytes:
            comm.local_copy(recv + r * nbytes, send, nbytes)
        mask = 1
        while mask < n:
            peer = r ^ mask
            # The block of `mask` ranks this rank already holds starts at the
            # rank with the low bits cleared; the peer's block likewise.
            mine = (r & ~(mask - 1)) * nbytes
            theirs = (peer & ~(mask - 1)) * nbytes
            comm.group_start()
            comm.send(recv + mine, c * mask, args.dtype, peer)
            comm.recv(recv + theirs, c * mask, args.dtype, peer)
            comm.group_end()
            mask <<= 1

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        return [plain(0, args.counts.send_count, block_seed(seed, args.rank))]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        c = args.counts.param_count
        return [plain(j * c, c, block_seed(seed, j)) for j in range(args.nranks)]


COLLECTIVE = Hypercube()
