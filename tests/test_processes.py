"""pid_alive: what the launcher's job watch and the store's "is the writer gone?" ask."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ncclbench.core.processes import pid_alive


def test_a_running_process_is_alive_and_an_ended_one_is_not():
    assert pid_alive(os.getpid())
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert pid_alive(p.pid)
    finally:
        p.kill()
    # killed but not yet reaped: a zombie has ended
    deadline = time.monotonic() + 10
    while pid_alive(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(p.pid)
    p.wait()
    assert not pid_alive(p.pid)  # reaped: the pid is gone
