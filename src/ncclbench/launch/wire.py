"""Framing and the token handshake of the TCP rendezvous.

Frames are a 5-byte header (length, kind) and a body.  Before a peer is
authenticated only small JSON frames are read; pickled frames are accepted
only on connections whose handshake proved that both sides hold the same
token (HMAC challenge-response in both directions, compared with
`hmac.compare_digest`), so a stranger can neither feed us a pickle nor learn
the token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import pickle
import socket
import struct
from typing import Any

PROTO = "ncclbench-rdzv/1"
_HDR = struct.Struct("!IB")
KIND_JSON = ord("J")
KIND_PICKLE = ord("P")
PREAUTH_LIMIT = 64 * 1024
FRAME_LIMIT = 0xFFFFFFFF


class HandshakeError(Exception):
    """The other side is not one of ours (wrong token, wrong protocol, wrong job)."""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            if got == 0:
                raise EOFError("connection closed")
            raise ConnectionError("connection closed in the middle of a message")
        got += k
    return bytes(buf)


def recv_frame(sock: socket.socket, limit: int = FRAME_LIMIT) -> tuple[int, bytes]:
    """One frame; EOFError on a clean close between frames."""
    length, kind = _HDR.unpack(_recv_exact(sock, _HDR.size))
    if length > limit:
        raise HandshakeError(f"message of {length} bytes exceeds the limit of {limit}")
    body = _recv_exact(sock, length) if length else b""
    return kind, body


def send_frame(sock: socket.socket, kind: int, body: bytes) -> None:
    hdr = _HDR.pack(len(body), kind)
    if len(body) < 65536:
        sock.sendall(hdr + body)  # one segment for the many small messages
    else:
        sock.sendall(hdr)
        sock.sendall(body)


def send_json(sock: socket.socket, obj: dict[str, Any]) -> None:
    send_frame(sock, KIND_JSON, json.dumps(obj).encode())


def recv_json(sock: socket.socket) -> dict[str, Any]:
    kind, body = recv_frame(sock, PREAUTH_LIMIT)
    if kind != KIND_JSON:
        raise HandshakeError("expected a handshake message")
    try:
        obj = json.loads(body)
    except ValueError:
        raise HandshakeError("malformed handshake message") from None
    if not isinstance(obj, dict):
        raise HandshakeError("malformed handshake message")
    return obj


def dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def loads_trusted(body: bytes) -> Any:
    """Unpickle a frame from an authenticated peer (never call before the handshake)."""
    return pickle.loads(body)


def nonce() -> str:
    return os.urandom(16).hex()


def mac(token: str, *parts: object) -> str:
    msg = "|".join(str(p) for p in parts).encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def mac_ok(expected: str, got: object) -> bool:
    return isinstance(got, str) and hmac.compare_digest(expected.encode(), got.encode())
