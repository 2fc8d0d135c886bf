"""alltoallv: an imbalanced all-to-all.  Bytes from rank i to rank j follow
nccl-tests' generated pattern (spec §7.9): a uniform part (1-s) plus a part
growing with the ring distance d = (j-i) mod n, with spread
s = NCCL_TESTS_ALLTOALLV_SPREAD (default 1.0), each rounded down to 16 bytes.
The pattern is circulant, so every rank sends and receives the same total.
Issued as grouped send/recv; busbw factor (n-1)/n; in-place not checked."""

from __future__ import annotations

import os
from functools import lru_cache

from ..fills import plain
from .all_gather import block_seed
from .base import CallArgs, Collective, Communicator, Counts, per_rank_base


def spread_from_env() -> float:
    try:
        s = float(os.environ.get("NCCL_TESTS_ALLTOALLV_SPREAD", "1.0"))
    except ValueError:
        s = 1.0
    return min(1.0, max(0.0, s))


@lru_cache(maxsize=256)
def pattern_bytes(total: int, nranks: int, spread: float) -> tuple[tuple[int, ...], ...]:
    """bytes[i][j] sent from rank i to rank j for a per-rank total of `total` bytes."""
    n = nranks
    if n == 1:
        return ((total - total % 16,),)
    pairs = n * (n - 1) / 2
    rows = []
    for i in range(n):
        row = []
        for j in range(n):
            d = (j - i) % n
            b = int((1 - spread) * total / n + spread * d * total / pairs)
            row.append(b - b % 16)
        rows.append(tuple(row))
    return tuple(rows)


class AllToAllV(Collective):
    name = "alltoallv"
    checks_in_place = False

    def _pattern(self, counts: Counts, itemsize: int, nranks: int):
        total = counts.param_count * nranks * itemsize
        return pattern_bytes(total, nranks, spread_from_env())

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        base = per_rank_base(count, nranks, itemsize)
        pat = pattern_bytes(base * nranks * itemsize, nranks, spread_from_env())
        send = max(sum(row) for row in pat) // itemsize
        recv = max(sum(pat[i][j] for i in range(nranks)) for j in range(nranks)) // itemsize
        return Counts(send, recv, base)

    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        pat = self._pattern(counts, itemsize, nranks)
        return max(max(sum(pat[r]), sum(pat[i][r] for i in range(nranks))) for r in range(nranks))

    def bus_bandwidth_factor(self, nranks: int) -> float:
        return (nranks - 1) / nranks

    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        n, r, elt = args.nranks, args.rank, args.dtype.itemsize
        pat = self._pattern(args.counts, elt, n)
        comm.group_start()
        soff = roff = 0
        for peer in range(n):
            sb, rb = pat[r][peer], pat[peer][r]
            if sb:
                comm.send(send + soff, sb // elt, args.dtype, peer)
            if rb:
                comm.recv(recv + roff, rb // elt, args.dtype, peer)
            soff += sb
            roff += rb
        comm.group_end()

    def input_fills(self, args, seed):
        elt = args.dtype.itemsize
        pat = self._pattern(args.counts, elt, args.nranks)
        return [plain(0, sum(pat[args.rank]) // elt, block_seed(seed, args.rank))]

    def expected_fills(self, args, seed, in_place):
        n, r, elt = args.nranks, args.rank, args.dtype.itemsize
        pat = self._pattern(args.counts, elt, n)
        fills, roff = [], 0
        for src in range(n):
            nbytes = pat[src][r]
            src_off = sum(pat[src][:r])  # where my segment starts in src's send stream
            if nbytes:
                fills.append(plain(roff // elt, nbytes // elt, block_seed(seed, src), index=src_off // elt))
            roff += nbytes
        return fills


COLLECTIVE = AllToAllV()
