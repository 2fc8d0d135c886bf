"""What the gate refuses to judge (ArgumentError: one line, exit 255, nothing judged): runs of one
rank, which move no data, and a baseline that is no reference for the checked run: another test
(collective, rank count, backend, ncclbench release, datatype and operation) or one size, or a
checked run missing sizes of the baseline's figures.  `compare` refuses runs of one rank too."""

from __future__ import annotations

from collections.abc import Sequence

from ..core.errors import ArgumentError
from ..core.results import ONE_RANK_NOTE
from ..output.numfmt import human_size
from . import summary_stats as stats
from .run_like import RunLike


def moves_no_data(run: RunLike) -> bool:
    """One rank: nothing crosses a link, busbw is 0 (or a local copy) at every size.
    An imported log without device lines counts as unknown, not as one rank."""
    info = run.info
    return info.nranks == 1 and (bool(info.devices) or info.backend in ("nccl", "mpi"))


def refuse_one_rank(*runs: RunLike) -> None:
    """ArgumentError (one line, exit 255) when one of `runs` has a single rank."""
    for r in runs:
        if moves_no_data(r):
            raise ArgumentError(f"cannot judge {r.label} ({r.info.program}): it ran one rank, and {ONE_RANK_NOTE}; "
                                "record runs of 2 or more ranks (--nprocs N, or a launcher)")


def _release(version: str) -> tuple[str, ...]:
    """'0.1.0' -> ('0', '1'): runs of one major.minor release time the same way."""
    return tuple(version.split(".")[:2])


def refuse_baseline(run: RunLike, baseline: RunLike, history: Sequence[RunLike] = ()) -> None:
    """A baseline that is another test is no reference: another collective, another rank
    count, backend, datatype or operation, runs recorded by another ncclbench release (the
    timed loop and what a row means may differ), a run of one rank, a baseline of one size, a
    checked run missing sizes the baseline's figures are made of.  ArgumentError, one line
    (exit 255), nothing judged."""
    refuse_one_rank(run, baseline, *history)
    for ref in (baseline, *history):
        what = "the baseline" if ref is baseline else f"the baseline's {ref.label}"
        _refuse_other_test(run, ref, what)
        _refuse_other_series(run, ref, what)
    _refuse_missing_sizes(run, baseline)


def _refuse_other_test(run: RunLike, ref: RunLike, what: str) -> None:
    """Another collective, rank count, backend or ncclbench release."""
    head = f"cannot check {run.label}"
    if ref.options.collective != run.options.collective:
        raise ArgumentError(f"{head} ({run.info.program}) against {what} ({ref.label}, {ref.info.program}): "
                            "different collectives")
    if ref.info.nranks != run.info.nranks:
        raise ArgumentError(f"{head} ({run.info.nranks} ranks) against {what} ({ref.label}, {ref.info.nranks} "
                            f"ranks): a baseline of another rank count is another test; set a baseline of "
                            f"{run.info.nranks}-rank runs")
    ours = {r.info.backend for r in (run, ref)} <= {"nccl", "mpi"}
    if ours and ref.info.backend != run.info.backend:
        raise ArgumentError(f"{head} (backend {run.info.backend}) against {what} ({ref.label}, backend "
                            f"{ref.info.backend}): another backend is another machine's numbers; set a baseline "
                            f"of --backend {run.info.backend} runs")
    if ours and ref.info.version and run.info.version and _release(ref.info.version) != _release(run.info.version):
        raise ArgumentError(f"{head} (ncclbench {run.info.version}) against {what} ({ref.label}, ncclbench "
                            f"{ref.info.version}): runs of another release may be timed differently; set a "
                            "baseline recorded by this release")


def _labels(run: RunLike) -> dict[tuple[str, str, int], str]:
    return {s.key: s.label for s in stats.series_of(run.rows)}


def _refuse_other_series(run: RunLike, ref: RunLike, what: str) -> None:
    """No (datatype, operation, root) in common: another measurement, not a slower one."""
    mine, theirs = _labels(run), _labels(ref)
    if mine and theirs and not set(mine) & set(theirs):
        raise ArgumentError(f"cannot check {run.label} ({', '.join(mine.values())}) against {what} ({ref.label}, "
                            f"{', '.join(theirs.values())}): no datatype and operation in common; set a baseline "
                            "of the same -d/-o")


def _refuse_missing_sizes(run: RunLike, baseline: RunLike) -> None:
    """A baseline of one size has no plateau and latency floor to judge; a checked run that lacks
    sizes of the baseline's figures would be judged on other figures than the baseline's."""
    for key, sizes in _sizes(baseline).items():
        if len(sizes) == 1:
            raise ArgumentError(f"cannot check against {baseline.label}: the baseline measured one size "
                                f"({human_size(sizes[0])}), and the gate judges figures over sizes (the plateau, "
                                "the latency floor); set a baseline of a sweep (-b 8 -e 64M), or use `compare`")
        have = set(_sizes(run).get(key, sizes))
        figure = set(stats.plateau_sizes(sizes)) | set(stats.latency_sizes(sizes))
        missing = sorted(figure - have)
        if missing:
            raise ArgumentError(f"cannot check {run.label} against {baseline.label}: it lacks {len(missing)} of the "
                                f"sizes the baseline's figures are made of ({human_size(missing[0])}"
                                f"{'..' + human_size(missing[-1]) if len(missing) > 1 else ''}); run the "
                                "baseline's sweep (-b/-e/-f) to the end")


def _sizes(run: RunLike) -> dict[tuple[str, str, int], list[int]]:
    return {s.key: s.sizes for s in stats.series_of(run.rows)}


def refuse_as_baseline(runs: Sequence[RunLike]) -> None:
    """`baseline set`: the runs of one baseline must be one test (the newest is the
    reference, the others its history); none may be a run of one rank."""
    if not runs:
        raise ArgumentError("a baseline needs at least one run")
    refuse_baseline(runs[-1], runs[-1], runs[:-1])




def refuse_other_collective(baseline: RunLike, run: RunLike) -> None:
    """The gate's comparison (compare_runs(strict=True)): the same collective only."""
    if baseline.options.collective != run.options.collective:
        raise ArgumentError(f"cannot check {run.label} ({run.info.program}) against {baseline.label} "
                            f"({baseline.info.program}): different collectives")
