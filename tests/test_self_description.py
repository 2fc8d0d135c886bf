"""The project speaks of itself, not of how it was made.

Why: a reader of a comment, a result file or its name needs the measurement (its date, machine and
commit), not which numbered working period or which person produced it; such words age into noise
and once leaked into some 56 places.  This keeps them out of every tracked file and file name.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# numbered working periods and who ran what (examples in test_pattern_catches_what_it_is_for; this
# file, which must spell them, is the one file not scanned)
_WORDS = re.compile(r"\b[Ss]essions? ?[0-9]|\b[Vv]isits? ?[0-9]|\bs[0-9]v[0-9]|[-_]s[0-9]+[-.]"
                    r"|\b[Tt]he lead\b|\blead's\b|\bstop hook\b")
_THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()


def _tracked() -> list[str]:
    """Tracked files of the checkout (skips where this is no git checkout, e.g. an sdist)."""
    p = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout:
        pytest.skip("not a git checkout: no list of tracked files")
    return [f for f in p.stdout.split("\0") if f]


def _hits(name: str) -> list[str]:
    """Lines of one tracked file (and its name) that describe how the project was made."""
    out = [f"{name}: file name"] if _WORDS.search(name) else []
    try:
        text = (ROOT / name).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return out
    return out + [f"{name}:{i}: {line.strip()[:120]}" for i, line in enumerate(text.splitlines(), 1)
                  if _WORDS.search(line)]


def test_pattern_catches_what_it_is_for() -> None:
    for bad in ("(session 4)", "gpu-h200x4-2026-11-21-session2.md", "visit 3b", "s7v5", "cpu-s9.md",
                "the lead writes", "lead's capture", "stop hook"):
        assert _WORDS.search(bad), bad
    for fine in ("a helper function", "timeout -s ABRT", "leading '#'", "the leader rank", "sessions of MPI",
                 "visit the page", "-s 9"):
        assert not _WORDS.search(fine), fine


def test_no_tracked_file_describes_how_it_was_made() -> None:
    hits = [h for name in _tracked() if name != _THIS for h in _hits(name)]
    assert not hits, "\n".join(hits[:40])
