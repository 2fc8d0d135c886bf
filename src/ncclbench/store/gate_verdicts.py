"""The gate's verdicts (the rule is gate.py's): a `Judgement` per judged figure (ok, REGRESSION,
CANNOT CONFIRM, UNSTABLE), and the `GateResult` of a check, with its status and exit code
(0 ok, 7 a regression, 9 not judged)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.errors import ExitCode
from .comparison import Comparison
from .gate_figures import Figure, Metric, pct_text
from .noise import Noise

# A figure whose limit is more than this multiple of what was asked (--max-drop, --max-rise) cannot
# see a change of what was asked: a change of 1.5x the asked size already sits at the limit, caught
# at most half the time.  Such a figure is "cannot confirm", never "ok" (exit 9).
WIDE_LIMIT = 1.5


@dataclass
class Judgement:
    """One judged figure of one series: a summary over sizes, or one size."""

    series: str
    figure: Figure
    sizes: list[int]
    baseline: float | None  # the figure in the baseline (GB/s or us), for reading
    value: float | None  # the figure in the checked run
    worse_pct: float  # how much worse (negative: better), from the median log ratio of the sizes
    noise: Noise
    limit_pct: float  # max(the user's limit, noise.multiple x noise): the smallest change it detects
    unstable: str | None = None  # why the checked run is too noisy to confirm this figure
    asked_pct: float | None = None  # the user's limit (--max-drop / --max-rise)
    how: str | None = None  # how the figure was measured where not from the table (gate rounds), or why not
    detectable_pct: float | None = None  # noise.multiple x noise alone: the smallest change this baseline can see
    gated: bool = False  # measured on the gate rounds (run/gate_rounds.py), not read from the table

    @property
    def metric(self) -> Metric:
        """busbw (a drop is worse) or time (a rise is worse)."""
        return self.figure.metric

    @property
    def failed(self) -> bool:
        return self.worse_pct > self.limit_pct

    @property
    def cannot_confirm(self) -> str | None:
        """Why the gate cannot tell for this figure (no regression beyond its noise, but no
        precise "ok" either), or None: the change is beyond what was asked yet within the
        noise, or the noise lets only a change far larger than what was asked be seen."""
        asked = self.asked_pct
        if self.failed or asked is None:
            return None
        hint = _more_runs_hint(self.noise, self.metric, self.gated)
        if self.worse_pct > asked:
            return (f"cannot confirm: {pct_text(self.worse_pct)} {self.metric.worse_word}, beyond the {asked:g}% "
                    f"asked, but this baseline's noise allows {pct_text(self.limit_pct)}: {hint}")
        if self.limit_pct > WIDE_LIMIT * max(asked, 1e-9):
            return (f"cannot confirm: this baseline can only see a {self.metric.change_word} of "
                    f"{pct_text(self.limit_pct)} or more, not the {asked:g}% asked: {hint}")
        return None

    @property
    def not_judged(self) -> str | None:
        """Why this figure is neither ok nor a regression (exit 9), or None."""
        return None if self.failed else (self.cannot_confirm or self.unstable)

    @property
    def verdict(self) -> str:
        if self.failed:
            return "REGRESSION"
        if self.cannot_confirm:
            return "CANNOT CONFIRM"
        return "UNSTABLE" if self.unstable else "ok"


def _more_runs_hint(n: Noise, metric: Metric, gated: bool) -> str:
    """What would narrow the noise: more baseline runs (and -N cycles where it had none); for
    small-message time read from the table, runs measured with --gate (-N cycles of one process
    cannot narrow what moves between processes: run/gate_rounds.py)."""
    if metric is Metric.TIME and not gated:
        return ("measure the baseline's runs and the checked run with --gate (the small sizes again in rounds on "
                "fresh communicators) and give the baseline 5 runs or more (`ncclbench baseline set NAME RUN "
                "--runs 5`), or raise the limit")
    if n.assumed:
        return ("give the baseline 3 runs or more (`ncclbench baseline set NAME RUN --runs 5`) or run with -N 5, "
                "or raise the limit to what it can see")
    return "give the baseline more runs (`ncclbench baseline set NAME RUN --runs N` with a larger N), or raise the limit"


@dataclass
class GateFailure:
    """A figure that failed, as the JSON's `failures` list it."""

    series: str
    figure: Figure
    sizes: list[int]
    baseline: float
    value: float
    delta_pct: float  # signed change of the metric: busbw -10 = 10 % drop
    limit_pct: float  # the effective limit: max(user limit, the noise's multiple x noise)

    @property
    def size(self) -> int:
        """The figure's first size (all of them in `sizes`)."""
        return self.sizes[0]

    @property
    def metric(self) -> Metric:
        return self.figure.metric

    def to_dict(self) -> dict[str, Any]:
        return {"series": self.series, "size": self.size, "metric": self.metric.value, "baseline": self.baseline,
                "value": self.value, "delta_pct": self.delta_pct, "limit_pct": self.limit_pct,
                "figure": self.figure.name, "sizes": list(self.sizes)}


@dataclass
class GateResult:
    comparison: Comparison
    max_drop_pct: float
    max_rise_pct: float | None  # None: latency judged against its noise alone (gate())
    judgements: list[Judgement]
    baseline_runs: int = 1  # runs in the baseline (its history)

    @property
    def failures(self) -> list[GateFailure]:
        out = []
        for j in self.judgements:
            if j.failed:
                delta = -j.worse_pct if j.metric is Metric.BUSBW else j.worse_pct
                out.append(GateFailure(j.series, j.figure, list(j.sizes), _nan(j.baseline), _nan(j.value), delta,
                                       j.limit_pct))
        return out

    @property
    def checked(self) -> int:
        return len(self.judgements)

    @property
    def regression(self) -> bool:
        return any(j.failed for j in self.judgements)

    @property
    def unstable(self) -> bool:
        """No regression, but a figure could not be confirmed: the checked run is far noisier."""
        return not self.regression and any(j.unstable for j in self.judgements)

    @property
    def cannot_confirm(self) -> bool:
        """No regression, but a figure's noise is too wide to tell (Judgement.cannot_confirm)."""
        return not self.regression and any(j.cannot_confirm for j in self.judgements)

    @property
    def ok(self) -> bool:
        return not self.regression and not self.unstable and not self.cannot_confirm

    @property
    def status(self) -> str:
        if self.regression:
            return "regression"
        return "unstable candidate" if self.unstable else "cannot confirm" if self.cannot_confirm else "ok"

    @property
    def exit_code(self) -> int:
        """0 ok, 7 a regression, 9 not judged: an unstable candidate (re-run) or a figure the
        baseline's noise cannot confirm."""
        if self.regression:
            return int(ExitCode.DATA_ERRORS)
        return int(ExitCode.OK) if self.ok else int(ExitCode.NOT_JUDGED)

    @property
    def failing_sizes(self) -> list[int]:
        return sorted({s for j in self.judgements if j.failed for s in j.sizes})

    @property
    def whole_run_noise_known(self) -> bool:
        return all(j.noise.whole_run_known for j in self.judgements)

    @property
    def assumed(self) -> bool:
        return any(j.noise.assumed for j in self.judgements)


def _nan(v: float | None) -> float:
    return math.nan if v is None else v
