"""The figures the gate judges (gate.py), typed: what each reads (`Metric`: busbw, where a drop is
worse, or time, where a rise is), which figure it is (`FigureKind`: the plateau busbw, the latency
floor, one size under --every-size), and a change as "percent worse" and back."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from .noise import Noise
from .summary_stats import LATENCY_MAX_SIZE


class Metric(Enum):
    """What a figure reads, and which way is worse."""

    BUSBW = "busbw"  # GB/s: a drop is worse (the sizes > 64 KiB)
    TIME = "time"  # us: a rise is worse (the sizes <= 64 KiB)

    @classmethod
    def of_size(cls, size: int) -> Metric:
        """The metric one size is judged on: busbw above LATENCY_MAX_SIZE, time up to it."""
        return cls.BUSBW if size > LATENCY_MAX_SIZE else cls.TIME

    @property
    def unit(self) -> str:
        return "GB/s" if self is Metric.BUSBW else "us"

    @property
    def worse_word(self) -> str:
        """'12.0% lower' (busbw) or 'higher' (time)."""
        return "lower" if self is Metric.BUSBW else "higher"

    @property
    def change_word(self) -> str:
        """The change that is worse: a 'drop' of busbw, a 'rise' of time."""
        return "drop" if self is Metric.BUSBW else "rise"

    @property
    def size_class(self) -> str:
        """The prior's size class (noise.PRIORS) of this metric's sizes."""
        return "bandwidth" if self is Metric.BUSBW else "latency"


class FigureKind(Enum):
    PLATEAU = "plateau busbw"  # the sizes within a factor of 4 of the largest
    LATENCY = "latency"  # the latency floor: the sizes <= 64 KiB
    SIZE = "size"  # one size on its own (--every-size)


@dataclass(frozen=True)
class Figure:
    """One judged figure of a series: its kind, its metric and, for one size, that size."""

    kind: FigureKind
    metric: Metric
    size: int | None = None  # FigureKind.SIZE: the size

    @classmethod
    def of_size(cls, size: int) -> Figure:
        return cls(FigureKind.SIZE, Metric.of_size(size), size)

    @property
    def name(self) -> str:
        """As printed and in the JSON: 'plateau busbw', 'latency' or 'size N'."""
        return f"size {self.size}" if self.kind is FigureKind.SIZE else self.kind.value

    @property
    def single(self) -> bool:
        """One size judged on its own, not a summary over sizes."""
        return self.kind is FigureKind.SIZE

    @property
    def change_text(self) -> str:
        """The change that is worse, in the figure's own words: 'a plateau drop', 'a latency rise',
        or for one size 'a drop' / 'a rise'."""
        if self.kind is FigureKind.SIZE:
            return f"a {self.metric.change_word}"
        return "a plateau drop" if self.kind is FigureKind.PLATEAU else "a latency rise"


PLATEAU = Figure(FigureKind.PLATEAU, Metric.BUSBW)
LATENCY = Figure(FigureKind.LATENCY, Metric.TIME)


def worse_pct(change: float, metric: Metric) -> float:
    """A median log ratio of times as 'percent worse': a busbw drop or a time rise."""
    return 100.0 * (-math.expm1(-change) if metric is Metric.BUSBW else math.expm1(change))


def worse_log(pct: float, metric: Metric) -> float:
    """The inverse of worse_pct: a percentage worse as a log ratio of times."""
    return -math.log1p(-min(pct, 99.999) / 100.0) if metric is Metric.BUSBW else math.log1p(pct / 100.0)


def limit_pct(user_pct: float, noise: Noise, metric: Metric) -> float:
    """The least change (% worse) that fails: the user's limit, or the noise's multiple x the noise
    where larger."""
    if noise.sigma is None:
        return user_pct
    return max(user_pct, worse_pct(noise.multiple * noise.sigma, metric))


def pct_text(v: float) -> str:
    """A percentage worse as the verdicts print it: '12.3%', '>1000%'."""
    return f"{v:.1f}%" if v < 1000 else ">1000%"
