"""TCP rendezvous: a HostComm without MPI.

A star through world rank 0.  Rank 0 listens; every other rank connects
(retrying until the deadline, since launchers start processes in any order),
proves it holds the job's token, and keeps one connection open for the whole
run.  Each operation is one round trip: every member sends its contribution
to rank 0's hub, which answers each member once all have arrived.  That makes
every operation synchronising, which is what the harness needs anyway, and
lets the hub say exactly which ranks are missing.

Failures are noticed by background threads, not only inside operations: a
process that dies closes its socket (EOF, noticed at once), a host that
vanishes stops its heartbeat (noticed after the heartbeat timeout), and a
rank that never reaches an operation is named when the operation's timeout
expires.  The hub then tells every rank, each raises BenchError(TIMEOUT) at
its next (or current) operation, and registered failure callbacks run at
once so a harness stuck in a device wait can abort it.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from ..core.errors import BenchError, ExitCode
from . import wire
from .hostcomm import HostComm

DEFAULT_TIMEOUT_S = 60.0  # rendezvous bound when -T is not given
HEARTBEAT_S = 1.0
_GRACE_S = 2.0  # peers wait this much longer than the hub, so the hub's message wins
_OPS: dict[str, Callable[[list[Any]], Any]] = {"sum": sum, "min": min, "max": max}


def format_ranks(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    rs = sorted(set(ranks))
    out: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ", ".join(out)


@dataclass
class PeerInfo:
    host: str
    pid: int
    addr: str

    def __str__(self) -> str:
        return f"host {self.host}, {self.addr}, pid {self.pid}"


@dataclass
class _Pending:
    name: str
    arg: Any
    members: list[int]
    start: float
    contribs: dict[int, Any] = field(default_factory=dict)


class _Transport:
    """State shared by both ends: failure, results, callbacks."""

    def __init__(self, rank: int, size: int, timeout_s: float, op_timeout_s: float | None,
                 heartbeat_s: float):
        self.rank, self.size = rank, size
        self.timeout_s = float(timeout_s)
        self.op_timeout_s = op_timeout_s if op_timeout_s and op_timeout_s > 0 else None
        self.heartbeat_s = heartbeat_s
        self.hb_timeout_s = max(3 * heartbeat_s, self.timeout_s)
        self.cond = threading.Condition()
        self.failure: BenchError | None = None
        self._claimed = False  # a failure is being reported
        self.results: dict[tuple[int, int], Any] = {}
        self.peers: dict[int, PeerInfo] = {}
        self.closing = False
        self.closed = threading.Event()
        self._callbacks: list[Callable[[BenchError], None]] = []
        self.host = socket.gethostname()

    def who(self, rank: int) -> str:
        p = self.peers.get(rank)
        return f"rank {rank} ({p})" if p else f"rank {rank} (never connected)"

    def who_all(self, ranks: Iterable[int]) -> str:
        rs = sorted(set(ranks))
        if len(rs) > 8:
            hosts = sorted({self.peers[r].host for r in rs if r in self.peers})
            never = [r for r in rs if r not in self.peers]
            text = f"ranks {format_ranks(rs)}"
            if hosts:
                text += f" (hosts {', '.join(hosts)})"
            if never:
                text += f"; never connected: {format_ranks(never)}"
            return text
        return ", ".join(self.who(r) for r in rs)

    def add_failure_callback(self, cb: Callable[[BenchError], None]) -> None:
        with self.cond:
            failure = self.failure
            if failure is None:
                self._callbacks.append(cb)
        if failure is not None:
            cb(failure)

    def fail(self, message: str, code: int = ExitCode.TIMEOUT, status: str | None = None,
             relayed: bool = False) -> None:
        """Report the job's first failure to every rank.  `status`: how the run is
        stored ('interrupted' for a dead or aborting peer; None: from the code,
        so a rank that never answered in time is a 'timeout').  `relayed`: another
        rank reported it first (under ncclbench's launcher only the origin speaks)."""
        try:
            code = ExitCode(code)
        except ValueError:
            code = ExitCode.INTERNAL
        with self.cond:
            if self.closed.is_set():
                return
            if self._claimed:  # another thread is reporting; return once it is visible
                self.cond.wait_for(lambda: self.failure is not None, timeout=5.0)
                return
            self._claimed = True
        failure = BenchError(message, code)
        failure.status = status  # type: ignore[attr-defined]
        failure.relayed = relayed  # type: ignore[attr-defined]
        self._on_fail(message, int(code), status)  # tell the other ranks before this one can exit
        with self.cond:
            self.failure = failure
            self.cond.notify_all()
            callbacks = list(self._callbacks)
        for cb in callbacks:
            try:
                cb(failure)
            except Exception:  # a callback must not hide the failure itself
                pass

    def _on_fail(self, message: str, code: int, status: str | None) -> None:
        pass

    def raise_failure(self) -> None:
        f = self.failure
        if f is not None:
            err = BenchError(f.message, f.code)
            err.status = getattr(f, "status", None)  # type: ignore[attr-defined]
            err.relayed = getattr(f, "relayed", False)  # type: ignore[attr-defined]
            raise err

    def wait_result(self, key: tuple[int, int], bound_s: float | None, what: str) -> Any:
        end = None if bound_s is None else time.monotonic() + bound_s
        with self.cond:
            while key not in self.results:
                if self.failure is not None:
                    break
                left = 0.5 if end is None else min(0.5, end - time.monotonic())
                if left <= 0:
                    break
                self.cond.wait(left)
            if key in self.results:
                return self.results.pop(key)
        if self.failure is None:
            self.fail(f"rank {self.rank}: no answer from rank 0 ({self.peers.get(0)}) within "
                      f"{bound_s:g} s in {what}")
        self.raise_failure()


def _compute(hub: _Hub, p: _Pending) -> list[Any]:
    """Results per member, in member order (runs under the hub's lock)."""
    n = len(p.members)
    vals = [p.contribs[i] for i in range(n)]
    if p.name == "barrier":
        return [None] * n
    if p.name == "allreduce":
        v = _OPS[p.arg](vals)
        return [v] * n
    if p.name == "gather":
        return [vals if i == p.arg else None for i in range(n)]
    if p.name == "bcast":
        return [vals[p.arg]] * n
    if p.name == "allgather":
        return [vals] * n
    if p.name == "split":
        out: list[Any] = [None] * n
        for color in sorted({c for c, _ in vals}):
            idx = sorted((i for i in range(n) if vals[i][0] == color), key=lambda i: (vals[i][1], i))
            world = [p.members[i] for i in idx]
            cid = hub.next_cid
            hub.next_cid += 1
            hub.comms[cid] = world
            for new_rank, i in enumerate(idx):
                out[i] = (cid, new_rank, len(world))
        return out
    raise ValueError(f"unknown operation {p.name!r}")


class _Hub(_Transport):
    """World rank 0: listens, authenticates, routes every operation."""

    def __init__(self, size: int, addr: str, port: int, token: str, timeout_s: float,
                 op_timeout_s: float | None, heartbeat_s: float, listen_sock: socket.socket | None):
        super().__init__(0, size, timeout_s, op_timeout_s, heartbeat_s)
        self.token = token
        self.addr, self.port = addr, port
        self.conns: dict[int, socket.socket] = {}
        self.send_locks: dict[int, threading.Lock] = {}
        self.last_seen: dict[int, float] = {}
        self.pending: dict[tuple[int, int], _Pending] = {}
        self.comms: dict[int, list[int]] = {0: list(range(size))}
        self.member_index: dict[int, dict[int, int]] = {}
        self.next_cid = 1
        self.departed: set[int] = set()
        self.refused: list[str] = []
        self.formed = False
        self.peers[0] = PeerInfo(self.host, os.getpid(), addr)
        self.deadline = time.monotonic() + self.timeout_s
        threading.Thread(target=self._monitor, name="ncclbench-rdzv-monitor", daemon=True).start()
        if size > 1:
            self._rendezvous(listen_sock)

    # -- forming the job ---------------------------------------------------------------
    def _listen(self) -> socket.socket:
        loopback = self.addr in ("localhost",) or self.addr.startswith("127.") or self.addr == "::1"
        try:
            if loopback:
                return socket.create_server((self.addr, self.port), backlog=1024)
            if socket.has_dualstack_ipv6():
                return socket.create_server(("", self.port), family=socket.AF_INET6, dualstack_ipv6=True,
                                            backlog=1024)
            return socket.create_server(("", self.port), backlog=1024)
        except OSError as e:
            raise BenchError(f"rank 0 cannot listen on port {self.port} ({e.strerror or e}): another job "
                             f"may hold it; choose a free one with NCCLBENCH_MASTER_PORT",
                             ExitCode.INVALID_USAGE) from None

    def _rendezvous(self, listen_sock: socket.socket | None) -> None:
        listener = listen_sock if listen_sock is not None else self._listen()
        deadline = self.deadline
        stop = threading.Event()
        acceptor = threading.Thread(target=self._accept_loop, args=(listener, stop, deadline),
                                    name="ncclbench-rdzv-accept", daemon=True)
        acceptor.start()
        with self.cond:
            while len(self.conns) < self.size - 1 and time.monotonic() < deadline and self.failure is None:
                self.cond.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            complete = len(self.conns) == self.size - 1 and self.failure is None
            self.formed = True  # from now on, late connections are refused
            missing = [r for r in range(1, self.size) if r not in self.conns]
        stop.set()
        acceptor.join(1.0)
        listener.close()
        if not complete:
            msg = (f"rendezvous at {self.addr}:{self.port} timed out after {self.timeout_s:g} s: "
                   f"{self.size - len(missing)} of {self.size} ranks arrived; "
                   f"{self.who_all(missing)}")
            if self.refused:
                msg += f"; refused connections: {'; '.join(self.refused[:5])}"
            self.fail(msg)  # no-op if a failure (a peer died meanwhile) came first
            self._shutdown_all()
            self.raise_failure()
        welcome = wire.dumps(("welcome", {r: (p.host, p.pid, p.addr) for r, p in self.peers.items()}))
        for r in list(self.conns):
            self._send_body(r, welcome)

    def _accept_loop(self, listener: socket.socket, stop: threading.Event, deadline: float) -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, a = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            peer = a[0][7:] if a[0].startswith("::ffff:") else a[0]  # IPv4 seen through a dual-stack socket
            threading.Thread(target=self._serve, args=(conn, peer, deadline), daemon=True,
                             name="ncclbench-rdzv-peer").start()

    def _refuse(self, conn: socket.socket, peer: str, reason: str) -> None:
        with self.cond:
            self.refused.append(f"{peer}: {reason}")
        try:
            wire.send_json(conn, {"ok": False, "error": reason})
        except OSError:
            pass
        conn.close()

    def _serve(self, conn: socket.socket, peer_addr: str, deadline: float) -> None:
        """Handshake one connection, then read its messages until it goes."""
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            conn.settimeout(max(1.0, min(10.0, deadline - time.monotonic())))
            n = wire.nonce()
            wire.send_json(conn, {"proto": wire.PROTO, "nonce": n, "size": self.size,
                                  "host": self.host, "pid": os.getpid(),
                                  "left_s": max(0.0, self.deadline - time.monotonic())})
            hello = wire.recv_json(conn)
        except (OSError, EOFError, wire.HandshakeError) as e:
            with self.cond:
                self.refused.append(f"{peer_addr}: handshake failed ({e})")
            conn.close()
            return
        rank, size = hello.get("rank"), hello.get("size")
        if hello.get("proto") != wire.PROTO or not isinstance(rank, int) or not isinstance(size, int):
            return self._refuse(conn, peer_addr, f"not an {wire.PROTO} client")
        host = str(hello.get("host", "?"))[:255]
        if not wire.mac_ok(wire.mac(self.token, "c", n, hello.get("cnonce"), rank, size), hello.get("mac")):
            return self._refuse(conn, f"{host} {peer_addr}", "token mismatch")
        if size != self.size:
            return self._refuse(conn, f"{host} {peer_addr}", f"world size mismatch: rank 0 has {self.size} "
                                f"processes, this one was told {size}")
        with self.cond:
            reason = None
            if not 1 <= rank < self.size:
                reason = f"rank {rank} is outside a world of {self.size}"
            elif rank in self.conns:
                reason = f"rank {rank} is already taken by {self.peers[rank]} (two processes got the same rank)"
            elif self.formed:
                reason = "the job was already formed or given up"
            if reason is None:
                self.conns[rank] = conn
                self.send_locks[rank] = threading.Lock()
                self.peers[rank] = PeerInfo(host, int(hello.get("pid", 0)), peer_addr)
                self.last_seen[rank] = time.monotonic()
        if reason is not None:
            return self._refuse(conn, f"{host} {peer_addr}", reason)
        try:
            wire.send_json(conn, {"ok": True, "mac": wire.mac(self.token, "s", hello.get("cnonce"), n)})
            conn.settimeout(None)
        except OSError as e:
            return self._lost(rank, f"handshake reply failed ({e})")
        with self.cond:
            self.cond.notify_all()
        self._read_loop(rank, conn)

    # -- running -----------------------------------------------------------------------
    def _read_loop(self, rank: int, conn: socket.socket) -> None:
        try:
            while True:
                kind, body = wire.recv_frame(conn)
                self.last_seen[rank] = time.monotonic()
                if kind != wire.KIND_PICKLE:
                    raise wire.HandshakeError("unexpected message kind")
                msg = wire.loads_trusted(body)
                tag = msg[0]
                if tag == "op":
                    _, cid, seq, name, arg, payload = msg
                    self.contribute(rank, cid, seq, name, arg, payload)
                elif tag == "bye":
                    self._depart(rank)
                    return
                elif tag == "abort":
                    self.fail(f"{self.who(rank)} aborted the job: {msg[2]}", msg[1], "interrupted", relayed=True)
        except EOFError:
            self._lost(rank, "its connection closed without a goodbye (process died or was killed)")
        except (OSError, ConnectionError, wire.HandshakeError, ValueError, TypeError) as e:
            self._lost(rank, f"connection lost ({e})")
        except Exception as e:  # undecodable message: treat the peer as gone
            self._lost(rank, f"bad message ({type(e).__name__}: {e})")

    def _lost(self, rank: int, reason: str) -> None:
        with self.cond:
            if self.closing or rank in self.departed:
                return
        self.fail(f"{self.who(rank)} died: {reason}", status="interrupted")

    def _depart(self, rank: int) -> None:
        with self.cond:
            self.departed.add(rank)
            self.cond.notify_all()
            stuck = [(k, p) for k, p in self.pending.items()
                     if rank in p.members and self._idx(k[0], rank) not in p.contribs]
        if stuck:
            (cid, seq), p = stuck[0]
            self.fail(f"{self.who(rank)} left the job (closed) while the others wait in {p.name} #{seq}",
                      status="interrupted")

    def _index_of(self, cid: int) -> dict[int, int]:
        """World rank -> index among the members of communicator `cid`."""
        idx = self.member_index.get(cid)
        if idx is None:
            idx = self.member_index[cid] = {r: i for i, r in enumerate(self.comms[cid])}
        return idx

    def _idx(self, cid: int, world_rank: int) -> int:
        return self._index_of(cid)[world_rank]

    def contribute(self, wrank: int, cid: int, seq: int, name: str, arg: Any, payload: Any) -> None:
        problem = None
        deliveries: list[tuple[int, Any]] = []
        with self.cond:
            if self.failure is not None:
                return
            members = self.comms.get(cid)
            if members is None or wrank not in self._index_of(cid):
                problem = f"rank {wrank} used an unknown communicator {cid}"
            else:
                key = (cid, seq)
                p = self.pending.get(key)
                if p is None:
                    p = self.pending[key] = _Pending(name, arg, members, time.monotonic())
                if (p.name, p.arg) != (name, arg):
                    problem = (f"ranks out of step: {self.who(wrank)} called {name}({arg}) as operation #{seq} "
                               f"while others called {p.name}({p.arg})")
                else:
                    p.contribs[self._idx(cid, wrank)] = payload
                    gone = [m for m in members if m in self.departed and self._idx(cid, m) not in p.contribs]
                    if gone:
                        problem = f"{self.who_all(gone)} left the job before {name} #{seq}"
                    elif len(p.contribs) == len(members):
                        del self.pending[key]
                        deliveries = list(zip(members, _compute(self, p)))
        if problem:
            self.fail(problem)
            return
        self._deliver(cid, seq, deliveries)

    def _deliver(self, cid: int, seq: int, deliveries: list[tuple[int, Any]]) -> None:
        bodies: dict[int, bytes] = {}
        for r, value in deliveries:
            if r == 0:
                with self.cond:
                    self.results[(cid, seq)] = value
                    self.cond.notify_all()
                continue
            body = bodies.get(id(value))
            if body is None:
                body = bodies[id(value)] = wire.dumps(("res", cid, seq, value))
            self._send_body(r, body)

    def _send_body(self, rank: int, body: bytes) -> bool:
        conn, lock = self.conns.get(rank), self.send_locks.get(rank)
        if conn is None or lock is None:
            return False
        try:
            with lock:
                wire.send_frame(conn, wire.KIND_PICKLE, body)
            return True
        except OSError as e:
            self._lost(rank, f"sending to it failed ({e})")
            return False

    def _on_fail(self, message: str, code: int, status: str | None) -> None:
        body = wire.dumps(("fail", code, message, status))
        for r in list(self.conns):
            if r not in self.departed:
                conn, lock = self.conns[r], self.send_locks[r]
                try:
                    with lock:
                        wire.send_frame(conn, wire.KIND_PICKLE, body)
                except OSError:
                    pass

    def _monitor(self) -> None:
        ping = wire.dumps(("ping",))
        next_ping = time.monotonic() + self.heartbeat_s
        while not self.closed.wait(min(0.2, self.heartbeat_s / 4)):
            now = time.monotonic()
            problem = None
            with self.cond:
                if self.failure is not None:
                    return
                if self.op_timeout_s:
                    for (_cid, seq), p in self.pending.items():
                        if now - p.start > self.op_timeout_s:
                            missing = [m for i, m in enumerate(p.members) if i not in p.contribs]
                            problem = (f"timeout: {p.name} #{seq} waited {self.op_timeout_s:g} s for "
                                       f"{self.who_all(missing)} ({len(p.contribs)} of {len(p.members)} "
                                       f"ranks arrived)")
                            break
                if problem is None:
                    for r, t in self.last_seen.items():
                        if r not in self.departed and now - t > self.hb_timeout_s:
                            problem = (f"{self.who(r)} silent for {now - t:.0f} s (no heartbeat): its host may "
                                       f"be down or unreachable")
                            break
            if problem:
                self.fail(problem)
                return
            if now >= next_ping:
                next_ping = now + self.heartbeat_s
                for r in list(self.conns):
                    if r not in self.departed:
                        self._send_body(r, ping)

    def op(self, cid: int, seq: int, name: str, arg: Any, payload: Any) -> Any:
        self.raise_failure()
        self.contribute(0, cid, seq, name, arg, payload)
        return self.wait_result((cid, seq), None, f"{name} #{seq}")

    def abort(self, code: int, message: str) -> None:
        self.fail(f"rank 0 ({self.peers[0]}) aborted the job: {message}", code, "interrupted")

    def _shutdown_all(self) -> None:
        with self.cond:
            self.closing = True
        for conn in list(self.conns.values()):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        """Wait (bounded) for every rank's goodbye, so nobody loses the hub mid-operation."""
        end = time.monotonic() + self.timeout_s
        with self.cond:
            while (self.failure is None and len(self.departed) < len(self.conns)
                   and time.monotonic() < end):
                self.cond.wait(0.5)
        self._shutdown_all()
        self.closed.set()


class _Link(_Transport):
    """Any rank but 0: one authenticated connection to the hub."""

    def __init__(self, rank: int, size: int, addr: str, port: int, token: str, timeout_s: float,
                 op_timeout_s: float | None, heartbeat_s: float):
        super().__init__(rank, size, timeout_s, op_timeout_s, heartbeat_s)
        self.addr, self.port = addr, port
        self.send_lock = threading.Lock()
        self.welcome = threading.Event()
        deadline = time.monotonic() + self.timeout_s
        self.sock = self._connect(token, deadline)
        # from here on, rank 0's clock decides: it names the missing ranks when its own deadline passes
        deadline = time.monotonic() + self.hub_left_s
        self.last_seen = time.monotonic()
        threading.Thread(target=self._read_loop, name="ncclbench-rdzv-reader", daemon=True).start()
        threading.Thread(target=self._heartbeat, name="ncclbench-rdzv-heartbeat", daemon=True).start()
        while not self.welcome.wait(0.1):
            if self.failure is not None:
                break
            if time.monotonic() > deadline + _GRACE_S:
                self.fail(f"rank {rank}: connected to rank 0 at {addr}:{port} but the job was not formed "
                          f"within {timeout_s:g} s (rank 0 gave no answer)")
        if self.failure is not None:
            self.close()
            self.raise_failure()

    def _connect(self, token: str, deadline: float) -> socket.socket:
        delay, last = 0.02, "no attempt"
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(
                    f"rank {self.rank}: could not reach rank 0 at {self.addr}:{self.port} within "
                    f"{self.timeout_s:g} s ({last}); is rank 0 running, and does {self.addr} reach its host "
                    f"from {self.host}?", ExitCode.TIMEOUT)
            try:
                sock = socket.create_connection((self.addr, self.port), timeout=min(2.0, left))
            except OSError as e:
                last = e.strerror or str(e) or type(e).__name__
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 1.5, 0.5)
                continue
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(max(0.5, deadline - time.monotonic()))
                self._handshake(sock, token)
                sock.settimeout(None)
                return sock
            except (OSError, EOFError, wire.HandshakeError) as e:
                sock.close()
                last = f"handshake failed: {e}"
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            except BenchError:
                sock.close()
                raise

    def _handshake(self, sock: socket.socket, token: str) -> None:
        hello = wire.recv_json(sock)
        if hello.get("proto") != wire.PROTO:
            raise BenchError(f"rank {self.rank}: the process at {self.addr}:{self.port} is not an ncclbench "
                             f"rendezvous; choose another port with NCCLBENCH_MASTER_PORT", ExitCode.INVALID_USAGE)
        cn = wire.nonce()
        wire.send_json(sock, {"proto": wire.PROTO, "rank": self.rank, "size": self.size, "host": self.host,
                              "pid": os.getpid(), "cnonce": cn,
                              "mac": wire.mac(token, "c", hello.get("nonce"), cn, self.rank, self.size)})
        reply = wire.recv_json(sock)
        where = f"rank 0 at {self.addr}:{self.port} ({hello.get('host', '?')})"
        if not reply.get("ok"):
            err = str(reply.get("error", "refused"))
            hint = ""
            if err == "token mismatch":
                hint = ("; every rank needs the same NCCLBENCH_TOKEN (or none), and no other job may use "
                        "this port (NCCLBENCH_MASTER_PORT)")
            raise BenchError(f"rank {self.rank}: {where} refused this process: {err}{hint}", ExitCode.INVALID_USAGE)
        if not wire.mac_ok(wire.mac(token, "s", cn, hello.get("nonce")), reply.get("mac")):
            raise BenchError(f"rank {self.rank}: {where} does not hold this job's token (another job on the "
                             f"same port?); set NCCLBENCH_MASTER_PORT or NCCLBENCH_TOKEN", ExitCode.INVALID_USAGE)
        self.peers[0] = PeerInfo(str(hello.get("host", "?")), int(hello.get("pid", 0)), self.addr)
        left = hello.get("left_s")
        self.hub_left_s = float(left) if isinstance(left, (int, float)) else self.timeout_s

    def _read_loop(self) -> None:
        try:
            while True:
                kind, body = wire.recv_frame(self.sock)
                self.last_seen = time.monotonic()
                msg = wire.loads_trusted(body)
                tag = msg[0]
                if tag == "res":
                    with self.cond:
                        self.results[(msg[1], msg[2])] = msg[3]
                        self.cond.notify_all()
                elif tag == "welcome":
                    for r, (h, pid, a) in msg[1].items():
                        self.peers[r] = PeerInfo(h, pid, a)
                    self.welcome.set()
                elif tag == "fail":
                    self.fail(msg[2], msg[1], msg[3] if len(msg) > 3 else None, relayed=True)
        except Exception as e:
            if not self.closing:
                why = "it closed the connection" if isinstance(e, EOFError) else f"{type(e).__name__}: {e}"
                self.fail(f"rank {self.rank}: lost connection to rank 0 ({self.peers.get(0)}): {why}; "
                          f"rank 0 died or ended the job", status="interrupted")

    def _send(self, msg: tuple[object, ...]) -> None:
        body = wire.dumps(msg)
        with self.send_lock:
            wire.send_frame(self.sock, wire.KIND_PICKLE, body)

    def _heartbeat(self) -> None:
        while not self.closed.wait(self.heartbeat_s):
            if self.failure is not None:
                return
            if self.welcome.is_set() and time.monotonic() - self.last_seen > self.hb_timeout_s:
                self.fail(f"rank {self.rank}: rank 0 ({self.peers.get(0)}) silent for "
                          f"{self.hb_timeout_s:g} s (no heartbeat)")
                return
            try:
                self._send(("ping",))
            except OSError:
                return  # the reader reports the lost connection

    def op(self, cid: int, seq: int, name: str, arg: Any, payload: Any) -> Any:
        self.raise_failure()
        try:
            self._send(("op", cid, seq, name, arg, payload))
        except OSError as e:
            self.fail(f"rank {self.rank}: lost connection to rank 0 ({self.peers.get(0)}): {e}")
            self.raise_failure()
        bound = None if self.op_timeout_s is None else self.op_timeout_s + _GRACE_S
        return self.wait_result((cid, seq), bound, f"{name} #{seq}")

    def abort(self, code: int, message: str) -> None:
        try:
            self._send(("abort", code, message))
        except OSError:
            pass
        self.fail(f"rank {self.rank} aborted the job: {message}", code, "interrupted")

    def close(self) -> None:
        self.closing = True
        try:
            self._send(("bye",))
        except OSError:
            pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.closed.set()


class TcpHostComm(HostComm):
    """HostComm over the TCP rendezvous (see module docstring).

    `timeout_s` bounds the rendezvous (ranks that never arrive) and the
    heartbeat; `op_timeout_s` bounds each operation (default: `timeout_s`;
    None or 0: unbounded, deaths are still noticed through EOF/heartbeat).
    `listen_sock`: an already bound listening socket for rank 0 (ncclbench's
    own launcher passes one down, so no port can be stolen in between).
    """

    def __init__(self, rank: int, size: int, addr: str, port: int, token: str,
                 timeout_s: float = DEFAULT_TIMEOUT_S, *, op_timeout_s: float | None | str = "same",
                 heartbeat_s: float = HEARTBEAT_S, listen_sock: socket.socket | None = None):
        if size < 1 or not 0 <= rank < size:
            raise BenchError(f"rank {rank} is outside a world of {size}", ExitCode.INVALID_USAGE)
        if not token:
            raise BenchError("the TCP rendezvous needs a token", ExitCode.INVALID_USAGE)
        op_t: float | None = timeout_s if isinstance(op_timeout_s, str) else op_timeout_s
        self.rank, self.size = rank, size
        self._cid, self._seq = 0, 0
        if rank == 0:
            self._t: _Transport = _Hub(size, addr, port, token, timeout_s, op_t, heartbeat_s, listen_sock)
        else:
            self._t = _Link(rank, size, addr, port, token, timeout_s, op_t, heartbeat_s)
        self._owner = True
        atexit.register(self.close)

    @classmethod
    def _view(cls, transport: _Transport, cid: int, rank: int, size: int) -> TcpHostComm:
        self = cls.__new__(cls)
        self._t, self._cid, self._seq, self._owner = transport, cid, 0, False
        self.rank, self.size = rank, size
        return self

    def _op(self, name: str, arg: Any, payload: Any) -> Any:
        self._seq += 1
        return self._t.op(self._cid, self._seq, name, arg, payload)  # type: ignore[attr-defined]

    def _root(self, root: int) -> int:
        if not 0 <= root < self.size:
            raise ValueError(f"root {root} outside a communicator of {self.size}")
        return root

    # -- HostComm ----------------------------------------------------------------------
    def barrier(self) -> None:
        self._op("barrier", None, None)

    def allreduce(self, value: float, op: str) -> float:
        if op not in _OPS:
            raise ValueError(f"allreduce op must be sum, min or max, not {op!r}")
        return cast(float, self._op("allreduce", op, value))

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        return cast("list[Any] | None", self._op("gather", self._root(root), obj))

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self._op("bcast", self._root(root), obj if self.rank == root else None)

    def allgather(self, obj: Any) -> list[Any]:
        return cast("list[Any]", self._op("allgather", None, obj))

    def split(self, color: int, key: int) -> HostComm:
        cid, rank, size = self._op("split", None, (int(color), int(key)))
        return TcpHostComm._view(self._t, cid, rank, size)

    def abort(self, code: int = 1, message: str = "") -> None:
        """Tell every rank the job is over (they raise BenchError(code) naming this rank); returns."""
        self._t.abort(code, message or "abort requested")  # type: ignore[attr-defined]

    def close(self) -> None:
        if self._owner and not self._t.closed.is_set():
            atexit.unregister(self.close)
            self._t.close()  # type: ignore[attr-defined]

    # -- extras ------------------------------------------------------------------------
    @property
    def failure(self) -> BenchError | None:
        """The first failure noticed (None while the job is healthy)."""
        return self._t.failure

    def add_failure_callback(self, cb: Callable[[BenchError], None]) -> None:
        """Run `cb(error)` once, from a background thread, as soon as any rank fails
        (e.g. to abort a device wait that would otherwise hang)."""
        self._t.add_failure_callback(cb)

    def peer_hosts(self) -> dict[int, str]:
        """World rank -> host name, as learnt in the handshake."""
        return {r: p.host for r, p in self._t.peers.items()}
