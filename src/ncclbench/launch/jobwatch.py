"""The launcher's view of the job it started: who each rank is, how it ended.

ncclbench's launchers (`--nprocs N`: `LocalSpawnLauncher`, `spawn_mpiexec`)
must name a rank that dies or stops, by rank, host and pid.  MPICH's own
banner cannot be trusted for that: when one rank is killed, Hydra kills the
others and its "BAD TERMINATION ... PID n" line may name one of those (seen
with MPICH 5.0.2: `kill -9` of rank 1 reported rank 0's pid).  And under
mpiexec the ranks are not the launcher's children, so it cannot wait() for
them.

So every rank opens one connection to a Unix socket the launcher listens on
(in a private temporary directory) and says who it is; it reports its run id
and, before it ends by itself, that it is ending (`launch.shutdown`'s side).
A connection that closes without that report is a rank that died (kill -9,
the OOM killer, a crash); the first one to close is the one that died first,
the others are the clean-up that followed.  A rank whose process is in the
stopped state (SIGSTOP, SIGTSTP) is named after `STOPPED_NAME_S` and the job
is ended after `stopped_limit_s`, since nothing else would end that hang.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from ..core.processes import pid_alive
from .shutdown import JOB_DIR_ENV, JOB_ENV, LAUNCHER_PID_ENV, signal_name

SOCKET_NAME = "launcher.sock"
STOPPED_NAME_S = 2.0  # a rank stopped this long is named
STOPPED_LIMIT_S = 60.0  # ... and the job is ended after this long (NCCLBENCH_STOPPED_LIMIT)


@dataclass
class RankRecord:
    rank: int
    host: str = "?"
    pid: int = 0
    run_id: int | None = None  # the stored run (rank 0)
    db: str | None = None
    ending: str | None = None  # what the rank said before ending ("exit", "abort 4: ...", "SIGTERM ...")
    lost_at: float | None = None  # its connection closed (monotonic)
    stopped_since: float | None = None

    def who(self) -> str:
        return f"rank {self.rank} (host {self.host}, pid {self.pid})"


@dataclass
class Death:
    """Ranks whose connections closed without a word, in the order seen; ranks
    seen in the same wake-up cannot be told apart in time."""

    at: float
    ranks: list[int] = field(default_factory=list)


def stopped(pid: int) -> bool:
    """True when `pid` (on this host) is stopped by a signal (state T)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    state = data[data.rfind(b")") + 2:][:1]
    return state == b"T"


def job_processes(token: str) -> list[int]:
    """Processes on this host that carry the job's token in their environment
    (every process ncclbench's launcher started, and what they started)."""
    needle = f"{JOB_ENV}={token}".encode()
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(name))
    return found


class JobWatch:
    """Listens for the ranks of one job; see the module docstring."""

    def __init__(self, nprocs: int, *, stderr: IO[str] | None = None,
                 stopped_limit_s: float | None = None,
                 on_stopped_limit: Callable[[RankRecord], None] | None = None):
        self.nprocs = nprocs
        self.token = secrets.token_hex(12)
        self.dir = tempfile.mkdtemp(prefix="ncclbench-job-")
        self.path = os.path.join(self.dir, SOCKET_NAME)
        self.stderr = stderr or sys.stderr
        if stopped_limit_s is None:
            try:
                stopped_limit_s = float(os.environ.get("NCCLBENCH_STOPPED_LIMIT", STOPPED_LIMIT_S))
            except ValueError:
                stopped_limit_s = STOPPED_LIMIT_S
        self.stopped_limit_s = stopped_limit_s
        self.on_stopped_limit = on_stopped_limit
        self.ranks: dict[int, RankRecord] = {}
        self.deaths: list[Death] = []
        self.endings: list[tuple[float, int, str]] = []  # (when, rank, what it said), as received
        self.stop_ended: RankRecord | None = None  # the stopped rank the job was ended for
        self.lock = threading.Lock()
        self._closed = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(max(16, nprocs * 2))
        self._listener.setblocking(False)
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._buffers: dict[socket.socket, bytes] = {}
        self._owner: dict[socket.socket, int] = {}
        threading.Thread(target=self._loop, name="ncclbench-jobwatch", daemon=True).start()
        threading.Thread(target=self._monitor, name="ncclbench-jobwatch-stopped", daemon=True).start()

    def env(self) -> dict[str, str]:
        """What the launcher adds to every rank's environment."""
        return {JOB_ENV: self.token, JOB_DIR_ENV: self.dir, LAUNCHER_PID_ENV: str(os.getpid())}

    # -- the socket ---------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed.is_set():
            try:
                events = self._sel.select(0.2)
            except (OSError, ValueError):
                return
            lost_now: list[int] = []
            closed: list[socket.socket] = []
            now = time.monotonic()
            # every word read before any close of the same wake-up: a rank that says it is ending and
            # aborts gets its neighbours killed within microseconds, and their closes may be listed
            # first (CI: a -T timeout stored as 'rank 3 died first' instead of rank 0's timeout)
            for key, _ in events:
                sock = key.fileobj
                if sock is self._listener:
                    try:
                        conn, _ = self._listener.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    self._buffers[conn] = b""
                    self._sel.register(conn, selectors.EVENT_READ, None)
                    continue
                assert isinstance(sock, socket.socket)  # registered above: the listener or a connection
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data:
                    self._feed(sock, data, now)
                    continue
                closed.append(sock)
            for sock in closed:
                rank = self._owner.pop(sock, None)
                self._sel.unregister(sock)
                self._buffers.pop(sock, None)
                sock.close()
                if rank is not None:
                    with self.lock:
                        rec = self.ranks[rank]
                        rec.lost_at = now
                        if rec.ending is None:
                            lost_now.append(rank)
            if lost_now:
                with self.lock:
                    self.deaths.append(Death(now, sorted(lost_now)))

    def _feed(self, sock: socket.socket, data: bytes, now: float) -> None:
        buf = self._buffers.get(sock, b"") + data
        *lines, rest = buf.split(b"\n")
        self._buffers[sock] = rest
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict) or msg.get("token") != self.token:
                continue
            rank = msg.get("rank")
            if not isinstance(rank, int):
                continue
            with self.lock:
                rec = self.ranks.setdefault(rank, RankRecord(rank))
                self._owner[sock] = rank
                if "host" in msg:
                    rec.host = str(msg["host"])
                if "pid" in msg:
                    rec.pid = int(msg["pid"])
                if msg.get("run_id") is not None:
                    rec.run_id = int(msg["run_id"])
                    rec.db = msg.get("db")
                if msg.get("ending"):
                    said = str(msg["ending"])
                    if rec.ending is None or rec.ending == "exit":
                        rec.ending = said
                    if said != "exit":
                        self.endings.append((now, rank, said))

    # -- stopped ranks ---------------------------------------------------------------------
    def _monitor(self) -> None:
        named: set[int] = set()
        while not self._closed.wait(0.25):
            now = time.monotonic()
            with self.lock:
                recs = [r for r in self.ranks.values() if r.pid and r.lost_at is None]
            for rec in recs:
                if not stopped(rec.pid):
                    rec.stopped_since = None
                    continue
                if rec.stopped_since is None:
                    rec.stopped_since = now
                held = now - rec.stopped_since
                if held >= STOPPED_NAME_S and rec.rank not in named:
                    named.add(rec.rank)
                    self._say(f"ncclbench: {rec.who()} is stopped (SIGSTOP/SIGTSTP): the other ranks wait "
                              f"for it; the job ends if it stays stopped for {self.stopped_limit_s:g} s")
                if held >= self.stopped_limit_s and self.stop_ended is None:
                    self.stop_ended = rec
                    if self.on_stopped_limit is not None:
                        self.on_stopped_limit(rec)

    def _say(self, line: str) -> None:
        try:
            print(line, file=self.stderr, flush=True)
        except (OSError, ValueError):
            pass

    # -- after the job ---------------------------------------------------------------------
    def who(self, rank: int) -> str:
        rec = self.ranks.get(rank)
        return rec.who() if rec else f"rank {rank}"

    def rank_of_pid(self, pid: int) -> RankRecord | None:
        with self.lock:
            return next((r for r in self.ranks.values() if r.pid == pid), None)

    def first_death(self) -> str | None:
        """'rank 2 (host h, pid p) died ...' for the first rank(s) whose connection
        closed without a word, or None."""
        with self.lock:
            if not self.deaths:
                return None
            first, later = self.deaths[0], [r for d in self.deaths[1:] for r in d.ranks]
            names = ", ".join(self.who(r) for r in first.ranks)
        if len(first.ranks) == 1:
            text = f"{names} died first (no word from it: killed by a signal such as SIGKILL, the OOM killer, or a crash)"
        else:
            text = (f"{names} ended at the same moment without a word (killed by a signal, the OOM killer, or a "
                    f"crash); which one was first cannot be told")
        if later:
            text += f"; then rank{'s' if len(later) > 1 else ''} {', '.join(str(r) for r in sorted(later))} ended"
        return text

    def first_ending(self) -> tuple[float, RankRecord, str] | None:
        """The first rank that said it was ending on its own (a signal it
        received, an abort), and what it said: the origin of the job's end;
        what the others said after it is their reaction."""
        with self.lock:
            if not self.endings:
                return None
            at, rank, said = self.endings[0]
            return at, self.ranks[rank], said

    def stored_run(self) -> tuple[int, str] | None:
        with self.lock:
            rec = next((r for r in self.ranks.values() if r.run_id is not None), None)
        return None if rec is None or not rec.db else (rec.run_id, rec.db)  # type: ignore[return-value]

    def sweep(self, grace_s: float = 1.0) -> list[int]:
        """End every process that still carries the job's token (orphans of a
        launcher that was killed): SIGTERM, then SIGKILL after grace_s.  Returns
        the pids that had to be ended."""
        left = job_processes(self.token)
        if not left:
            return []
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in left:
                try:
                    if sig == signal.SIGTERM and stopped(pid):
                        os.kill(pid, signal.SIGKILL)  # a stopped process would hold SIGTERM forever
                    else:
                        os.kill(pid, sig)
                except OSError:
                    pass
            end = time.monotonic() + grace_s
            while time.monotonic() < end and any(pid_alive(p) for p in left):
                time.sleep(0.02)
            if not any(pid_alive(p) for p in left):
                break
        return left

    def close(self) -> None:
        self._closed.set()
        try:
            self._sel.close()
        except (OSError, ValueError):
            pass
        self._listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def describe_exit(code: int) -> str:
    """A rank's or launcher's exit status in words: 'exit status 3', 'SIGTERM'."""
    if code < 0:
        return signal_name(-code)
    if code > 128:
        return f"{signal_name(code - 128)} (exit status {code})"
    return f"exit status {code}"
