"""run/recording.py: the order in which one thread issues several local
ranks' calls (-g/-t), the one place where hypercube's rounds must not merge,
and the banner note that says so."""

from __future__ import annotations

import pytest

from ncclbench.collectives import COLLECTIVES
from ncclbench.collectives.collective import CallArgs
from ncclbench.core.datatypes import DATATYPE_BY_NAME, NO_OP, REDOP_BY_NAME
from ncclbench.run.recording import CallRecorder, rounds_across_ranks


def recorded(name: str, rank: int, nranks: int) -> list:
    coll = COLLECTIVES[name]
    op = REDOP_BY_NAME["sum"] if coll.reduces else NO_OP
    counts = coll.counts(4096, nranks, 4)
    rec = CallRecorder(rank, nranks)
    coll.launch(rec, (rank + 1) << 30, ((rank + 1) << 30) + (1 << 28),
                CallArgs(DATATYPE_BY_NAME["float"], op, 1 if coll.rooted else -1, rank, nranks, counts))
    return rec.calls


@pytest.mark.parametrize("name", [n for n in COLLECTIVES if n != "hypercube"])
def test_one_round_collectives_keep_nccl_tests_single_enclosing_group(name):
    per_rank = [recorded(name, r, 8) for r in (4, 5, 6, 7)]
    order = rounds_across_ranks(per_rank)
    assert order[0] == (None, "group_start", ()) and order[-1] == (None, "group_end", ())
    assert [(n, a) for i, n, a in order[1:-1]] == [c for calls in per_rank for c in calls]
    assert [i for i, _, _ in order[1:-1]] == [i for i, calls in enumerate(per_rank) for _ in calls]


@pytest.mark.parametrize("nranks,local", [(8, 4), (4, 4), (4, 2), (2, 2)])
def test_hypercube_rounds_are_issued_round_by_round(nranks, local):
    """Round r of every local rank sits in its own enclosing group, after every
    copy: no group spans two rounds, so round r+1 sends what round r received."""
    ranks = list(range(nranks - local, nranks))
    per_rank = [recorded("hypercube", r, nranks) for r in ranks]
    order = rounds_across_ranks(per_rank)
    assert [(i, n) for i, n, _ in order[:local]] == [(i, "local_copy") for i in range(local)]
    rest = order[local:]
    nrounds = nranks.bit_length() - 1
    groups, depth = [], 0
    for i, name, args in rest:
        if i is None:  # enclosing brackets alternate: never nested, never left open
            assert depth == (0 if name == "group_start" else 1)
            depth = 1 - depth
            if name == "group_start":
                groups.append([])
            continue
        groups[-1].append((i, name, args))
    assert len(groups) == nrounds
    for r, group in enumerate(groups):
        mask = 1 << r
        peers = {(i, args[3]) for i, name, args in group if name in ("send", "recv")}
        assert peers == {(i, ranks[i] ^ mask) for i in range(local)}, r
    # Nothing lost or invented: the same calls as the ranks recorded, per rank in order.
    for i, calls in enumerate(per_rank):
        assert [(n, a) for j, n, a in order if j == i] == calls


def test_unbalanced_or_empty_recordings():
    assert rounds_across_ranks([[], []]) == []
    order = rounds_across_ranks([[("group_start", ()), ("send", (1,))], [("recv", (2,))]])
    assert order == [(None, "group_start", ()), (0, "group_start", ()), (0, "send", (1,)), (1, "recv", (2,)),
                     (None, "group_end", ())]


def test_banner_note_only_where_rounds_would_merge():
    from ncclbench.run.recording import rounds_note

    hc = COLLECTIVES["hypercube"]
    (note,) = rounds_note(hc, 8, 4)
    assert "3 NCCL rounds per op" in note and "-g 4" in note and "nccl-tests" in note
    assert rounds_note(hc, 8, 1) == []  # a thread per rank: its groups are its own
    assert rounds_note(hc, 2, 2) == []  # one round: nothing to merge
    assert rounds_note(hc, 6, 2) == []  # not a power of two: hypercube does not run
    for name in COLLECTIVES:
        if name != "hypercube":
            assert rounds_note(COLLECTIVES[name], 8, 4) == [], name
