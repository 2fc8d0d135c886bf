"""A slow pair is never called stuck (issue 29): on network-namespace hosts (CPU backend,
tests/test_health_netns.py's machinery), one host's link at a quarter of the others' rate and
messages large enough that its pairs are still measuring when the healthy pairs are long done.

Before: the round's fixed deadline cut the slow pairs, their members were "stuck ... waiting for a
member that stopped" and left out of the later rounds, nothing was measured for them and the slow
host was not named (exit 9).  Now: a group still measuring at 3x the round's typical group time,
its members alive, is a measurement with an upper bound, and its members meet other partners in
the later rounds, so the slow host is found."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import test_health_netns as netns
from netns_hosts import netns_hosts

from ncclbench.health.core.fleet import Fleet
from ncclbench.health.core.localize import _bounded
from ncclbench.health.core.round_judge import NO_ANSWER, OK, SLOW, UNJUDGED, RoundResult
from ncclbench.health.core.scan_schedule import Round
from ncclbench.health.runtime.control_channel import RankInfo
from ncclbench.health.runtime.group_measure import GroupSpec, Progress
from ncclbench.health.runtime.live_rounds import MIN_DEADLINE_S, STRAGGLER_K, LiveRounds, progressing, upper_bound_gbs

# 2 MiB pairs x (1 warm-up + 3 cycles x (5 + 1)) ops: ~3 s a healthy pair at 100 Mbit/s, ~4x that
# with a host at 25 Mbit/s, so a 12 s round deadline (and 3x the typical time after round 1) cuts
# the slow pairs while the healthy ones finish well inside it.
SCAN = ["--phases", "pairs", "--bw-size", "2M", "--lat-size", "8", "-n", "5", "-w", "1", "--cycles", "3",
        "--judge", "busbw"]


@pytest.mark.netns
@pytest.mark.mpi
def test_a_quarter_rate_host_is_measured_with_a_bound_and_named_never_stuck(tmp_path):
    with netns_hosts(5) as (ctl, *hosts):
        netns.shape(hosts, slow_host=2)
        coord, ranks, _, js, drain = netns.start(ctl, hosts, tmp_path, timeout_s=12, scan=SCAN)
        code, out, err, elapsed = netns.finish(coord, ranks, 300)
        doc, found = netns.confirmed(js)
    names = [h.name for h in hosts]
    detail = out + err + netns.groups(doc)
    assert "stuck" not in out + err and "stopped" not in out, detail
    bounded = [g for r in doc["measurements"] for g in r["groups"] if g.get("upper_bound")]
    assert bounded, detail  # the slow pairs were cut, and measured with a bound
    assert all(names[2] in g["hosts"] for g in bounded), bounded  # only pairs with the slow host straggled
    assert all(" GB/s, had not finished after " in g["upper_bound"] for g in bounded), bounded
    figures = [g["busbw"] for r in doc["measurements"] for g in r["groups"] if not g.get("upper_bound")]
    assert figures and max(g["busbw"] for g in bounded) < 0.5 * min(figures), detail  # a bound that is evidence
    # named as what it is: a slow NIC, not a host that stopped answering; no other host blamed
    assert code == 8 and found == [("node nic", (names[2],), "all rails")], detail
    assert netns._drained(drain) == [names[2]], detail
    assert all(s in ("healthy", "not judged") for h, s in doc["host_status"].items() if h != names[2]), detail


def _progress_at(rate_gbs: float, elapsed_s: float, nbytes: int = 2 << 20, chunk: int = 6,
                 stalled_after_s: float | None = None) -> dict:
    """A member's progress report after `elapsed_s` of moving algbw bytes at `rate_gbs` in chunks
    of `chunk` ops (the warm-up: 1 op), or blocked from `stalled_after_s` on."""
    start = 1.0
    p = Progress(section="bw", algbw_bytes=nbytes, nranks=2, ops_total=1 + 3 * chunk, started=start)
    p.chunk(1, start)
    moving_s = elapsed_s if stalled_after_s is None else min(elapsed_s, stalled_after_s)
    while p.ops_next <= rate_gbs * 1e9 * moving_s / nbytes:  # the chunk in flight ended by then
        p.chunk(chunk, start + p.ops_next * nbytes / (rate_gbs * 1e9))
    return p.to_json(now=start + elapsed_s)


@pytest.mark.parametrize("rate", [0.001, 0.0033, 0.05, 1.3])
@pytest.mark.parametrize("elapsed", [2.0, 12.0, 40.0])
def test_the_bound_is_never_below_the_true_rate_and_within_a_chunk_of_it(rate, elapsed):
    p = _progress_at(rate, elapsed)
    bound = upper_bound_gbs([p], p["elapsed_s"])  # busbw = algbw x 2(n-1)/n = algbw for 2 ranks
    assert bound >= rate
    moved_at_most = p["ops_next"] * p["algbw_bytes"] / 1e9 / elapsed
    assert math.isclose(bound, moved_at_most) and p["ops_done"] * p["algbw_bytes"] / 1e9 / elapsed <= rate


def test_a_slow_member_is_progressing_and_one_blocked_after_fast_ops_is_not():
    assert progressing(_progress_at(0.003, 12.0))  # a quarter-rate pair, cut mid-way
    assert progressing(_progress_at(0.0005, 40.0))  # slower still, but steady
    assert not progressing(_progress_at(1.0, 12.0, stalled_after_s=0.1))  # fast ops, then a call that never ends
    assert not progressing(_progress_at(0.0001, 12.0))  # not one op done: no evidence of progress
    assert not progressing(Progress(section="lat", ops_done=19, ops_next=19, started=1.0).to_json(now=5.0))


def _rounds(timeout=60.0):
    fleet = Fleet.from_rank_hosts(["node0", "node1", "node2", "node3"])
    coord = SimpleNamespace(dead={}, ranks={r: RankInfo(r, fleet.hosts[r], 100 + r) for r in range(4)})
    return LiveRounds(coord, fleet, GroupSpec(), timeout)


def test_a_straggler_whose_members_answer_is_a_bound_and_its_members_stay():
    lr = _rounds()
    lr.stuck = {1: "rank 1 got stuck", 2: "rank 2 got stuck"}
    result = RoundResult.empty(2)
    prog = {1: _progress_at(0.003, 12.0), 2: _progress_at(0.003, 11.5)}
    assert lr._straggler(result, 1, [1, 2], prog, {1: 12.5, 2: 12.4}, 0.0, 4.0, {})
    assert result.busbw[1] >= 0.003 and np.isnan(result.busbw[0])
    assert result.upper_bound[1].startswith("node1+node2: under ") and "took 4.0 s (lower median)" in result.upper_bound[1]
    assert lr.stuck == {}  # kept for the later rounds


@pytest.mark.parametrize("case", ["silent", "dead", "no progress", "not measuring yet"])
def test_a_member_that_stopped_or_showed_no_progress_is_not_a_straggler(case):
    lr = _rounds()
    result = RoundResult.empty(2)
    prog = {1: _progress_at(0.003, 12.0), 2: _progress_at(0.003, 12.0)}
    waiting = {}
    if case == "silent":  # a SIGSTOPped rank reports nothing
        waiting, prog = {2: 1}, {1: prog[1]}
    elif case == "dead":
        lr.coord.dead[2] = (0.0, "connection closed")
    elif case == "no progress":
        prog.pop(2)
    else:
        prog[2] = Progress(section="").to_json()
    assert not lr._straggler(result, 1, [1, 2], prog, {1: 12.5, 2: 12.5}, 0.0, 4.0, waiting)
    assert result.upper_bound == {} and np.isnan(result.busbw[1])


def test_later_rounds_deadlines_follow_the_phase_typical_group_time():
    lr = _rounds(timeout=60.0)
    rnd = Round("pairs", 2, "fleet", ())
    assert lr.deadline_s(rnd) == 60.0  # nothing measured yet: the round timeout
    for typical in (1.0, 5.0, 12.0, 40.0):
        lr.typical["pairs"] = typical
        assert lr.deadline_s(rnd) == min(60.0, max(MIN_DEADLINE_S, STRAGGLER_K * typical))
    assert lr.deadline_s(Round("local", 2, "fleet", ())) == 60.0  # another phase: its own


def test_a_bound_is_slow_evidence_said_as_a_bound_and_never_ok():
    result = RoundResult.empty(1)
    result.upper_bound[0] = "node1+node2: under 0.1 GB/s, had not finished after 40 s"
    status, why, _ = _bounded(result, 0, SLOW, "busbw 0.1 GB/s, z -7", "bw")
    assert status == SLOW and why.startswith("node1+node2: under 0.1 GB/s")
    status, why, symptom = _bounded(result, 0, OK, "", "")
    assert status == UNJUDGED and "only an upper bound" in why and symptom == ""
    assert _bounded(result, 0, NO_ANSWER, "no answer", "no answer") == (NO_ANSWER, "no answer", "no answer")
    assert _bounded(RoundResult.empty(1), 0, OK, "", "") == (OK, "", "")  # a figure, not a bound
