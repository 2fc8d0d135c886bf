"""The explain part of one rank's benchmark run: a `run.events.RunObserver`
(`benchmark.observers.run_observers` makes it when explain is wanted), told the run's steps:

    LiveExplain(opts, backend, launch.local_rank) the run's start: the user's settings kept
    job_formed(job)          the launch checks said which rank reads each host's topology
    workers_starting(job)    before NCCL's first log line: capture settings (before_workers)
    comm_init()              right before NCCL's communicator init: topology read in a thread
    planned(job, info)       every rank: topology to rank 0 -> banner lines, RunInfo.extra;
                             NCCL log in its `timed` phase (after_workers)
    row(row)                 the rows, kept (the verdict is computed from them at the end)
    ... the timed loops (nothing of explain runs there) ...
    measured(job, summary)   every rank: one untimed op per size, NCCL's account to rank 0 ->
                             lines and data in summary (finish)
    exit_status(code)        --fail-on-trap LEVEL: 7 when a trap that severe was raised
    close()                  the log files removed, the user's NCCL settings given back

Why the topology is read in a thread: NVML's start, a few hundred sysfs
reads and importing the judging code (which the thread does too, on the GPU
backend) cost tens to hundreds of ms, which then overlap with forming the
job and NCCL's own start instead of adding to them; `after_workers` waits
for the thread, so none of it runs into the timed loops.  Only each host's
first local rank reads (the facts are the host's).  Everything collective here
(the two gathers, the probe ops) is called by every rank in the same order.

A failure while judging (a bug, a fact in an unexpected shape) costs the
explain lines, never the run: the table and the exit status stand.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING

from ..backends.worker import Worker
from ..core.config import Backend, BenchOptions
from ..core.errors import ExitCode
from ..core.results import EXPLAIN_KEY, ResultRow, RunInfo, RunSummary
from ..launch.facts import RankFacts
from ..launch.hostcomm import HostComm
from ..nccl.version_text import version_text
from ..run.events import NullObserver
from ..run.plan import RunPlan

if TYPE_CHECKING:  # the rest of explain/ is imported where it is used, off the start-up path
    from ..run.rank_job import RankJob
    from .nccl_capture import NcclRunCapture, RankCapture
    from .run_explain import Explained, RunFacts
    from .topology import HostTopology

ENV_SWITCH = "NCCLBENCH_EXPLAIN"  # 0 / off / no / false: as --no-explain
TOPOLOGY_WAIT_S = 60.0  # NVML can hang on a sick GPU; the run goes on without the facts


def wanted(opts: BenchOptions, environ: Mapping[str, str] = os.environ) -> bool:
    """Judge this run?  --no-explain and NCCLBENCH_EXPLAIN=0 both say no."""
    return opts.explain and environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "off", "no", "false")


class TopologyReader:
    """This host's topology facts, read in a background thread from construction on."""

    def __init__(self, read: Callable[[], tuple[dict | None, str]] | None = None, gpus: bool = True):
        self._result: tuple[dict | None, str] = (None, "")
        self._thread = threading.Thread(target=self._run, args=(read, gpus), name="ncclbench-topology", daemon=True)
        self._thread.start()

    def _run(self, read: Callable[[], tuple[dict | None, str]] | None, gpus: bool) -> None:
        if read is None:
            from .gather_topology import read_topology

            self._result = read_topology(gpus)
        else:
            self._result = read()
        # The judging code is imported at the end, where it is used: imported here it held the
        # GIL while the main thread set up CUDA and NCCL (explain on cost +0.16 s to the first row
        # on the H100, bench/results/explain-gpu-h100-2026-11-24/).

    def result(self, timeout: float = TOPOLOGY_WAIT_S) -> tuple[dict | None, str]:
        """(the facts as a dict, '') or (None, why not)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None, f"reading the topology did not finish in {timeout:g} s (NVML or sysfs stuck)"
        return self._result


class RowCollector:
    """A reporter that keeps the rows (the verdict is computed from them at the end)."""

    def __init__(self) -> None:
        self.rows: list[ResultRow] = []

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        pass

    def message(self, line: str) -> None:
        pass

    def row(self, row: ResultRow) -> None:
        self.rows.append(row)

    def end(self, summary: RunSummary) -> None:
        pass

    def close(self) -> None:
        pass


def settings_by_host(rank_facts: Sequence[RankFacts]) -> dict[str, dict[str, str]]:
    """host (as NCCL groups ranks) -> the NCCL_* settings its first rank started with (preflight's
    facts, read before explain sets NCCL_DEBUG).  NCCL's settings are per process: a fake host or a
    node with its own NCCL_SOCKET_IFNAME is judged with that, not with rank 0's."""
    out: dict[str, dict[str, str]] = {}
    for f in sorted(rank_facts, key=lambda f: f.rank):
        out.setdefault(f.host_label, {k: v for k, v in f.env.items() if k.startswith("NCCL_")})
    return out


def _nccl_version_text(code: int | None) -> str | None:
    return version_text(code) if code else None


class LiveExplain(NullObserver):
    """One rank's part in judging its run (see the module docstring)."""

    def __init__(self, opts: BenchOptions, backend: Backend, local_rank: int,
                 environ: MutableMapping[str, str] = os.environ):
        self.opts, self.backend, self.environ = opts, backend, environ
        # What the user set: the run's record (JSON env, the store) keeps this, not the capture's settings.
        self.user_env = dict(environ)
        self.local_rank = local_rank
        # Read in a thread started right before NCCL's communicator init (~0.5 s in C, GIL
        # released), which hides it; started earlier it competed with the start-up's own Python
        # work: +0.2 s to the first row on the H100 started before preflight, +0.13 s started
        # before the set-up's CUDA and import work (bench/results/stability-h100-2026-11-24/).
        self.reader: TopologyReader | None = None
        self.capture: NcclRunCapture | None = None
        self.rows = RowCollector()
        self.hosts: list[HostTopology] = []
        self.host_env: dict[str, dict[str, str]] = {}  # host -> its ranks' NCCL settings (rank 0 only)
        self.topology_unknown = ""
        self.result: Explained | None = None

    # -- the run's events (run.events) ---------------------------------------------------------
    def job_formed(self, job: RankJob) -> None:
        self.local_rank = job.on_host  # each host's first rank as NCCL groups hosts reads its topology

    def workers_starting(self, job: RankJob) -> None:
        self.before_workers(job.opts.nccl_lib)

    def comm_init(self) -> None:
        self.start_topology()

    def planned(self, job: RankJob, info: RunInfo) -> None:
        self.after_workers(job.host, job.rank_facts, info)

    def row(self, row: ResultRow) -> None:
        self.rows.row(row)

    def measured(self, job: RankJob, summary: RunSummary | None) -> None:
        self.finish(job.plan, job.workers, job.host, summary)

    def exit_status(self, code: int) -> int:
        return max(code, self.exit_code())

    # -- before the communicators ------------------------------------------------------------
    def before_workers(self, nccl_lib: str | None = None) -> None:
        """NCCL's log capture (and the profiler plugin where needed) set before NCCL logs anything,
        then, on the CPU backend, the topology read started (on NCCL's, `start_topology` is
        the set-up's on_comm_init)."""
        try:
            if self.backend is Backend.NCCL:
                self._begin_capture(nccl_lib)
        finally:
            if self.backend is not Backend.NCCL:
                self.start_topology()

    def start_topology(self) -> None:
        """Start reading this host's topology in a thread (once; each host's first local rank).
        On the NCCL backend the set-up calls it right before the communicators' init, whose
        C time (GIL released) then hides the thread's Python and NVML work."""
        if self.local_rank == 0 and self.reader is None:
            self.reader = TopologyReader(gpus=self.backend is Backend.NCCL)

    def _begin_capture(self, nccl_lib: str | None) -> None:
        from ..core.errors import BenchError
        from ..nccl.binding import get_library
        from .nccl_capture import NcclRunCapture

        try:
            lib = get_library(nccl_lib)
        except BenchError:
            return  # the workers' own set-up reports this failure, with its exit code
        self.capture = NcclRunCapture(lib.handle, lib.version_code, self.environ)
        self.capture.begin()

    # -- after the communicators ---------------------------------------------------------------
    def after_workers(self, host: HostComm, rank_facts: Sequence[RankFacts] | None, info: RunInfo) -> None:
        """Every rank: this host's facts to rank 0, which keeps the GPUs in use, puts the banner lines
        into `info.notes` and the facts into `info.extra`; NCCL's log enters its `timed` phase."""
        self.start_topology()  # not started yet if the set-up failed before its init, or made no workers
        mine = self.reader.result() if self.reader is not None else None
        gathered = host.gather(mine, 0)
        if gathered is not None:
            self._start_facts(gathered, rank_facts, info)
        if self.capture is not None:
            self.capture.after_init()

    def _start_facts(self, gathered: list[tuple[dict | None, str] | None], rank_facts: Sequence[RankFacts] | None,
                     info: RunInfo) -> None:
        from .topology import format_topology_lines, hosts_from_gathered, hosts_in_use

        tops, whys = hosts_from_gathered(gathered)
        self.hosts = tops
        self.host_env = settings_by_host(rank_facts or [])
        if self.backend is Backend.NCCL and rank_facts and tops:
            used = hosts_in_use(tops, list(rank_facts), self.opts.nthreads * self.opts.ngpus)
            if any(h.gpus for h in used):
                self.hosts = used
            elif any(h.gpus for h in tops):  # the whole host rather than nothing; the ceiling assumes its GPUs
                whys.append("the ranks' GPUs were not found among NVML's by PCI address: every GPU of the "
                            "host is shown")
        if not self.hosts:
            self.topology_unknown = "; ".join(whys) or "no host's topology facts were read"
        lines = format_topology_lines(self.hosts)
        if whys and self.hosts:
            lines.append(f"#   topology of some hosts unknown: {'; '.join(whys)}")
        elif not self.hosts:
            lines.append(f"# Topology unknown: {self.topology_unknown}")
        info.notes.extend(lines)
        info.extra[EXPLAIN_KEY] = {"topology": [h.to_dict() for h in self.hosts],
                                   "topology_unknown": self.topology_unknown, "host_env": self.host_env}

    # -- after the timed loops ----------------------------------------------------------------
    def finish(self, plan: RunPlan, workers: Sequence[Worker], host: HostComm, summary: RunSummary | None) -> None:
        """Every rank: the probe ops, NCCL's account to rank 0, which judges the run into `summary`."""
        from .nccl_capture import RankCapture
        from .probe import probe_sizes
        from .run_explain import explain_run

        mine: RankCapture | None = None
        if self.capture is not None:
            ntests = probe_sizes(plan, workers, self.capture.switch) if self.capture.wants_probe else 0
            try:
                mine = self.capture.collect(ntests)
            except Exception as exc:  # the log reader never raises on content; this is a bug or an I/O fault
                mine = RankCapture(facts={}, probe=None, route="none",
                                   notes=[f"reading NCCL's log failed: {type(exc).__name__}: {exc}"])
        gathered = host.gather(mine, 0)
        if summary is None or gathered is None:
            return
        try:
            self.result = explain_run(self._run_facts(plan, [g for g in gathered if g is not None]))
            summary.explain_lines = list(self.result.lines)
            summary.explain = self.result.data
        except Exception as exc:  # never the run's: the table above stands
            summary.explain_lines = [f"# explain failed ({type(exc).__name__}: {exc}); the figures above are "
                                     "unaffected"]

    def _run_facts(self, plan: RunPlan, parts: list[RankCapture]) -> RunFacts:
        from .nccl_capture import choices_from
        from .nccl_log import NcclLogFacts, merge_facts
        from .run_explain import RunFacts

        tests = [(d.name, o.name, r) for d, o, r in plan.tests()]
        f = RunFacts(collective=plan.collective.name, nranks=plan.nranks, rows=self.rows.rows,
                     backend="mpi" if self.backend is Backend.MPI else "nccl", hosts=self.hosts,
                     topology_unknown=self.topology_unknown, tests=tests,
                     env={k: v for k, v in self.user_env.items() if k.startswith("NCCL_")},
                     host_env=self.host_env)
        if self.backend is not Backend.NCCL:
            return f
        if not parts:
            f.log_unknown = "NCCL's log was not captured (no capture in this run)"
            return f
        logs = [NcclLogFacts.from_dict(p.facts) for p in parts if p.facts]
        f.log = merge_facts(logs) if logs else None
        f.notes = list(dict.fromkeys(n for p in parts for n in p.notes))
        if f.log is not None:
            f.log.unknown = [n for n in f.notes if n not in f.log.unknown] + f.log.unknown
            f.nccl_version = f.log.version
        if all(p.probe is not None for p in parts):
            ntests = max((len(p.probe or []) for p in parts), default=0)
            f.probe = [[c for p in parts for c in choices_from((p.probe or [])[i] if i < len(p.probe or []) else [])]
                       for i in range(ntests)]
            f.tests = tests[:ntests]
        return f

    # -- the end ----------------------------------------------------------------------------------
    def exit_code(self) -> int:
        """7 with --fail-on-trap LEVEL when a trap that severe was raised (rank 0; 0 elsewhere)."""
        level = self.opts.fail_on_trap
        if not level or self.result is None:
            return 0
        traps = self.result.judgement.traps
        if not traps.fails(level):
            return 0
        names = ", ".join(dict.fromkeys(t.name for t in traps.raised))
        print(f"ncclbench: trap(s) found with --fail-on-trap {level}: {names}", file=sys.stderr, flush=True)
        return int(ExitCode.DATA_ERRORS)

    def close(self) -> None:
        """Remove the log files and give the user's NCCL settings back to this process."""
        if self.capture is not None:
            self.capture.close()
        for key in ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_PROFILER_PLUGIN"):
            if key in self.user_env:
                self.environ[key] = self.user_env[key]
            else:
                self.environ.pop(key, None)

