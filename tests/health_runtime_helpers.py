"""Running `ncclbench health` with real processes for the runtime tests (not a test module):
start it, follow its per-round progress on stderr, find a rank's process to stop or kill."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def rank_pids(tag: str) -> dict[int, int]:
    """world rank -> pid of the health rank processes carrying NCCLBENCH_TEST_TAG=tag."""
    out: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = open(f"/proc/{entry}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{entry}/cmdline", "rb").read()
        except OSError:
            continue
        if f"NCCLBENCH_TEST_TAG={tag}".encode() not in env or b"health" not in cmd or b"python" not in cmd:
            continue
        for kv in env:
            if kv.startswith(b"PMI_RANK="):
                out[int(kv.split(b"=", 1)[1])] = int(entry)
    return out


class HealthRun:
    """`ncclbench health ...` in the background; stderr lines collected as they come."""

    def __init__(self, argv: list[str], env: dict[str, str], cmd_prefix: list[str] | None = None):
        self.tag = uuid.uuid4().hex[:12]
        full = dict(env, NCCLBENCH_TEST_TAG=self.tag, NCCLBENCH_HEALTH_PROGRESS="1", PYTHONUNBUFFERED="1")
        cmd = (cmd_prefix or []) + [PY, "-m", "ncclbench", "health", *argv]
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err_lines: list[str] = []
        self.out_lines: list[str] = []
        # both pipes read by threads of their own (communicate() would race the stderr reader for lines)
        self._readers = [threading.Thread(target=self._read, args=(src, dst), daemon=True)
                         for src, dst in ((self.proc.stderr, self.err_lines), (self.proc.stdout, self.out_lines))]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(src, dst: list[str]) -> None:
        for line in src:
            dst.append(line)

    def wait_for_line(self, text: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(text in line for line in self.err_lines):
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def finish(self, timeout_s: float) -> tuple[int, str, str, float]:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"health did not end within {timeout_s} s; stderr: {''.join(self.err_lines)}") from None
        for t in self._readers:  # the pipes close when the process and its children are gone
            t.join(timeout=10)
        return self.proc.returncode, "".join(self.out_lines), "".join(self.err_lines), time.monotonic() - self.t0
