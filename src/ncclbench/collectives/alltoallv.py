"""alltoallv: an imbalanced all-to-all.  Bytes from rank i to rank j follow
nccl-tests' generated pattern (docs/behaviour.md §7.9): a uniform part (1-s) plus a part
growing with the ring distance d = (j-i) mod n, with spread
s = NCCL_TESTS_ALLTOALLV_SPREAD (default 1.0), each rounded down to 16 bytes.
The pattern is circulant, so every rank sends and receives the same total.
Or, with NCCL_TESTS_ALLTOALLV_MATRIX_FILE, a user matrix of bytes (scaled by
NCCL_TESTS_ALLTOALLV_MATRIX_SCALE, rounded down to 16 bytes; -b must equal -e).
NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY=1 prints per-rank bytes and bandwidths.
Issued as grouped send/recv; busbw factor (n-1)/n; in-place not checked."""

from __future__ import annotations

import os
from functools import lru_cache

from ..core.errors import BenchError, ExitCode
from ..core.fills import Fill, plain
from .all_gather import block_seed
from .collective import CallArgs, Collective, Communicator, Counts, per_rank_base


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


def matrix_settings() -> tuple[str, float] | None:
    """(matrix file, scale) from the environment, or None for the generated pattern."""
    path = os.environ.get("NCCL_TESTS_ALLTOALLV_MATRIX_FILE")
    if not path:
        return None
    try:
        scale = float(os.environ.get("NCCL_TESTS_ALLTOALLV_MATRIX_SCALE", "1.0"))
    except ValueError:
        scale = 1.0
    return path, max(0.0, scale)


def _bad_matrix(path: str, why: str) -> BenchError:
    return BenchError(f"NCCL_TESTS_ALLTOALLV_MATRIX_FILE {path}: {why}", ExitCode.INTERNAL, all_ranks=True)


@lru_cache(maxsize=16)
def read_matrix(path: str) -> tuple[tuple[float, ...], ...]:
    """The square matrix in `path`: whitespace-separated non-negative numbers, rows by line."""
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as exc:
        raise _bad_matrix(path, exc.strerror or "cannot be read") from None
    try:
        rows = tuple(tuple(float(x) for x in line.split()) for line in text.splitlines() if line.strip())
    except ValueError:
        raise _bad_matrix(path, "holds something that is not a number") from None
    dim = len(rows)
    if any(len(r) != dim for r in rows):
        raise _bad_matrix(path, f"is not square ({dim} rows of lengths {sorted({len(r) for r in rows})})")
    if any(v < 0 or v != v for r in rows for v in r):
        raise _bad_matrix(path, "holds a negative value")
    return rows


@lru_cache(maxsize=16)
def matrix_bytes(path: str, scale: float, nranks: int) -> tuple[tuple[int, ...], ...]:
    """bytes[i][j] (docs/behaviour.md §7.9): dimension >= nranks (extra rows/columns ignored),
    each value times `scale`, rounded down to 16 bytes."""
    rows = read_matrix(path)
    if len(rows) < nranks:
        raise _bad_matrix(path, f"is {len(rows)}x{len(rows)}, smaller than the {nranks} ranks")
    cells = []
    for r in rows[:nranks]:
        row = []
        for v in r[:nranks]:
            b = int(v * scale)
            row.append(b - b % 16)
        cells.append(tuple(row))
    return tuple(cells)


class AllToAllV(Collective):
    name = "alltoallv"
    checks_in_place = False

    def _pattern(self, counts: Counts, itemsize: int, nranks: int) -> tuple[tuple[int, ...], ...]:
        matrix = matrix_settings()
        if matrix is not None:
            return matrix_bytes(matrix[0], matrix[1], nranks)
        total = counts.param_count * nranks * itemsize
        return pattern_bytes(total, nranks, spread_from_env())

    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        matrix = matrix_settings()
        if matrix is not None:
            base = 0  # nccl-tests prints count 0 in matrix mode
            pat = matrix_bytes(matrix[0], matrix[1], nranks)
        else:
            base = per_rank_base(count, nranks, itemsize)
            pat = pattern_bytes(base * nranks * itemsize, nranks, spread_from_env())
        send = max(sum(row) for row in pat) // itemsize
        recv = max(sum(pat[i][j] for i in range(nranks)) for j in range(nranks)) // itemsize
        return Counts(send, recv, base)

    def validate(self, min_bytes: int, max_bytes: int, nranks: int) -> None:
        matrix = matrix_settings()
        if matrix is None:
            return
        pat = matrix_bytes(matrix[0], matrix[1], nranks)
        need = max(max(sum(pat[r]), sum(pat[i][r] for i in range(nranks))) for r in range(nranks))
        if min_bytes != max_bytes:
            raise BenchError("NCCL_TESTS_ALLTOALLV_MATRIX_FILE needs one size: -b must equal -e "
                             f"(got -b {min_bytes} -e {max_bytes})", ExitCode.INTERNAL, all_ranks=True)
        if max_bytes < need:
            raise BenchError(f"NCCL_TESTS_ALLTOALLV_MATRIX_FILE: a rank sends or receives {need} bytes; "
                             f"-b/-e must be at least that (got {max_bytes})", ExitCode.INTERNAL, all_ranks=True)

    def summary_lines(self, args: CallArgs, time_us: float) -> list[str]:
        if os.environ.get("NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY", "0") in ("", "0"):
            return []
        n, elt = args.nranks, args.dtype.itemsize
        pat = self._pattern(args.counts, elt, n)
        matrix = matrix_settings()
        if matrix is not None:
            head = (f"# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=matrix nranks={n} matrix_dim={len(read_matrix(matrix[0]))} "
                    f"scale={matrix[1]:.3f} time_usec={time_us:.2f}")
        else:
            head = (f"# NCCL_TESTS_ALLTOALLV_PRINT_SUMMARY: mode=generated nranks={n} "
                    f"total_bytes={args.counts.param_count * n * elt} spread={spread_from_env():.3f} "
                    f"time_usec={time_us:.2f}")
        lines = [head]
        for r in range(n):
            sent, got = sum(pat[r]), sum(pat[i][r] for i in range(n))
            alg = max(sent, got) / 1e3 / time_us if time_us > 0 else 0.0
            lines.append(f"#   rank={r} send_bytes={sent} recv_bytes={got} alg_bw={alg:.2f} "
                         f"bus_bw={alg * self.bus_bandwidth_factor(n):.2f}")
        return lines

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

    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        elt = args.dtype.itemsize
        pat = self._pattern(args.counts, elt, args.nranks)
        return [plain(0, sum(pat[args.rank]) // elt, block_seed(seed, args.rank))]

    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
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
