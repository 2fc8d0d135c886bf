"""Write a file whole or not at all: a temporary file in the same directory, flushed
to disk, then renamed over the path.

Why: a reader that polls the path (node_exporter's textfile collector scraping
`--metrics`, a CI job reading `--junit`, a browser reloading a report, another rank
loading the kernel cache) must never see half a file, and a write that fails must
leave the old file as it was.  The temporary name starts with a dot and ends in
`.tmp`, so collectors that read `*.prom` or `*.xml` pass over it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
