"""What a rank tells the process that started it, and what it writes before it ends.

Two small services that the result store (a rank's stored run) and the launch package (signals,
the job watch) both need: `register_last_words` / `run_last_words` (callbacks run once before a
process ends abnormally) and `note_for_launcher` (facts for ncclbench's launcher over the job's
Unix socket: who this rank is, its stored run, how it is ending). They live in a base module so
that neither the store nor the launch package imports the other to reach them (store -> launch
was the package loop of issue 23); `launch.shutdown` re-exports them.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

JOB_ENV = "NCCLBENCH_JOB"  # a per-job token on every process of a job ncclbench started
JOB_DIR_ENV = "NCCLBENCH_JOB_DIR"  # a directory where ranks leave notes for their launcher


# -- last words -----------------------------------------------------------------------------

_last_words: list[Callable[[str, str], None]] = []
_last_words_lock = threading.Lock()


def register_last_words(cb: Callable[[str, str], None]) -> Callable[[], None]:
    """`cb(status, reason)` runs (once, from whichever thread ends the process)
    before this process ends abnormally; returns a function that unregisters it."""
    with _last_words_lock:
        _last_words.append(cb)

    def unregister() -> None:
        with _last_words_lock:
            if cb in _last_words:
                _last_words.remove(cb)

    return unregister


def run_last_words(status: str, reason: str) -> None:
    """Run and forget every registered callback; errors are ignored (the process is ending)."""
    with _last_words_lock:
        cbs = list(_last_words)
        _last_words.clear()
    for cb in cbs:
        try:
            cb(status, reason)
        except Exception:
            pass


# -- the link to ncclbench's launcher ------------------------------------------------------------

_link: dict[str, Any] = {"sock": None, "facts": {}, "failed": False}
_link_lock = threading.RLock()  # re-entered when a signal handler reports while the main thread sends


def note_for_launcher(**facts: Any) -> None:
    """Tell ncclbench's launcher (when it started this process) who this rank is
    (rank=, host=, pid=), its stored run (run_id=, db=) or how it is ending
    (ending=).  Silent and harmless without such a launcher; see launch.jobwatch."""
    where = os.environ.get(JOB_DIR_ENV)
    token = os.environ.get(JOB_ENV)
    if not where or not token:
        return
    with _link_lock:
        if _link["failed"]:
            return
        known = _link["facts"]
        known.update({k: v for k, v in facts.items() if k in ("rank", "host", "pid")})
        if "rank" not in known:
            _link.setdefault("pending", []).append(facts)  # sent once the rank is known
            return
        if _link["sock"] is None:
            try:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(2.0)
                sock.connect(os.path.join(where, "launcher.sock"))
            except OSError:
                _link["failed"] = True
                return
            _link["sock"] = sock
            known.setdefault("pid", os.getpid())
            known.setdefault("host", socket.gethostname().split(".")[0])
            atexit.register(_say_exit)
            facts = {**known, **facts}
            for pending in _link.pop("pending", []):
                facts = {**pending, **facts}
        msg = {"token": token, "rank": known["rank"], **facts}
        try:
            _link["sock"].sendall(json.dumps(msg).encode() + b"\n")
        except OSError:
            _link["failed"] = True


def _say_exit() -> None:
    note_for_launcher(ending="exit")
