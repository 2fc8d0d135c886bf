"""Declarative description of buffer contents: what to write before a
collective and what to expect after it.

A collective module describes its inputs and its expected output as lists of
`Fill` segments; a backend evaluates them (numpy on the host for the MPI
backend, GPU kernels for the NCCL backend).  Both evaluators implement the
same pure generator functions (`ncclbench.core.verifiable`), so the GPU kernels can
be tested bit for bit against the numpy reference, and the harness never
needs to know which collective it is checking.

Generator semantics (see `ncclbench.core.verifiable` for the exact rules):

* ``plain(seed, i)``              a pure function of (seed, element index i);
* ``reduce_input(seed, i, r, n)`` rank r's contribution to a reduction over n ranks
                                   with the run's op and datatype;
* ``reduce_result(seed, i, n)``   the exact result of reducing those n contributions;
* ``zeros``                        all-zero bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FillKind = Literal["zeros", "plain", "reduce_input", "reduce_result"]


@dataclass(frozen=True)
class Fill:
    """`count` elements at element `offset` of a buffer, holding generator
    values for indices ``index .. index+count-1``."""

    kind: FillKind
    offset: int  # in elements, relative to the buffer pointer the fill applies to
    count: int
    seed: int = 0
    index: int = 0  # first generator index
    rank: int = 0  # contributing rank (reduce_input only)

    def __post_init__(self) -> None:
        if self.count < 0 or self.offset < 0 or self.index < 0:
            raise ValueError(f"negative extent in {self!r}")


def zeros(offset: int, count: int) -> Fill:
    return Fill("zeros", offset, count)


def plain(offset: int, count: int, seed: int, index: int = 0) -> Fill:
    return Fill("plain", offset, count, seed=seed, index=index)


def reduce_input(offset: int, count: int, seed: int, rank: int, index: int = 0) -> Fill:
    return Fill("reduce_input", offset, count, seed=seed, index=index, rank=rank)


def reduce_result(offset: int, count: int, seed: int, index: int = 0) -> Fill:
    return Fill("reduce_result", offset, count, seed=seed, index=index)
