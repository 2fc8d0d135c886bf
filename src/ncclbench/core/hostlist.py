"""Slurm's compressed hostlists (`node[01-03,7],gpu5`) expanded as Slurm expands them: one
implementation for the launcher (SLURM_JOB_NODELIST) and for health's topology files (topology.conf's
Nodes=), so both read a hostlist alike."""

from __future__ import annotations

import re

MAX_RANGE = 64 * 1024
SEPARATORS = "\t, \n"  # between hostlist tokens, outside brackets (hostlist_create)


class HostlistError(ValueError):
    """A hostlist Slurm would refuse: its one-line reason."""


def expand_hostlist(expr: str) -> list[str]:
    """The host names of a Slurm hostlist expression, in order, as Slurm expands them
    (src/common/hostlist.c, one dimension): tokens split at commas and whitespace outside
    brackets; in a token the last `[...]` holds comma-separated numbers and `lo-hi` ranges,
    each zero-padded to the width of its `lo` as written (`node[08-10]`: node08 node09
    node10; `node[8-10]`: node8 node9 node10); text after it is a suffix (`n[1-2]-ib`);
    brackets before it expand too, outermost first (`r[1-2]n[1-2]`: r1n1 r1n2 r2n1 r2n2).
    A range backwards, of more than 65536 hosts, or not numbers is an error, as in Slurm."""
    return [host for tok in _tokens(expr) for host in _expand_token(tok)]


def _tokens(expr: str) -> list[str]:
    """Split at separators outside brackets (Slurm's _next_tok)."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"']' without '[' in {expr!r}")
        if ch in SEPARATORS and depth == 0:
            if cur:
                out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"'[' without ']' in {expr!r}")
    if cur:
        out.append("".join(cur))
    return out


def _expand_token(tok: str) -> list[str]:
    p = tok.rfind("[")
    if p < 0:
        return [tok]
    q = tok.index("]", p)
    prefix, body, suffix = tok[:p], tok[p + 1:q], tok[q + 1:]
    if "[" in suffix or "]" in suffix:
        raise HostlistError(f"brackets inside a bracket in {tok!r}")
    numbers = [f"{n:0{width}d}" for width, lo, hi in _ranges(body, tok) for n in range(lo, hi + 1)]
    return [f"{head}{n}{suffix}" for head in _expand_token(prefix) for n in numbers]


RANGE = re.compile(r"(\d+)(?:-(\d*))?")


def _ranges(body: str, tok: str) -> list[tuple[int, int, int]]:
    """(width, lo, hi) of each comma-separated item of a bracket (Slurm's _parse_single_range)."""
    out = []
    for item in body.split(","):
        m = RANGE.fullmatch(item)
        if m is None:
            raise HostlistError(f"invalid range {item!r} in {tok!r} (numbers and lo-hi ranges only)")
        lo_text, hi_text = m.group(1), m.group(2)
        lo = int(lo_text)
        hi = int(hi_text) if hi_text else lo
        if lo > hi:
            raise HostlistError(f"invalid range {item!r} in {tok!r} (backwards)")
        if hi - lo + 1 > MAX_RANGE:
            raise HostlistError(f"too many hosts in range {item!r} of {tok!r} (Slurm's limit: {MAX_RANGE})")
        out.append((len(lo_text), lo, hi))
    return out
