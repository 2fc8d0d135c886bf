"""Whether a process is still there: the launcher's job watch (which ranks are left to
end) and the result store (is a "running" run's writer gone?) ask the same question."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while `pid` exists and has not ended.  A zombie (ended, not yet reaped by its
    parent) has ended; a process of another user still exists (EPERM)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:  # it ended between the two looks
        return False
    except OSError:  # no procfs here: kill() said it exists
        return True
    return data[data.rfind(b")") + 2:][:1] != b"Z"
