"""The scan for real: the coordinator turns rounds into work for the ranks, the
ranks measure their groups, and what comes back becomes `RoundResult`s.

Coordinator side (`LiveRounds`): `run_scan`'s `run_round` callable.  For a
round it tells every member rank its group (world ranks) and the round's
deadline, then collects each rank's times.  A group's time is the mean over
its ranks (nccl-tests' -a 1); busbw = bytes x 2(n-1)/n / time (a group of
one reports algbw: busbw is 0 for one rank).  A group some member did not
report for is "no answer", with who was missing:
* a closed connection is a dead rank, named at once (rank, host, pid);
* silence past the deadline + grace is a stopped or hung rank, named too;
* members that gave up waiting for them say so and stay in the scan.
Dead and silent ranks' hosts go to `dead_hosts()`, so later rounds leave
them out.

Rank side (`serve_rank`): receive a group, measure it (`mpi_group` on the
CPU backend, `nccl_group` on GPUs), send the numbers, until the coordinator
says the scan is over.  An NCCL group's first member makes the group's
unique id and sends it here; the coordinator relays it to the other members
(`messages.Uid`), so no MPI is needed to form a group.  What travels is declared
in `messages`.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...core.errors import BenchError, ExitCode
from ..core.fleet import Fleet
from ..core.round_judge import STABLE_BW_RATIO, STABLE_LAT_RATIO, RoundResult
from ..core.scan import ScanEnded
from ..core.scan_schedule import Round
from .control_channel import Coordinator, RankInfo, RankLink
from .group_measure import PROGRESS, GroupSpec, GroupTimeout, Progress
from .messages import Dead, End, Facts, GroupJob, Leave, Message, Result, Setup, Stuck, Tick, Uid

GRACE_S = 2.0  # after the deadline, for the last reports to cross the network
# After a phase's first round, a round's deadline is STRAGGLER_K x the typical group time of
# the phase's last round (the lower median of the times to the last report of the groups that
# finished: with two groups, one of them slow, the plain median would be half the straggler's):
# the deadline follows the healthy groups, not a fixed time.  A group still measuring then,
# its members alive, is slow, not dead: what it moved bounds its busbw from above at about
# 1/K of the typical group's (it had at most the typical group's bytes to move and took K
# times as long).  K = 3: 1/3 is under the 50 % gross threshold (judge.Thresholds.gross_fraction),
# so such a bound is slow evidence where the fleet is small; healthy GPU groups repeat within
# 0.2-2 % at >= 64 MiB (bench/results/health-gpu-h100-2026-11-24.md), far inside 3x; on the CPU
# backend's shared cores the pairs' 1 % tail is 3x (busbw -67 %, worst -84 %:
# bench/results/health-cpu-noise-2026-11-26.md), and a healthy group cut there costs a
# re-measurement, not a verdict (a fault is confirmed only by a second measurement).
STRAGGLER_K = 3.0
# The least deadline a round gets when it follows the earlier rounds' typical time: a
# group's setup (communicator, buffers) is not in a fast round's time on every rank alike.
MIN_DEADLINE_S = 10.0


@dataclass
class _Heard:
    """What the ranks said in round `no` (`rnd`, started at `t0`, deadline `timeout` s) so far."""

    no: int
    rnd: Round
    t0: float
    timeout: float
    members: list[list[int]]  # world ranks of each group
    waiting: dict[int, int] = field(default_factory=dict)  # rank -> its group, until it reports
    gave_up: dict[int, str] = field(default_factory=dict)  # rank -> why it gave up
    got: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its figures
    progress: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> how far it got (stuck or timed out)
    reported: dict[int, float] = field(default_factory=dict)  # rank -> when its report came

    def stuck(self, rank: int, msg: Stuck) -> None:
        """`rank`'s watchdog says it is stuck: out of this round (if it is this round's), gave up."""
        if msg.round_no == self.no:
            self.waiting.pop(rank, None)
            self.reported[rank] = time.monotonic()
        self.gave_up[rank] = f"stuck {msg.stage}"
        if msg.round_no == self.no and msg.progress is not None:
            self.progress[rank] = msg.progress

    def result(self, rank: int, msg: Result) -> None:
        """`rank` reported on its group of this round: its figures, or why it gave up."""
        self.waiting.pop(rank, None)
        self.reported[rank] = time.monotonic()
        if msg.error is None:
            self.got[rank] = msg.figures
            return
        self.gave_up[rank] = msg.error
        if msg.progress is not None:
            self.progress[rank] = msg.progress


class LiveRounds:
    """`run_round` over live ranks through the coordinator."""

    def __init__(self, coord: Coordinator, fleet: Fleet, spec: GroupSpec, round_timeout_s: float,
                 progress: Callable[[Round, RoundResult], None] | None = None):
        self.coord, self.fleet, self.spec, self.timeout = coord, fleet, spec, round_timeout_s
        self.round_no = 0
        self.silent: dict[int, str] = {}  # rank -> why it is out of the scan (blamed)
        self.stuck: dict[int, str] = {}  # rank -> why it is out of the scan (not blamed)
        self.progress = progress
        self.typical: dict[str, float] = {}  # phase -> its last round's typical group time (s)

    def _who(self, rank: int) -> str:
        info = self.coord.ranks.get(rank)
        return str(info) if info else f"rank {rank}"

    def teardown(self) -> tuple[list[int], list[int]] | None:
        """(first dead ranks, ranks that died with the job) when deaths span several
        hosts: a launcher ending the job after one rank died (MPICH's Hydra does, with
        or without -disable-auto-cleanup).  The first host to lose a rank is named;
        the others are casualties of the teardown, not faults."""
        dead = sorted(self.coord.dead.items(), key=lambda kv: self.coord.death_key(kv[0]))
        hosts = {self.fleet.where(r)[0] for r, _ in dead}
        if len(hosts) < 2:
            return None
        first_host = self.fleet.where(dead[0][0])[0]
        first = [r for r, _ in dead if self.fleet.where(r)[0] == first_host]
        return first, [r for r, _ in dead if r not in first]

    def out(self) -> dict[int, str]:
        """Ranks out of the scan (dead or silent) -> why; in a teardown only the first host."""
        out = dict(self.silent)
        td = self.teardown()
        for rank, (_, why) in self.coord.dead.items():
            if td and rank in td[1]:
                continue
            extra = f"; then {len(td[1])} rank(s) on other hosts ended with the job" if td else ""
            out.setdefault(rank, f"{self._who(rank)} died: {why}{extra}")
        return out

    def dead_hosts(self) -> Mapping[int, str]:
        """Hosts with a rank that died or went silent: "no answer" verdicts."""
        hosts: dict[int, str] = {}
        for rank, why in sorted(self.out().items()):
            h, _ = self.fleet.where(rank)
            hosts.setdefault(h, why)
        return hosts

    def lost_hosts(self) -> Mapping[int, str]:
        """Hosts left out of later rounds through no fault of theirs (a rank stuck
        behind a stopped member): not tested further, not blamed."""
        dead = self.dead_hosts()
        hosts: dict[int, str] = {}
        for rank, why in sorted(self.stuck.items()):
            h, _ = self.fleet.where(rank)
            if h not in dead:
                hosts.setdefault(h, why)
        return hosts

    def deadline_s(self, rnd: Round) -> float:
        """This round's deadline: the round timeout, or STRAGGLER_K x the typical group time
        of this phase's last round (at least MIN_DEADLINE_S) where that is sooner, so a
        straggler is cut when the healthy groups say it is late, not at a fixed time."""
        typical = self.typical.get(rnd.phase)
        if typical is None:
            return self.timeout
        return min(self.timeout, max(MIN_DEADLINE_S, STRAGGLER_K * typical))

    def __call__(self, rnd: Round) -> RoundResult:
        self.round_no += 1
        members = [[self.fleet.rank_of(h, s) for h, s in g.members] for g in rnd.groups]
        heard = _Heard(self.round_no, rnd, time.monotonic(), self.deadline_s(rnd), members)
        self._send_jobs(heard)
        self._collect(heard)
        td = self.teardown()
        if td:
            first = ", ".join(self._who(r) for r in td[0])
            raise ScanEnded(f"{first} died and the launcher ended {len(td[1])} other rank(s) on other hosts")
        for rank in heard.waiting:
            if rank not in self.coord.dead:
                self.silent.setdefault(rank, f"{self._who(rank)} did not report within {heard.timeout:.0f} s "
                                             f"in {rnd.name} (stopped or hung)")
        result = self._result(heard)
        if self.progress:
            self.progress(rnd, result)
        return result

    def _send_jobs(self, heard: _Heard) -> None:
        """Every member rank its group; every other rank still in the scan a tick, so it knows
        the coordinator lives."""
        busy = set()
        for gi, ranks in enumerate(heard.members):
            job = GroupJob(heard.no, heard.rnd.name, gi, tuple(ranks), self.spec, heard.timeout,
                           tuple(s for _, s in heard.rnd.groups[gi].members))
            for r in ranks:
                busy.add(r)
                if self.coord.send(r, job):
                    heard.waiting[r] = gi
        for r in self.coord.ranks:
            if r not in busy and r not in self.silent and r not in self.stuck:
                self.coord.send(r, Tick(heard.no))

    def _collect(self, heard: _Heard) -> None:
        """What the ranks say until each has reported or the round's deadline (+ GRACE_S) passed."""
        deadline = heard.t0 + heard.timeout + GRACE_S
        while heard.waiting and time.monotonic() < deadline:
            item = self.coord.receive(min(0.5, max(0.0, deadline - time.monotonic())))
            if item is None:
                continue
            rank, msg = item
            if isinstance(msg, Dead):
                heard.waiting.pop(rank, None)
            elif isinstance(msg, Uid):  # an NCCL group's id, from its first member: to the others
                if msg.round_no == heard.no and 0 <= msg.group < len(heard.members):
                    for r in heard.members[msg.group]:
                        if r != rank:
                            self.coord.send(r, Uid(heard.no, msg.group, msg.uid))
            elif isinstance(msg, Stuck):
                heard.stuck(rank, msg)
                self.stuck.setdefault(rank, f"{self._who(rank)} got stuck in {heard.rnd.name} {msg.stage}, waiting "
                                            "for a member that stopped; left out of the later rounds")
            elif isinstance(msg, Result) and msg.round_no == heard.no:  # not a late report of an earlier round
                heard.result(rank, msg)

    def _result(self, heard: _Heard) -> RoundResult:
        """The round's figures: each group's from its members' reports, a straggler's bound, or why
        it has none; the phase's typical group time for the next round's deadline."""
        result = RoundResult.empty(len(heard.members))
        done = [max(heard.reported[r] for r in ranks) - heard.t0 for ranks in heard.members
                if all(r in heard.got for r in ranks)]
        typical = float(statistics.median_low(done)) if done else None
        if typical is not None:
            self.typical[heard.rnd.phase] = typical
        for gi, ranks in enumerate(heard.members):
            missing = [r for r in ranks if r not in heard.got]
            if not missing:
                self._combine(result, gi, [heard.got[r] for r in ranks])
                continue
            if self._straggler(result, gi, ranks, heard.progress, heard.reported, heard.t0, typical, heard.waiting):
                continue
            result.errors[gi] = self._why(heard.rnd, ranks, missing, heard.gave_up, heard.timeout)
        result.wall_s = time.monotonic() - heard.t0
        return result

    def _straggler(self, result: RoundResult, gi: int, ranks: list[int], progress: dict[int, dict],
                   reported: dict[int, float], t0: float, typical: float | None, waiting: dict[int, int]) -> bool:
        """A group cut at the round's deadline whose every member is alive and said how far its
        bandwidth section got: slow, not dead.  Recorded as a measurement with an upper bound
        (busbw = the bound, `result.upper_bound` says so and what it is compared with), its
        members kept in the scan so the later rounds pair them with other hosts.  Whether the
        bound is low enough to be evidence is the judge's call against the fleet (a bound
        above the threshold is "not judged", health/core/localize.py).  False where a member died, went
        silent (a stopped rank), or shows no progress (`progressing`)."""
        parts = [progress.get(r) for r in ranks]
        if any(r in self.coord.dead or r in waiting for r in ranks):
            return False
        if any(p is None or not progressing(p) for p in parts):
            return False
        known = [p for p in parts if p is not None]
        late = min(reported.get(r, t0) for r in ranks) - t0  # when the first member gave up: still going then
        elapsed = min(float(p["elapsed_s"]) for p in known)  # its bandwidth section's own time: the bound's
        bound = upper_bound_gbs(known, elapsed)
        hosts = "+".join(dict.fromkeys(self.fleet.hosts[self.fleet.where(r)[0]] for r in ranks))
        done = max(int(p.get("ops_done", 0)) for p in known)
        total = max(int(p.get("ops_total", 0)) for p in known)
        result.busbw[gi] = bound
        others = (f"while the round's other groups took {typical:.1f} s (lower median)" if typical is not None
                  else "while no other group of the round had finished")
        result.upper_bound[gi] = (f"{hosts}: under {bound:.3g} GB/s, had not finished after {late:.0f} s "
                                  f"({done} of {total} bandwidth ops done) {others}")
        for r in ranks:  # slow, not stuck: kept for the later rounds, where it meets good partners
            self.stuck.pop(r, None)
        return True

    def _combine(self, result: RoundResult, gi: int, parts: list[dict]) -> None:
        nranks = int(parts[0]["nranks"])
        factor = 2.0 * (nranks - 1) / nranks if nranks > 1 else 1.0
        bw_us = float(np.mean([p["bw_us"] for p in parts]))
        lat_us = float(np.mean([p["lat_us"] for p in parts]))
        result.busbw[gi] = parts[0]["bw_bytes"] / 1e9 / (bw_us * 1e-6) * factor if bw_us > 0 else np.nan
        result.lat_us[gi] = lat_us
        result.wrong[gi] = max(int(p["wrong"]) for p in parts)
        bw_why, lat_why = _unstable(parts, factor)
        if bw_why:
            result.unstable[gi] = bw_why
        if lat_why:
            result.unsteady_lat[gi] = lat_why

    def _why(self, rnd: Round, ranks: list[int], missing: list[int], gave_up: dict[int, str],
             timeout: float) -> str:
        dead = [r for r in missing if r in self.coord.dead]
        silent = [r for r in missing if r not in self.coord.dead and r not in gave_up]
        parts = []
        if dead:
            parts.append("; ".join(f"{self._who(r)} died" for r in dead))
        if silent:
            parts.append("; ".join(f"{self._who(r)} did not report within {timeout:.0f} s" for r in silent))
        waited = [r for r in missing if r in gave_up]
        if waited:
            parts.append(f"{len(waited)} member(s) gave up waiting ({gave_up[waited[0]]})")
        return "no answer: " + ("; ".join(parts) or "unknown")


def progressing(p: dict) -> bool:
    """Whether a member's progress report shows a group that is slow, not stuck: in its
    bandwidth section, with ops completed (no completed op is no evidence of progress), and
    its chunk in flight not overdue - at the pace of its own completed ops the chunk should
    have ended within STRAGGLER_K x its expected time (+1 s for the scheduler).  A rank
    blocked in a call after a few fast ops (a member that stopped mid-measurement) fails it."""
    done, nxt = int(p.get("ops_done", 0)), int(p.get("ops_next", 0))
    elapsed, last = float(p.get("elapsed_s", 0.0)), float(p.get("last_chunk_s", 0.0))
    if p.get("section") != "bw" or done <= 0 or elapsed <= 0:
        return False
    chunk_s = last / done * max(nxt - done, 1)  # the chunk in flight at the pace so far
    return elapsed - last <= STRAGGLER_K * chunk_s + 1.0


def upper_bound_gbs(parts: list[dict], elapsed_s: float) -> float:
    """The most busbw (GB/s) a group can have had, from its members' progress: it had not
    moved more than `ops_next` ops' algbw bytes (the chunk in flight counted whole) in
    `elapsed_s`; busbw = algbw x 2(n-1)/n, as `LiveRounds._combine` reports it."""
    ops = max(int(p.get("ops_next", 0)) for p in parts)
    nbytes = max(float(p.get("algbw_bytes", 0)) for p in parts)
    n = max(int(p.get("nranks", 1)) for p in parts)
    factor = 2.0 * (n - 1) / n if n > 1 else 1.0
    return nbytes * max(ops, 1) / 1e9 / elapsed_s * factor


def _unstable(parts: list[dict], factor: float) -> tuple[str | None, str | None]:
    """(why the bandwidth, why the latency of this group is not to be judged): its timed
    cycles disagree too much (per cycle, the mean over the group's ranks, as the
    group's time is)."""
    bw = np.mean([p.get("bw_cycles_us", [p["bw_us"]]) for p in parts], axis=0)
    lat = np.mean([p.get("lat_cycles_us", [p["lat_us"]]) for p in parts], axis=0)
    bw_why = lat_why = None
    if _uncorroborated(bw, STABLE_BW_RATIO):
        gbs = parts[0]["bw_bytes"] / 1e9 / (bw * 1e-6) * factor
        bw_why = (f"its timed cycles disagree: busbw {gbs.min():.3g}-{gbs.max():.3g} GB/s over {len(bw)} cycles, "
                  f"fewer than half within {STABLE_BW_RATIO}x of their median")
    if _uncorroborated(lat, STABLE_LAT_RATIO):
        lat_why = (f"latency not judged: {lat.min():.3g}-{lat.max():.3g} us over {len(lat)} cycles, "
                   f"fewer than half within {STABLE_LAT_RATIO}x of their median")
    return bw_why, lat_why


def _uncorroborated(times: np.ndarray, ratio: float) -> bool:
    """True when the median cycle is not backed by a majority of cycles within `ratio`
    of it: one cycle that a busy scheduler slowed does not void the median of three,
    two that disagree with each other do."""
    if len(times) < 2 or times.min() <= 0:
        return False
    m = float(np.median(times))
    within = int(np.sum(np.maximum(times, m) / np.minimum(times, m) <= ratio))
    return within < len(times) // 2 + 1


class Inbox:
    """A rank's view of its link: messages a group's measurement did not wait for (an
    End that came while it waited for its group's id) are kept for the main loop."""

    def __init__(self, link: RankLink):
        self.link = link
        self.kept: deque[Message] = deque()

    def recv(self, timeout_s: float | None) -> Message:
        if self.kept:
            return self.kept.popleft()
        return self.link.recv(timeout_s)

    def send(self, msg: Message) -> None:
        self.link.send(msg)

    def wait_uid(self, round_no: int, group: int, deadline: float) -> bytes:
        """The unique id of this rank's group, relayed by the coordinator; GroupTimeout at
        the deadline.  Ids of other rounds (a group given up on) are dropped."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise GroupTimeout("the group's first member sent no NCCL unique id before the deadline "
                                   "(it stopped, died or is stuck in an earlier group)")
            try:
                msg = self.link.recv(left)
            except TimeoutError:
                continue
            if isinstance(msg, Uid):
                if msg.round_no == round_no and msg.group == group:
                    return msg.uid
                continue
            self.kept.append(msg)
            if isinstance(msg, End):
                raise GroupTimeout("the coordinator ended the scan")


# (job, deadline, stage, inbox) -> this rank's figures for its group
MeasureGroup = Callable[[GroupJob, float, list[str], Inbox], dict[str, Any]]
# the coordinator's Setup -> this rank's Facts' answer (backend, GPU, topology, ...)
AnswerSetup = Callable[[Setup], dict[str, Any]]


def mpi_measure(world: Any) -> MeasureGroup:
    """The CPU backend's group measurement: `mpi_group.measure_group` on `world`."""
    from .mpi_group import measure_group

    p2p = world.Dup()  # the ready handshakes never mix with anything else

    def run(job: GroupJob, deadline: float, stage: list[str], inbox: Inbox) -> dict[str, Any]:
        return measure_group(world, p2p, job.members, job.spec, tag=job.round_no % 32000,
                             deadline=deadline, stage=stage)

    return run


def serve_rank(link: RankLink, measure: MeasureGroup, silence_s: float,
               setup: AnswerSetup | None = None) -> tuple[int, Leave]:
    """A rank's loop: measure the groups the coordinator sends until it says stop.
    Returns (exit code, how to leave); a coordinator that closes or stays silent
    `silence_s` gives TIMEOUT.  `setup(request)` answers the coordinator's Setup before
    the scan (the GPU runtime: which GPU, what topology) with Facts."""
    inbox = Inbox(link)
    while True:
        try:
            msg = inbox.recv(silence_s)
        except TimeoutError:
            print(f"ncclbench: health: the coordinator sent nothing for {silence_s:.0f} s; giving up",
                  file=sys.stderr, flush=True)
            return int(ExitCode.TIMEOUT), Leave.EXIT
        except (EOFError, OSError, ConnectionError):
            print("ncclbench: health: the coordinator closed the connection before the end of the scan",
                  file=sys.stderr, flush=True)
            return int(ExitCode.TIMEOUT), Leave.EXIT
        if isinstance(msg, End):
            return msg.code, msg.how
        if isinstance(msg, Setup):
            reply: Message = Facts(_answer_setup(setup, msg))
        elif isinstance(msg, GroupJob):
            reply = Result(msg.round_no, msg.group, _measure_job(link, measure, inbox, msg))
        else:
            continue
        try:
            link.send(reply)
        except OSError:
            return int(ExitCode.TIMEOUT), Leave.EXIT


def _measure_job(link: RankLink, measure: MeasureGroup, inbox: Inbox, job: GroupJob) -> dict[str, Any]:
    """This rank's figures for `job`, or {"error", "progress"} where it gave up."""
    deadline = time.monotonic() + job.timeout_s
    stage = [""]
    progress = Progress()
    token = PROGRESS.set(progress)
    # A member that stops between the ready messages and the communicator's creation
    # can leave this rank inside a call nothing can interrupt (MPI_Comm_create_group,
    # a blocking ncclCommInitRank): say so, so the coordinator leaves this rank out
    # without blaming it (the launcher ends it with the job).
    watchdog = threading.Timer(job.timeout_s + 1.0, _report_stuck, (link, job, stage, progress))
    watchdog.daemon = True
    watchdog.start()
    try:
        res: dict[str, Any] = measure(job, deadline, stage, inbox)
    except GroupTimeout as exc:
        res = {"error": f"gave up at the deadline: {exc}"}
    except BenchError as exc:
        res = {"error": exc.message}
    except Exception as exc:  # an MPI or NCCL error inside one group must not end the scan
        res = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        watchdog.cancel()
        PROGRESS.reset(token)
    if "error" in res:  # how far it got: a slow group is then a measurement with a bound
        res["progress"] = progress.to_json()
    return res


def _answer_setup(setup: AnswerSetup | None, request: Setup) -> dict[str, Any]:
    if setup is None:
        return {}
    try:
        return setup(request)
    except BenchError as exc:
        return {"error": exc.message, "code": int(exc.code)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "code": int(ExitCode.INTERNAL)}


def _report_stuck(link: RankLink, job: GroupJob, stage: list[str], progress: Progress) -> None:
    try:
        link.send(Stuck(job.round_no, job.group, stage[0], progress.to_json()))
    except OSError:
        pass


def fleet_from(coord: Coordinator) -> Fleet:
    """Hosts as the ranks reported them (index = world rank)."""
    return Fleet.from_rank_hosts([coord.ranks[r].host for r in range(coord.size)])


def rank_info(world_rank: int) -> RankInfo:
    import os

    return RankInfo(world_rank, host_name(world_rank), os.getpid())


def host_name(world_rank: int) -> str:
    """This rank's host identity: the host as NCCL groups it (launch/hostid.py: NCCL_HOSTID,
    else the short host name), or the entry of NCCLBENCH_HEALTH_HOST_MAP (comma-separated,
    one per world rank) - for tests."""
    import os

    from ...launch.hostid import host_label

    mapping = os.environ.get("NCCLBENCH_HEALTH_HOST_MAP")
    if mapping:
        names = [x.strip() for x in mapping.split(",")]
        if world_rank < len(names) and names[world_rank]:
            return names[world_rank]
    return host_label()


def advertised_address() -> str:
    """Where the other ranks can reach this process (launch/address.py: NCCLBENCH_HEALTH_ADDR,
    the route toward MASTER_ADDR, NCCL_SOCKET_IFNAME's interface, the host name, ...)."""
    from ...launch.address import advertised_address as address

    return address()
