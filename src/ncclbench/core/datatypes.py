"""Datatypes and reduction ops, in nccl-tests' order and with NCCL's enum values.

The tables are the single source of truth for names (what `-d`/`-o` accept),
element sizes (what the count rules of every collective divide by) and the
NCCL enum values the GPU backend passes to libnccl.  Floating-point layouts
(exponent/mantissa bits) are here because the exact-result data generator
needs them to keep every reduction exactly representable.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataType:
    name: str
    nccl_id: int  # ncclDataType_t value
    itemsize: int  # bytes per element
    is_float: bool
    exponent_bits: int = 0  # floats only
    mantissa_bits: int = 0  # explicit mantissa bits, floats only
    signed: bool = True  # integers only
    min_nccl_version: int = 0  # runtime NCCL code needed (e.g. 21000 = 2.10.0)
    min_compute_capability: tuple[int, int] = (0, 0)  # filtered from `-d all` below this

    @property
    def bits(self) -> int:
        return 8 * self.itemsize


DATATYPES: tuple[DataType, ...] = (
    DataType("int8", 0, 1, False, signed=True),
    DataType("uint8", 1, 1, False, signed=False),
    DataType("int32", 2, 4, False, signed=True),
    DataType("uint32", 3, 4, False, signed=False),
    DataType("int64", 4, 8, False, signed=True),
    DataType("uint64", 5, 8, False, signed=False),
    DataType("half", 6, 2, True, exponent_bits=5, mantissa_bits=10),
    DataType("float", 7, 4, True, exponent_bits=8, mantissa_bits=23),
    DataType("double", 8, 8, True, exponent_bits=11, mantissa_bits=52),
    DataType("bfloat16", 9, 2, True, exponent_bits=8, mantissa_bits=7, min_nccl_version=21000),
    DataType("f8e4m3", 10, 1, True, exponent_bits=4, mantissa_bits=3, min_nccl_version=22400,
             min_compute_capability=(9, 0)),
    DataType("f8e5m2", 11, 1, True, exponent_bits=5, mantissa_bits=2, min_nccl_version=22400,
             min_compute_capability=(9, 0)),
)

DATATYPE_BY_NAME: dict[str, DataType] = {d.name: d for d in DATATYPES}


@dataclass(frozen=True)
class RedOp:
    name: str
    nccl_id: int  # ncclRedOp_t value; mulsum is created per call (ncclRedOpCreatePreMulSum)
    min_nccl_version: int = 0


REDOPS: tuple[RedOp, ...] = (
    RedOp("sum", 0),
    RedOp("prod", 1),
    RedOp("max", 2),
    RedOp("min", 3),
    RedOp("avg", 4, min_nccl_version=21000),
    RedOp("mulsum", -1, min_nccl_version=21100),
)

REDOP_BY_NAME: dict[str, RedOp] = {o.name: o for o in REDOPS}

# What non-reducing collectives print in the redop column.
NO_OP = RedOp("none", -2)
EMPTY_OP = RedOp("", -3)  # hypercube prints an empty op name


def premulsum_scalar(rank: int) -> int:
    """The per-rank scalar of the `mulsum` op: 1 on even ranks, 2 on odd ranks (as nccl-tests)."""
    return 1 if rank % 2 == 0 else 2
