"""Output files: checked before any work (`check_output_path`), then written whole or not
at all (`write_atomically`: a temporary file in the same directory, flushed to disk,
then renamed over the path).

Why: a reader that polls the path (node_exporter's textfile collector scraping
`--metrics`, a CI job reading `--junit`, a browser reloading a report, another rank
loading the kernel cache) must never see half a file, and a write that fails must
leave the old file as it was.  The temporary name starts with a dot and ends in
`.tmp`, so collectors that read `*.prom` or `*.xml` pass over it.  The check comes
first because a path that cannot take the file should cost one line (exit 255), not the
run or scan that was to fill it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import ArgumentError


def check_output_path(path: str | Path, label: str, hint: str = "") -> None:
    """Raise ArgumentError (one line naming `label`, the option or command) when `path`
    cannot take a file: it is a directory, or its directory is missing or not writable.
    `hint` follows "give a file name" (e.g. "like report.html")."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise ArgumentError(f"{label} {path}: is a directory; give a file name{' ' + hint if hint else ''}")
    if not os.path.isdir(directory):
        raise ArgumentError(f"{label} {path}: cannot write in {directory}: the directory does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ArgumentError(f"{label} {path}: cannot write in {directory}: not writable")


def write_atomically(path: str | Path, data: str | bytes, mode: int | None = None) -> None:
    """Replace `path` with `data` (str is written as UTF-8) in one rename.

    `mode`: the file's permission bits; None gives what a plain open() would
    (0o666 less the umask), since mkstemp's own 0o600 would hide a shared file."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
