"""bench/provenance.py: the order env NCCLBENCH_COMMIT > COMMIT file > git rev-parse > "?".

Why it matters: on the device machine .git arrives stale, so the file the operator writes must win
over git, and an explicit env must win over both."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("provenance", ROOT / "bench" / "provenance.py")
assert _spec and _spec.loader
prov = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prov)

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="no git on this machine")


def _repo(tmp: Path) -> str:
    """A one-commit git repo at tmp; returns its full HEAD."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp), "PATH": "/usr/bin:/bin"}
    for cmd in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "x"]):
        subprocess.run(["git", "-C", str(tmp), *cmd], check=True, env=env, capture_output=True)
    return subprocess.run(["git", "-C", str(tmp), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


@needs_git
def test_order_env_then_file_then_git(tmp_path):
    head = _repo(tmp_path)
    # git alone: short by default, full on request
    short = prov.commit(root=tmp_path, env={})
    assert head.startswith(short) and 4 <= len(short) < len(head)
    assert prov.commit(short=False, root=tmp_path, env={}) == head
    # a COMMIT file wins over git (the device's stale .git), as written, short or not
    (tmp_path / "COMMIT").write_text("abc1234\n")
    assert prov.commit(root=tmp_path, env={}) == "abc1234"
    assert prov.commit(short=False, root=tmp_path, env={}) == "abc1234"
    # the env wins over the file
    assert prov.commit(root=tmp_path, env={"NCCLBENCH_COMMIT": " feed999 "}) == "feed999"
    # an empty env or an empty file counts as absent
    (tmp_path / "COMMIT").write_text("\n")
    assert prov.commit(root=tmp_path, env={"NCCLBENCH_COMMIT": ""}) == short


def test_unknown_without_git_is_a_question_mark(tmp_path):
    # no env, no file, not a git tree: unknown, never guessed
    assert prov.commit(root=tmp_path / "nowhere", env={}) == "?"
    (tmp_path / "COMMIT").write_text("0ddba11")
    assert prov.commit(root=tmp_path, env={}) == "0ddba11"


def test_shell_scripts_read_the_same_answer(tmp_path):
    # `python3 bench/provenance.py` is how bench/*.sh record the commit: the env reaches it
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "provenance.py")], capture_output=True, text=True,
                       env={"NCCLBENCH_COMMIT": "cafe123", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0 and p.stdout.strip() == "cafe123"


def test_no_bench_script_asks_git_itself():
    # one source of truth: every bench script that records a commit goes through provenance.py
    offenders = [p.name for p in (ROOT / "bench").glob("*.*") if p.suffix in (".py", ".sh")
                 and p.name != "provenance.py" and "rev-parse" in p.read_text()]
    assert offenders == []
