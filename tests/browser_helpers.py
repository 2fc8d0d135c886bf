"""A page in a real headless browser (Debian's chromium): the report tests' screenshot."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def screenshot(html_path: Path, tmp_path: Path, height: int = 1600) -> Path:
    """Render `html_path` at 1200 x `height` px and return the PNG (named after the page).
    No chromium fails the test: the report tests need it (CI installs it)."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: the report test needs Debian's `chromium` package "
                    "(apt-get install -y chromium)")
    png = tmp_path / f"{html_path.stem}.png"
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'chrome-profile'}", f"--screenshot={png}",
           f"--window-size=1200,{height}", f"file://{html_path}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert png.exists(), f"chromium wrote no screenshot (rc={proc.returncode}): {proc.stderr[-2000:]}"
    return png
