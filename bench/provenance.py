"""Which commit is this tree: the one answer every bench script records.

Why one function: on the device machine the working tree arrives with a stale .git (a visit's
`git rev-parse` printed an old commit), and a `git archive` copy has no .git at all, so the operator
writes the truth before the call. The order is: env NCCLBENCH_COMMIT (set for one run), else a
COMMIT file at the repo root (git-ignored, written before a device call), else `git rev-parse`,
else "?" (unknown, never guessed). Shell scripts read the same answer with
`python3 bench/provenance.py`.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "NCCLBENCH_COMMIT"
FILE = "COMMIT"


def commit(short: bool = True, root: Path = ROOT, env: Mapping[str, str] | None = None) -> str:
    """The commit of the tree at `root`: $NCCLBENCH_COMMIT > root/COMMIT > git rev-parse > "?".

    `short` only shapes git's answer (the env and the file are returned as written)."""
    given = (os.environ if env is None else env).get(ENV, "").strip()
    if given:
        return given
    f = root / FILE
    if f.is_file():
        text = f.read_text().strip()
        if text:
            return text
    try:
        p = subprocess.run(["git", "-C", str(root), "rev-parse", *(["--short"] if short else []), "HEAD"],
                           capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "?"


if __name__ == "__main__":
    print(commit(short="--long" not in sys.argv[1:]))
