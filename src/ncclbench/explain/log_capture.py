"""How ncclbench gets NCCL's own log of a run without changing what the user sees or what is timed.

What NCCL's source says (src/debug.cc, checked at v2.18.6-1 .. v2.30.7-1 and
on the installed libnccl; the reasoning is in docs/explain.md, "How
ncclbench learns what NCCL did"):

* NCCL reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE once, at its
  first log call (`ncclDebugInit`), and opens the file with fopen(.., "w").
* From 2.24.3 `ncclResetDebugInit()` (exported) makes the next log call read
  them again -- and reopen the file with "w", which empties a file of the
  same name.  So each phase writes its own file.
* The per-call algorithm line is INFO(NCCL_TUNING, ...) on rank 0; the model
  table is INFO(NCCL_TUNING, ...) at init.  With TUNING (and COLL) out of the
  subsystem mask, INFO's inline test (level >= INFO && flags & mask) skips
  them: nothing is formatted or written per call in the timed loop.

Hence the phases, each a file `nccl.<host>.<pid>.<nn>-<phase>.log` in a
private directory:

    init   INIT,ENV,NET,GRAPH,TUNING  communicator set-up: network, NICs, GDR, connections,
                                      channels, NCCL's model table
    timed  INIT,ENV,NET               warm-up and timed loop: nothing per call; lazily made
                                      connections (send/recv peers) still show
    probe  INIT,ENV,TUNING            one untimed op per size: NCCL's per-call choice

Without `ncclResetDebugInit` (NCCL < 2.24) the mask cannot change after the
first log call: the process keeps `timed`'s mask minus nothing (INIT,ENV,
NET,GRAPH; no model table) and the per-call choice comes from the profiler
plugin (`explain.profiler`, NCCL >= 2.27, so never there) or stays unknown
(`per_call_route == "none"`): said so, never guessed.

When the user set NCCL_DEBUG, nothing here changes their settings (a reset
would even empty their file): their NCCL_DEBUG_FILE, if any, is read after
the run; a log that went to their terminal cannot be read and is said so.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import socket
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the reader is imported where files are read: a run sets its capture up before NCCL
    from .nccl_log import NcclLogFacts  # starts, and that path stays light

PHASE_SUBSYS = {
    "init": "INIT,ENV,NET,GRAPH,TUNING",
    "timed": "INIT,ENV,NET",
    "probe": "INIT,ENV,TUNING",
}
NO_RESET_SUBSYS = "INIT,ENV,NET,GRAPH"  # NCCL < 2.24: one mask for the whole process, nothing per call
DEBUG_VARS = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")
_FILE_NAME = re.compile(r"^nccl\.(?P<host>.+)\.(?P<pid>\d+)\.(?P<seq>\d+)-(?P<phase>\w+)\.log$")


@dataclass(frozen=True)
class CapturePlan:
    """Who owns NCCL's debug settings in this run, and where its log goes."""

    mode: str  # "ncclbench" | "user-file" | "user-terminal" | "user-no-info"
    env: dict[str, str] = field(default_factory=dict)  # set before libnccl's first log call (mode ncclbench)
    log_dir: str | None = None
    per_call_route: str = "none"  # "reset" | "profiler" | "none" (the per-call choice stays unknown)
    user_file_pattern: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ours(self) -> bool:
        return self.mode == "ncclbench"


def plan_capture(environ: Mapping[str, str], log_dir: str, reset_available: bool,
                 profiler_available: bool = False) -> CapturePlan:
    """Decide from the user's environment; `reset_available`: libnccl exports ncclResetDebugInit."""
    user_debug = environ.get("NCCL_DEBUG")
    if user_debug:
        level = user_debug.strip().upper()
        route = "profiler" if profiler_available else "none"
        pattern = environ.get("NCCL_DEBUG_FILE")
        if level not in ("INFO", "TRACE"):
            return CapturePlan("user-no-info", per_call_route=route, notes=(
                f"NCCL_DEBUG={user_debug} set by you: NCCL writes no INFO lines, so its path is unknown; "
                "ncclbench leaves your setting",))
        if pattern:
            return CapturePlan("user-file", per_call_route=route, user_file_pattern=pattern, notes=(
                f"NCCL_DEBUG={user_debug} and NCCL_DEBUG_FILE set by you: ncclbench reads that file and "
                "changes nothing",))
        return CapturePlan("user-terminal", per_call_route=route, notes=(
            f"NCCL_DEBUG={user_debug} set by you without NCCL_DEBUG_FILE: NCCL's log goes to your terminal, "
            "which ncclbench does not read (set NCCL_DEBUG_FILE to let it)",))
    notes = []
    for var in ("NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"):
        if environ.get(var):
            notes.append(f"{var}={environ[var]} has no effect without NCCL_DEBUG; ncclbench sets its own for "
                         "its capture of NCCL's log")
    if reset_available:
        route, subsys = "reset", PHASE_SUBSYS["init"]
    else:
        route, subsys = ("profiler" if profiler_available else "none"), NO_RESET_SUBSYS
        notes.append("this libnccl has no ncclResetDebugInit (NCCL < 2.24): its log cannot be switched on for the "
                     "probe ops alone, so NCCL's model table is not captured and the per-call choice "
                     + ("comes from the profiler plugin" if profiler_available else
                        "is unknown (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING prints both)"))
    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": subsys,
           "NCCL_DEBUG_FILE": phase_file(log_dir, 0, "init")}
    return CapturePlan("ncclbench", env=env, log_dir=log_dir, per_call_route=route, notes=tuple(notes))


def phase_file(log_dir: str, seq: int, phase: str) -> str:
    """NCCL_DEBUG_FILE for one phase: NCCL fills in %h (host) and %p (pid)."""
    return os.path.join(log_dir, f"nccl.%h.%p.{seq:02d}-{phase}.log")


class LogPhases:
    """Switches NCCL's debug mask between phases of one process (NCCL >= 2.24, mode 'ncclbench').

    `lib` is the ctypes handle of the libnccl the run uses.  Switch only where
    no NCCL call is in flight (after a barrier): the environment is changed
    from Python while NCCL's threads may read it.
    """

    def __init__(self, lib: ctypes.CDLL, plan: CapturePlan, environ: MutableMapping[str, str] = os.environ):
        self.lib, self.plan, self.environ = lib, plan, environ
        self.seq = 0
        self.phase = "init"
        self.reset = getattr(lib, "ncclResetDebugInit", None) if plan.ours and plan.per_call_route == "reset" else None

    @property
    def active(self) -> bool:
        return self.reset is not None

    def begin(self) -> None:
        """Apply the plan's settings (mode 'ncclbench'); if libnccl already logged, make it read them again."""
        if not self.plan.ours:
            return
        self.environ.update(self.plan.env)
        if self.reset is not None:
            self.reset()

    def enter(self, phase: str, *, again: bool = False) -> bool:
        """Make NCCL log `phase`'s subsystems into a new file from its next line (`again`: a new file
        even when already in that phase, e.g. one per probed test); False when it cannot."""
        if phase not in PHASE_SUBSYS:
            raise ValueError(f"unknown phase {phase!r}")
        reset, log_dir = self.reset, self.plan.log_dir
        if reset is None or log_dir is None or (phase == self.phase and not again):
            return False
        self.seq += 1
        self.environ["NCCL_DEBUG_SUBSYS"] = PHASE_SUBSYS[phase]
        self.environ["NCCL_DEBUG_FILE"] = phase_file(log_dir, self.seq, phase)
        reset()
        self.phase = phase
        return True


def hostname_as_nccl_writes_it() -> str:
    """NCCL's %h: the host name up to its first '.' (getHostName(.., '.'), src/debug.cc)."""
    return socket.gethostname().split(".", 1)[0]


def expand_debug_file(pattern: str, host: str, pid: int) -> str:
    """NCCL_DEBUG_FILE with %h, %p and %% filled in as ncclDebugInit does (other %x stay as written)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "%" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append({"%": "%", "h": host, "p": str(pid)}.get(nxt, "%" + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def captured_files(plan: CapturePlan, pids: list[int] | None = None, host: str | None = None) -> list[Path]:
    """The log files this host's processes wrote (all of ncclbench's, or the user's file for `pids`)."""
    host = host or hostname_as_nccl_writes_it()
    if plan.ours and plan.log_dir:
        files = []
        for path in sorted(glob.glob(os.path.join(glob.escape(plan.log_dir), "nccl.*.log"))):
            m = _FILE_NAME.match(os.path.basename(path))
            if m and (pids is None or int(m.group("pid")) in pids):
                files.append(Path(path))
        return files
    if plan.mode == "user-file" and plan.user_file_pattern:
        names = dict.fromkeys(expand_debug_file(plan.user_file_pattern, host, pid) for pid in (pids or [os.getpid()]))
        return [Path(n) for n in names if os.path.isfile(n)]
    return []


@dataclass(frozen=True)
class CapturedFile:
    """One file's facts; `seq`/`phase` from ncclbench's file name (None for the user's file)."""

    path: Path
    facts: NcclLogFacts
    seq: int | None = None
    phase: str | None = None


def read_files(plan: CapturePlan, pids: list[int] | None = None, host: str | None = None) -> list[CapturedFile]:
    """Each captured file read on its own (a probed test's ops are one file's per-call lines)."""
    from .nccl_log import NcclLogFacts, parse_nccl_log

    out = []
    for path in captured_files(plan, pids, host):
        m = _FILE_NAME.match(path.name)
        try:
            facts = parse_nccl_log(path.read_text(errors="replace"))
        except OSError as e:
            facts = NcclLogFacts(unknown=[f"{path}: {e.strerror or e}"])
        out.append(CapturedFile(path, facts, int(m.group("seq")) if m else None, m.group("phase") if m else None))
    return out


def merged(plan: CapturePlan, files: list[CapturedFile]) -> NcclLogFacts:
    """One view of the files' facts, with the plan's notes first among the unknowns."""
    from .nccl_log import merge_facts, parse_nccl_log

    parts = [f.facts for f in files]
    facts = merge_facts(parts) if parts else parse_nccl_log("")
    facts.unknown = list(plan.notes) + facts.unknown
    return facts


def read_capture(plan: CapturePlan, pids: list[int] | None = None, host: str | None = None) -> NcclLogFacts:
    """The facts of what this host's processes logged; the plan's notes say what could not be read."""
    return merged(plan, read_files(plan, pids, host))
