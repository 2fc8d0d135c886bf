"""Which collective a table came from, when the log does not name it.

A log cut from a terminal often lacks `# Collective test starting: ...`, yet
nccl-tests' table decides the collective (src/*.cu of nccl-tests, the same
rules as `ncclbench.collectives`):

    collective      redop   root   size / (count x type size)   busbw / algbw
    all_reduce      an op   -1     1                            2(n-1)/n
    reduce_scatter  an op   -1     n                            (n-1)/n
    reduce          an op   >= 0   1                            1
    sendrecv        an op   -1     1                            1        (nccl-tests prints its op)
    broadcast       none    >= 0   1                            1
    all_gather      none    -1     n                            (n-1)/n
    alltoall        none    -1     n                            (n-1)/n
    gather/scatter  none    >= 0   n                            (n-1)/n
    hypercube       (empty) -1     n                            (n-1)/n

with n the rank count (the device lines, NCCL's own count, or solved from
the ratio).  all_gather and alltoall (and all_reduce and sendrecv at n = 2)
differ in one more place: alltoall and sendrecv never check their in-place
result (nccl-tests src/alltoall.cu, sendrecv.cu: `reportErrors = in_place ? 0
: 1`), so with checking on their in-place `#wrong` is `N/A` while the
out-of-place one is a number.  Where the table still leaves several
candidates (gather and scatter do not differ at all; `-c 0` hides the
in-place sign) the answer names them and is not a guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.datatypes import DATATYPE_BY_NAME
from ..core.results import ResultRow


@dataclass(frozen=True)
class Inferred:
    """The collective (None when the table leaves several) and how the table said so."""

    collective: str | None
    candidates: tuple[str, ...]
    how: str
    nranks: int | None = None  # the rank count the table's ratios give (None: they do not)


def _close(a: float, b: float, tol: float = 0.02) -> bool:
    return abs(a - b) <= tol * max(abs(b), 1e-9)


def _evidence_rows(rows: Sequence[ResultRow]) -> list[ResultRow]:
    """Rows whose printed bandwidths carry enough digits for a ratio (algbw >= 1 GB/s)."""
    good = [r for r in rows if r.out_of_place.algbw == r.out_of_place.algbw and r.out_of_place.algbw >= 1.0
            and r.out_of_place.busbw == r.out_of_place.busbw and r.count > 0]
    return sorted(good, key=lambda r: -r.out_of_place.algbw)[:4]


def _ratios(rows: Sequence[ResultRow]) -> tuple[float | None, float | None]:
    """(busbw/algbw, size/(count x type size)) of the best-measured row; without one with enough
    digits, only the size ratio of the largest row."""
    ratio = size_ratio = None
    evidence = _evidence_rows(rows)
    if evidence:
        r = evidence[0]
        ratio = r.out_of_place.busbw / r.out_of_place.algbw
        dtype = DATATYPE_BY_NAME.get(r.type)
        if dtype is not None:
            size_ratio = r.size / (r.count * dtype.itemsize)
    else:
        big = max(rows, key=lambda r: r.size)
        dtype = DATATYPE_BY_NAME.get(big.type)
        if dtype is not None and big.count:
            size_ratio = big.size / (big.count * dtype.itemsize)
    return ratio, size_ratio


def _solve_nranks(nranks: int | None, ratio: float | None, size_ratio: float | None) -> int | None:
    """The rank count: the given one, else the size ratio's n, else the one the bus factor
    2(n-1)/n or (n-1)/n gives."""
    n = nranks
    if n is None and size_ratio is not None and size_ratio > 1.5:
        n = round(size_ratio)
    if n is None and ratio is not None and ratio > 1.02:
        n = round(2 / (2 - ratio)) if ratio < 1.999 else None
    if n is None and ratio is not None and ratio < 0.98:
        n = round(1 / (1 - ratio)) if ratio > 0 else None
    return n


@dataclass(frozen=True)
class _Signs:
    """What the table shows that tells the collectives apart, and the sentence that says it."""

    reduces: bool  # an op in the op column
    rooted: bool
    ratio: float | None
    size_ratio: float | None
    n: int | None
    given_nranks: int | None
    how: str
    in_place_unchecked: bool  # the in-place #wrong is N/A where the out-of-place one is a number
    in_place_checked: bool

    def one(self, name: str, why: str) -> Inferred:
        """The collective `name`, with the rank count the ratios solved for where the log gave none."""
        n = self.n
        solved = n if self.given_nranks is None and n and name in ("all_reduce", "reduce_scatter", "all_gather",
                                                                   "alltoall") else None
        return Inferred(name, (name,), f"the table: {self.how} ({why})", solved)


def _signs(rows: Sequence[ResultRow], redops: set[str], nranks: int | None) -> _Signs:
    """The table's signs, read once for every rule below."""
    rooted = any(r.root >= 0 for r in rows)
    reduces = any(op not in ("none", "") for op in redops)
    ratio, size_ratio = _ratios(rows)
    cols = f"op column {'/'.join(sorted(redops))}, root {'>= 0' if rooted else '-1'}"
    n = _solve_nranks(nranks, ratio, size_ratio)
    ntext = f"n = {n}" if n else "n unknown"
    rtext = f"busbw/algbw {ratio:.3f}" if ratio is not None else "no bandwidth ratio (rows under 1 GB/s)"
    stext = f"size/(count x type size) {size_ratio:g}" if size_ratio is not None else "type size unknown"
    checked_oop = [r for r in rows if r.out_of_place.wrong is not None]
    return _Signs(reduces, rooted, ratio, size_ratio, n, nranks, f"{cols}, {rtext}, {stext}, {ntext}",
                  bool(checked_oop) and all(r.in_place.wrong is None for r in checked_oop),
                  any(r.in_place.wrong is not None for r in rows))


def _rooted(s: _Signs) -> Inferred:
    """A root: reduce with an op; else broadcast (size = count), or gather/scatter (alike)."""
    if s.reduces:
        return s.one("reduce", "an op and a root: only reduce has both")
    if s.size_ratio is not None and _close(s.size_ratio, 1.0):
        return s.one("broadcast", "a root, no op, size = count: broadcast")
    if s.size_ratio is not None and s.size_ratio > 1.5:
        return Inferred(None, ("gather", "scatter"), f"the table: {s.how} (gather or scatter: their tables "
                        "are alike)")
    return Inferred(None, ("broadcast", "gather", "scatter"), f"the table: {s.how}")


def _reducing(s: _Signs) -> Inferred:
    """An op, no root: all_reduce, reduce_scatter or sendrecv, by the ratios; on 2 ranks all_reduce
    and sendrecv by whether the in-place result is checked."""
    ratio, size_ratio, n, how = s.ratio, s.size_ratio, s.n, s.how
    if ratio is not None and ratio < 0.02 and (size_ratio is None or _close(size_ratio, 1.0)):
        # busbw 0 with algbw > 0: a bus factor of 0, i.e. one rank (sendrecv's factor is 1 whatever n is)
        return Inferred("all_reduce", ("all_reduce",), f"the table: {how} (busbw 0 with algbw > 0: one rank, "
                        "whose bus factor 2(n-1)/n is 0; an op and size = count: all_reduce)", 1)
    if size_ratio is not None and size_ratio > 1.5:
        return s.one("reduce_scatter", "an op, no root, size = n x count")
    if ratio is None:
        return Inferred(None, ("all_reduce", "sendrecv"), f"the table: {how} (all_reduce or sendrecv)")
    if n is not None and n >= 2 and _close(ratio, 2 * (n - 1) / n) and not (n == 2):
        return s.one("all_reduce", f"busbw/algbw = 2(n-1)/n for n = {n}")
    if n in (None, 2) and _close(ratio, 1.0):
        return _by_in_place_check(
            s, ("sendrecv", "busbw = algbw fits sendrecv and all_reduce on 2 ranks; the in-place #wrong is N/A "
                "where the out-of-place one is checked: sendrecv"),
            ("all_reduce", "busbw = algbw fits sendrecv and all_reduce on 2 ranks; the in-place result is "
             "checked: all_reduce"),
            f"the table: {how} (all_reduce's 2(n-1)/n is 1 on 2 ranks, as sendrecv's, and no check to tell them "
            "apart)")
    if _close(ratio, 1.0):
        return s.one("sendrecv", "an op, busbw = algbw")
    if ratio > 1.02:
        return s.one("all_reduce", "busbw/algbw above 1: only all_reduce's factor 2(n-1)/n is")
    return Inferred(None, ("all_reduce", "reduce_scatter", "sendrecv"), f"the table: {how}")


def _gathering(s: _Signs) -> Inferred:
    """No op, no root: all_gather or alltoall, by whether the in-place result is checked."""
    return _by_in_place_check(
        s, ("alltoall", "no op, no root; the in-place #wrong is N/A where the out-of-place one is checked: "
            "alltoall (all_gather checks both)"),
        ("all_gather", "no op, no root; the in-place result is checked: all_gather (alltoall checks only out of "
         "place)"),
        f"the table: {s.how} (all_gather or alltoall: with checking off their tables are alike)")


def _by_in_place_check(s: _Signs, unchecked: tuple[str, str], checked: tuple[str, str], undecided: str) -> Inferred:
    """Two collectives whose tables are alike but for the in-place check: the one whose in-place #wrong is N/A
    where the out-of-place one is checked (`unchecked`), the one that checks it (`checked`), each (name, why);
    with checking off, both, said why (`undecided`)."""
    if s.in_place_unchecked:
        return s.one(*unchecked)
    if s.in_place_checked:
        return s.one(*checked)
    return Inferred(None, (checked[0], unchecked[0]), undecided)


def infer_collective(rows: Sequence[ResultRow], nranks: int | None = None) -> Inferred:
    """The collective of nccl-tests rows (see the module docstring); `nranks` where the log gives it."""
    if not rows:
        return Inferred(None, (), "no result rows")
    redops = {r.redop for r in rows}
    if redops == {""}:
        return Inferred("hypercube", ("hypercube",), "the table's op column is empty (hypercube prints none)")
    s = _signs(rows, redops, nranks)
    if s.rooted:
        return _rooted(s)
    return _reducing(s) if s.reduces else _gathering(s)
