"""One rule for files written whole or not at all (metrics, JUnit, HTML reports, the
kernel cache): the path holds the old or the new content, never a part, and no
temporary file stays behind."""

from __future__ import annotations

import os
import stat

import pytest

from ncclbench.core import atomic_file
from ncclbench.core.atomic_file import write_atomically


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_text_and_bytes_replace_the_file(tmp_path):
    p = tmp_path / "r.prom"
    write_atomically(p, "ü 1\n")
    assert p.read_bytes() == "ü 1\n".encode()
    write_atomically(str(p), b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01" and os.listdir(tmp_path) == ["r.prom"]


def test_mode_is_the_umasks_unless_given(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomically(tmp_path / "a.html", "x")
        write_atomically(tmp_path / "b.prom", "x", mode=0o644)
    finally:
        os.umask(old)
    assert mode_of(tmp_path / "a.html") == 0o640  # as open() would make it, not mkstemp's 0600
    assert mode_of(tmp_path / "b.prom") == 0o644


def test_a_failed_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    p = tmp_path / "r.xml"
    p.write_text("old")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_file.os, "replace", fail)
    with pytest.raises(OSError):
        write_atomically(p, "new")
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["r.xml"]


def test_output_path_checked_before_any_work(tmp_path):
    from ncclbench.core.atomic_file import check_output_path
    from ncclbench.core.errors import ArgumentError, ExitCode

    check_output_path(tmp_path / "ok.prom", "--metrics")  # a new file in a writable directory
    with pytest.raises(ArgumentError, match=r"^report -o .*: is a directory; give a file name like r\.html$") as e:
        check_output_path(tmp_path, "report -o", "like r.html")
    assert e.value.code == ExitCode.ARGUMENT
    with pytest.raises(ArgumentError, match="cannot write in .*/missing: the directory does not exist"):
        check_output_path(tmp_path / "missing" / "x.xml", "--junit")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root writes anywhere
        with pytest.raises(ArgumentError, match="not writable"):
            check_output_path(locked / "x.csv", "--csv")
