"""Recorded primitive calls, and the order one thread issues several ranks' calls in.

A collective's `launch` run against `CallRecorder` yields the Communicator
calls it would make; the timed loop compiles them (Placement.prepared) and,
with several ranks per thread (-g/-t), `rounds_across_ranks` interleaves them
the way nccl-tests groups them -- except where that would merge rounds that
must run one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..collectives.collective import CallArgs, Collective
from ..core.datatypes import DATATYPE_BY_NAME, NO_OP, REDOP_BY_NAME

Call = tuple[str, tuple[Any, ...]]  # one primitive call a collective makes: (name, args)


class CallRecorder:
    """A stand-in `Communicator` that records the primitive calls a collective
    makes (name, args) instead of issuing them."""

    def __init__(self, rank: int, nranks: int):
        self.rank, self.nranks = rank, nranks
        self.calls: list[Call] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_"):
            raise AttributeError(name)

        def record(*args: object) -> None:
            self.calls.append((name, args))

        return record


def rounds_across_ranks(per_rank: list[list[Call]]) -> list[tuple[int | None, str, tuple[Any, ...]]]:
    """Several local ranks' recorded calls (-g/-t) in the order one thread
    issues them: (rank index, call, args), with (None, "group_start"/"group_end",
    ()) for the enclosing NCCL group.

    nccl-tests wraps all of a thread's ranks in one group (docs/behaviour.md §2.1).  That is
    this function's result for every collective that makes one NCCL round (a
    call, or one group of calls).  Hypercube makes log2(N) grouped rounds, each
    sending what the previous one received: inside one enclosing group NCCL
    would run them as one (nested groups launch at the outermost end), racing
    round 2's sends against round 1's receives (nccl-tests' -g 4 hypercube
    reports #wrong).  So each rank's calls are cut into rounds (a call or a
    group at nesting depth 0; local copies are rounds of their own) and round r
    of every rank is issued together: inside one group when it has NCCL calls,
    bare when it has only copies."""
    rounds_of = [_rounds(calls) for calls in per_rank]
    out: list[tuple[int | None, str, tuple[Any, ...]]] = []
    for r in range(max((len(x) for x in rounds_of), default=0)):
        step = [(i, name, args) for i, rounds in enumerate(rounds_of) if r < len(rounds)
                for name, args in rounds[r]]
        if all(name == "local_copy" for _, name, _ in step):
            out += step
        else:
            out += [(None, "group_start", ()), *step, (None, "group_end", ())]
    return out


def rounds_note(coll: Collective, nranks: int, ranks_per_thread: int) -> list[str]:
    """A banner note when one thread drives several ranks (-g N) of a collective
    that makes several NCCL rounds per op: ncclbench then issues one group per
    round (`rounds_across_ranks`), so its times are of a different, correct op
    than nccl-tests' merged one, and a user comparing the two should know."""
    if ranks_per_thread <= 1 or coll.check_nranks(nranks):  # one rank per thread, or not run
        return []
    rec = CallRecorder(0, nranks)
    op = REDOP_BY_NAME["sum"] if coll.reduces else NO_OP
    counts = coll.counts(1024, nranks, 4)
    coll.launch(rec, 1 << 20, 1 << 21, CallArgs(DATATYPE_BY_NAME["float"], op, 0 if coll.rooted else -1,
                                                0, nranks, counts))
    nccl_rounds = sum(1 for r in _rounds(rec.calls) if any(name != "local_copy" for name, _ in r))
    if nccl_rounds <= 1:
        return []
    return [f"{coll.name}: {nccl_rounds} NCCL rounds per op; with -g {ranks_per_thread} each round is one "
            f"NCCL group across this thread's GPUs (nccl-tests merges the rounds into one group, whose "
            f"results it reports wrong)"]


def _rounds(calls: list[Call]) -> list[list[Call]]:
    rounds: list[list[Call]] = []
    depth, current = 0, []
    for name, args in calls:
        current.append((name, args))
        if name == "group_start":
            depth += 1
        elif name == "group_end":
            depth -= 1
        if depth == 0:
            rounds.append(current)
            current = []
    if current:  # an unbalanced group: keep it whole
        rounds.append(current)
    return rounds
