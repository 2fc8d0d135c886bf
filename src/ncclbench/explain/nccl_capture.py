"""NCCL's own account of one live run, in this process: its log in phases, or the profiler plugin.

The pieces (`log_capture`, `profiler`) decide how; this module applies them
to a benchmark run in the order the run allows:

1. `begin()` before NCCL's first log line (before the communicators): the
   capture's NCCL_DEBUG* settings (only when the user set no NCCL_DEBUG) and,
   where the log cannot give the per-call choice, the profiler plugin;
2. `after_init()` once every communicator exists: the `timed` phase, whose
   mask logs nothing per call;
3. `switch(i)` from `probe.probe_sizes` before each probed test (a new
   `probe` file, the plugin's mask on) and with -1 after the last;
4. `collect()`: this process's files read and the plugin drained, as a
   `RankCapture` for the reporting rank.

The settings go into this process's environment, which is where NCCL reads
them; the run's own record (JSON `env`, the store) keeps the user's
environment as it was (`live.LiveExplain.user_env`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .log_capture import LogPhases, merged, plan_capture, read_files
from .profiler import PROFILE_COLL, CollEvent, ProfilerControl, ProfilerPlan, events_to_choices, plan_profiler

if TYPE_CHECKING:
    from .nccl_log import CallChoice

PLUGIN_ENV = "NCCLBENCH_PROFILER_PLUGIN"  # a profiler plugin built apart from this install (a path)


@dataclass
class RankCapture:
    """What one process saw, sent to the reporting rank (plain data: it is pickled)."""

    facts: dict  # NcclLogFacts.to_dict() of this process's files
    probe: list[list[dict]] | None  # per probed test: CallChoice dicts; None: no route to the per-call choice
    route: str  # how the per-call choice was read: 'log', 'profiler', 'user log', 'none'
    notes: list[str] = field(default_factory=list)


def version_pair(code: int) -> tuple[int, int]:
    """NCCL's version code -> (major, minor): 22809 -> (2, 28); codes before 2.9 had 4 digits."""
    return (code // 10000, code % 10000 // 100) if code >= 10000 else (code // 1000, code % 1000 // 100)


class NcclRunCapture:
    """This process's capture of NCCL's account of a run (see the module docstring).

    `lib` is the ctypes handle of the libnccl the run uses, `version_code` its
    runtime version; `plugin` the profiler plugin's path (default: NCCLBENCH_PROFILER_PLUGIN,
    for a plugin built apart, else the one built into this install, if any)."""

    def __init__(self, lib: Any, version_code: int, environ: MutableMapping[str, str] = os.environ,
                 plugin: str | None = None):
        self.environ = environ
        self.log_dir = tempfile.mkdtemp(prefix="ncclbench-nccl-log-")
        reset = getattr(lib, "ncclResetDebugInit", None) is not None
        self.version = version_pair(version_code)
        log_gives_calls = reset and not environ.get("NCCL_DEBUG")
        if log_gives_calls:
            self.profiler = ProfilerPlan(False, {}, "not needed: NCCL's log gives the per-call choice")
        else:
            self.profiler = plan_profiler(environ, self.version, plugin or environ.get(PLUGIN_ENV) or None)
        self.plan = plan_capture(environ, self.log_dir, reset, profiler_available=self.profiler.use)
        self.phases = LogPhases(lib, self.plan, environ)
        self.control: ProfilerControl | None = None
        self.notes: list[str] = list(self.plan.notes)
        if not log_gives_calls:
            self.notes.append(self.profiler.reason)
        self.probe_seq: dict[int, int] = {}  # probed test -> seq of its log file
        self.events: dict[int, list[CollEvent]] = {}
        self._current: int | None = None

    @property
    def route(self) -> str:
        """How the per-call choice can be read in this run."""
        if self.plan.ours and self.plan.per_call_route == "reset":
            return "log"
        if self.profiler.use:
            return "profiler"
        if self.plan.mode == "user-file":
            return "user log"
        return "none"

    @property
    def wants_probe(self) -> bool:
        """Probe ops only where something will read NCCL's choice for them."""
        return self.route != "none"

    def begin(self) -> None:
        """Before NCCL's first log line: the capture's settings (and the plugin) into the environment."""
        if self.profiler.use:
            self.environ.update(self.profiler.env)
        self.phases.begin()

    def after_init(self) -> None:
        """Every communicator exists and nothing is in flight: the plugin's handle, then the timed phase."""
        if self.profiler.use:
            try:
                self.control = ProfilerControl(self.profiler.env["NCCL_PROFILER_PLUGIN"])
            except (OSError, AttributeError) as exc:
                self.notes.append(f"profiler plugin not usable: {exc}")
            else:  # what NCCL did with it: init() records the API version it chose
                api, live = self.control.api_version, self.control.live_comms
                self.notes.append(f"profiler plugin loaded by NCCL: profiler API v{api}, {live} communicator(s)"
                                  if api else "profiler plugin not initialised by NCCL (NCCL did not load it; "
                                  "NCCL_DEBUG=INFO shows why)")
        self.phases.enter("timed")

    def switch(self, test: int) -> None:
        """`probe.probe_sizes`' hook: before probed test `test` (-1: after the last)."""
        if self.control is not None and self._current is not None:
            self.events.setdefault(self._current, []).extend(self.control.drain())
        if test >= 0:
            if self.phases.enter("probe", again=True):
                self.probe_seq[test] = self.phases.seq
            if self.control is not None:
                self.control.set_mask(PROFILE_COLL)
            self._current = test
        else:
            if self.control is not None:
                self.control.set_mask(0)
            self.phases.enter("timed")
            self._current = None

    def collect(self, ntests: int) -> RankCapture:
        """This process's files (and the plugin's records) as plain data for the reporting rank."""
        files = read_files(self.plan, pids=[os.getpid()])
        facts = merged(self.plan, files)
        notes = list(self.notes)
        probe: list[list[dict]] | None = None
        route = self.route
        if route in ("log", "profiler"):
            probe = [[] for _ in range(ntests)]
            by_seq = {f.seq: f for f in files if f.seq is not None}
            for test, seq in self.probe_seq.items():
                if test < ntests and seq in by_seq:
                    probe[test] += [dataclasses.asdict(c) for c in by_seq[seq].facts.per_call]
            for test, events in self.events.items():
                choices, unknown = events_to_choices(events)
                if test < ntests:
                    probe[test] += [dataclasses.asdict(c) for c in choices]
                facts.per_call += [c for c in choices if c not in facts.per_call]
                notes += [u for u in unknown if u not in notes]
            if self.control is not None and self.control.dropped:
                notes.append(f"profiler plugin dropped {self.control.dropped} record(s) (its ring was full)")
        return RankCapture(facts=facts.to_dict(), probe=probe, route=route, notes=notes)

    def close(self) -> None:
        if self.control is not None:
            try:
                self.control.set_mask(0)
            except (OSError, AttributeError):
                pass
        shutil.rmtree(self.log_dir, ignore_errors=True)


def choices_from(dicts: list[dict]) -> list[CallChoice]:
    from .nccl_log import CallChoice

    names = {f.name for f in dataclasses.fields(CallChoice)}
    return [CallChoice(**{k: v for k, v in d.items() if k in names}) for d in dicts]
