"""The scan's control channel: one TCP connection from every rank to a coordinator.

The coordinator hands each rank its group for the round and collects what
the groups measured.  It is not MPI on purpose: a rank that dies or stops
must not take the control plane with it.  MPI collectives over the world
would hang on a stopped rank, and MPICH's launcher ends the whole job when a
rank is killed (measured: Hydra's proxy fails forwarding PMI traffic to the
dead process even with -disable-auto-cleanup).  Over TCP the coordinator
sees a dead rank as a closed connection (named at once: rank, host, pid) and
a stopped one as silence past the round's deadline, and keeps every result
that already arrived.  It runs in world rank 0, or outside the job
(`ncclbench health --serve`), which is where it survives a launcher that
tears the job down.

Frames are `launch.wire`'s; before anything is unpickled both sides prove
they hold the job's token (HMAC challenge-response in both directions).  What
travels after that is `messages`' typed messages: the channel encodes them on
send and decodes them on receipt, and drops what it cannot decode.
"""

from __future__ import annotations

import queue
import select
import socket
import threading
import time
from dataclasses import dataclass

from ...core.errors import BenchError, ExitCode
from ...launch import wire
from .messages import PROTO, Dead, Message, decode


@dataclass(frozen=True)
class RankInfo:
    rank: int
    host: str
    pid: int

    def __str__(self) -> str:
        return f"rank {self.rank} (host {self.host}, pid {self.pid})"


class CloseOrder:
    """The order in which the ranks' connections were closed by their ends, as the kernel saw it.

    When a launcher ends a whole job after one rank died (MPICH's Hydra SIGKILLs the rest a few
    ms later), the first close names the rank that died.  The reader threads cannot tell: they
    wake in the order the GIL and a loaded scheduler choose (CI, 2026-11-26: the killed rank 3
    was named after rank 4), and TCP_INFO keeps no time of a FIN.  An epoll set watching only
    the peers' hang-ups does: its ready list is filled in the order the hang-ups arrived, however
    late its thread reads it.  Linux only; elsewhere the readers' wake-up times stand in."""

    def __init__(self) -> None:
        self._ep = select.epoll() if hasattr(select, "epoll") else None
        self._fd_rank: dict[int, int] = {}
        self.order: dict[int, int] = {}  # rank -> position among the closes seen
        self._lock = threading.Lock()
        if self._ep is not None:
            threading.Thread(target=self._loop, daemon=True, name="health-close-order").start()

    def watch(self, rank: int, sock: socket.socket) -> None:
        if self._ep is None:
            return
        with self._lock:
            self._fd_rank[sock.fileno()] = rank
            self._ep.register(sock.fileno(), select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLET)

    def _loop(self) -> None:
        assert self._ep is not None
        while True:
            try:
                events = self._ep.poll(1.0)
            except (OSError, ValueError):  # closed with the coordinator
                return
            with self._lock:
                for fd, _ in events:
                    rank = self._fd_rank.pop(fd, None)
                    if rank is not None:
                        self.order.setdefault(rank, len(self.order))
                    try:
                        self._ep.unregister(fd)
                    except (OSError, ValueError):
                        pass

    def position(self, rank: int, wait_s: float = 0.0) -> int | None:
        """Where this rank's close came among those seen (waiting up to wait_s for the watcher)."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                if rank in self.order or self._ep is None:
                    return self.order.get(rank)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)

    def close(self) -> None:
        if self._ep is not None:
            self._ep.close()


class Coordinator:
    """The server side: accepts `size` ranks, sends them work, gathers what they send."""

    def __init__(self, size: int, token: str, bind: str = "0.0.0.0", port: int = 0):
        self.size, self.token = size, token
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((bind, port))
        self._listener.listen(min(4096, max(16, size)))
        self.port = self._listener.getsockname()[1]
        self.ranks: dict[int, RankInfo] = {}
        self.dead: dict[int, tuple[float, str]] = {}  # rank -> (monotonic time, why)
        self.inbox: queue.Queue[tuple[int, Message]] = queue.Queue()
        self._socks: dict[int, socket.socket] = {}
        self.closes = CloseOrder()
        self._lock = threading.Lock()
        self._closing = False
        self._joined = threading.Condition(self._lock)
        threading.Thread(target=self._accept_loop, daemon=True, name="health-accept").start()

    # -- joining ----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True, name="health-serve").start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            challenge = wire.nonce()
            wire.send_json(conn, {"proto": PROTO, "challenge": challenge})
            hello = wire.recv_json(conn)
            rank, host, pid = int(hello["rank"]), str(hello["host"]), int(hello["pid"])
            if not wire.mac_ok(wire.mac(self.token, "hello", challenge, rank, host, pid), hello.get("mac")):
                raise wire.HandshakeError("token mismatch")
            wire.send_json(conn, {"mac": wire.mac(self.token, "welcome", hello.get("challenge"), rank)})
            conn.settimeout(None)
        except (OSError, ValueError, KeyError, EOFError, wire.HandshakeError, ConnectionError):
            conn.close()
            return
        with self._lock:
            if rank in self._socks or not 0 <= rank < self.size:
                conn.close()
                return
            self.ranks[rank] = RankInfo(rank, host, pid)
            self._socks[rank] = conn
            self.closes.watch(rank, conn)
            self._joined.notify_all()
        self._read_loop(rank, conn)

    def wait_joined(self, timeout_s: float) -> None:
        """Every rank connected, or a BenchError naming the missing ones."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while len(self.ranks) < self.size:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(self.size)) - set(self.ranks))
                    shown = ", ".join(map(str, missing[:16])) + (" ..." if len(missing) > 16 else "")
                    raise BenchError(f"health: {len(self.ranks)} of {self.size} ranks reached the coordinator "
                                     f"within {timeout_s:.0f} s; missing rank(s) {shown}", ExitCode.TIMEOUT)
                self._joined.wait(left)

    # -- traffic ------------------------------------------------------------------------------
    def _read_loop(self, rank: int, conn: socket.socket) -> None:
        try:
            while True:
                kind, body = wire.recv_frame(conn)
                msg = decode(wire.loads_trusted(body)) if kind == wire.KIND_PICKLE else None
                if msg is not None:
                    self.inbox.put((rank, msg))
        except (OSError, EOFError, ConnectionError, ValueError):
            pass
        # when this reader woke to the close: the order in which the kernel woke the readers is the
        # order the closes arrived in, up to scheduling delay.  (TCP_INFO's tcpi_last_ack_recv is not
        # the FIN's time: it stays at the last ACK of data this side sent - the last round's message,
        # about the same for every rank - and named the wrong rank after a kill in CI, 2026-11-26.)
        when = time.monotonic()
        with self._lock:
            if not self._closing and rank not in self.dead:
                self.dead[rank] = (when, "its connection closed (process ended)")
        self.inbox.put((rank, Dead()))

    def death_key(self, rank: int) -> tuple[float, float]:
        """Sort key of a dead rank: the kernel's order of the closes (`CloseOrder`), then the
        reader's wake-up time."""
        pos = self.closes.position(rank, wait_s=0.2)
        return (float("inf") if pos is None else float(pos), self.dead.get(rank, (float("inf"), ""))[0])

    def send(self, rank: int, msg: Message) -> bool:
        sock = self._socks.get(rank)
        if sock is None or rank in self.dead:
            return False
        try:
            wire.send_frame(sock, wire.KIND_PICKLE, wire.dumps(msg.encode()))
            return True
        except OSError:
            return False

    def receive(self, timeout_s: float) -> tuple[int, Message] | None:
        try:
            return self.inbox.get(timeout=max(0.0, timeout_s))
        except queue.Empty:
            return None

    def close(self) -> None:
        with self._lock:
            self._closing = True
        self.closes.close()
        try:
            self._listener.close()
        except OSError:
            pass
        for sock in list(self._socks.values()):
            try:
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            except OSError:
                pass


class RankLink:
    """A rank's connection to the coordinator."""

    def __init__(self, addr: str, port: int, token: str, info: RankInfo, timeout_s: float = 60.0):
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while True:
            try:
                self.sock = socket.create_connection((addr, port), timeout=min(10.0, timeout_s))
                break
            except OSError as exc:
                last = exc
                if time.monotonic() > deadline:
                    raise BenchError(f"health: cannot reach the coordinator at {addr}:{port} ({last})",
                                     ExitCode.TIMEOUT) from None
                time.sleep(0.2)
        try:
            greet = wire.recv_json(self.sock)
            if greet.get("proto") != PROTO:
                raise wire.HandshakeError("not a health coordinator")
            mine = wire.nonce()
            wire.send_json(self.sock, {"rank": info.rank, "host": info.host, "pid": info.pid, "challenge": mine,
                                       "mac": wire.mac(token, "hello", greet.get("challenge"), info.rank,
                                                       info.host, info.pid)})
            welcome = wire.recv_json(self.sock)
            if not wire.mac_ok(wire.mac(token, "welcome", mine, info.rank), welcome.get("mac")):
                raise wire.HandshakeError("the coordinator does not hold this job's token")
        except (OSError, EOFError, ConnectionError, wire.HandshakeError) as exc:
            self.sock.close()
            raise BenchError(f"health: handshake with the coordinator at {addr}:{port} failed: {exc}",
                             ExitCode.INVALID_USAGE) from None
        self.sock.settimeout(None)
        self._send_lock = threading.Lock()

    def send(self, msg: Message) -> None:
        with self._send_lock:
            wire.send_frame(self.sock, wire.KIND_PICKLE, wire.dumps(msg.encode()))

    def recv(self, timeout_s: float | None = None) -> Message:
        """The next message; EOFError when the coordinator is gone, TimeoutError when
        nothing came for `timeout_s`."""
        self.sock.settimeout(timeout_s)
        try:
            while True:
                kind, body = wire.recv_frame(self.sock)
                msg = decode(wire.loads_trusted(body)) if kind == wire.KIND_PICKLE else None
                if msg is not None:
                    return msg
        except TimeoutError:
            raise TimeoutError from None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
