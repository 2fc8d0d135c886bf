"""The README's set-up and install lines, run as written, in a copy of this checkout
(issue 24 item 1): the main job installs its runtime extras into a fresh .venv and runs
the CPU backend; a re-run needs no network (pip is pointed at an unreachable index and
must not be called); the job leaves the NCCL environment alone; the install lines (from
the checkout, and from a built wheel) give a working `ncclbench` whose README CPU line runs.

Needs network access to PyPI once (as the README says); about a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """The text of the README section `## <title>...` up to the next `## `."""
    m = re.search(rf"^## {re.escape(title)}.*?$(.*?)(?=^## )", README, re.S | re.M)
    assert m, f"README has no section '{title}'"
    return m.group(1)


def code_lines(text: str) -> list[str]:
    """Command lines of the fenced blocks in `text`, comments and blank lines dropped."""
    lines = []
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        for line in block.splitlines():
            cmd = re.sub(r"\s+#\s.*$", "", line).strip()
            if cmd:
                lines.append(cmd)
    return lines


def test_readme_lines_parse():
    """What the test below runs is what the README says (and nothing else sets NCCL_*)."""
    assert code_lines(section("Set-up")) == ["scripts/run-benchmark.sh", "scripts/run-tests.sh"]
    install = code_lines(section("Install"))
    assert install and all(line.startswith("pip ") for line in install), install
    assert any("--backend mpi --nprocs 4" in line for line in code_lines(section("Usage")))
    script = (ROOT / "scripts" / "run-benchmark.sh").read_text()
    assert not re.search(r"^\s*(export\s+)?NCCL_\w+=|export [^\n]*NCCL_", script, re.M), "the main job sets NCCL_*"
    assert "test" not in re.findall(r"pip install[^\n]*", script)[0]


def copy_checkout(dst: Path) -> None:
    """This working tree's files (tracked and untracked, not ignored): a fresh clone with local edits."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():  # a copy without git: the tree less what it makes
        shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(
            ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", ".mypy_cache", ".ruff_cache", ".pytest_cache"))
        return
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"], check=True,
                           capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


def run(cmd: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.mpi
def test_readme_setup_and_install_as_written(tmp_path):
    clone = tmp_path / "ncclbench"
    copy_checkout(clone)
    env = {k: v for k, v in os.environ.items()  # NCCL_* too: what the run records is then the script's doing
           if not k.startswith(("NCCLBENCH_", "NCCL_", "VIRTUAL_ENV", "PYTHON", "OMPI_", "PMI_", "SLURM_", "MPI"))}
    env["PYTHON"] = sys.executable  # the interpreter the tests run on makes the .venv
    env["NCCLBENCH_DB"] = str(tmp_path / "r.sqlite")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if not p.startswith(str(Path(sys.executable).parent)))

    # Set-up step 1, as written (the CPU machine's run; a smaller sweep, passed on as the README says)
    main_job = code_lines(section("Set-up"))[0] + " -e 1M"
    first = run(main_job, clone, env)
    assert first.returncode == 0, (first.stdout[-3000:], first.stderr[-3000:])
    assert "# Out of bounds values : 0 OK" in first.stdout and "CPU backend" in first.stderr, first.stderr
    venv = clone / ".venv"
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                               capture_output=True, text=True, check=True).stdout
    names = {d["name"].lower() for d in json.loads(installed)}
    assert {"ncclbench", "mpi4py", "mpich"} <= names and not {"pytest", "mypy", "ruff"} & names, names

    # the re-run: no network (pip, if it ran, would fail on the unreachable index)
    offline = dict(env, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_FIND_LINKS="", PIP_NO_INDEX="1",
                   PIP_RETRIES="0", PIP_TIMEOUT="1")
    second = run(main_job, clone, offline)
    assert second.returncode == 0, second.stderr[-3000:]
    with sqlite3.connect(env["NCCLBENCH_DB"]) as c:
        envs = [json.loads(e) for (e,) in c.execute("SELECT env FROM runs")]
    assert len(envs) == 2 and not any("NCCL_NVLS_ENABLE" in e for e in envs), envs

    # Install, as written: from the checkout; then (after an uninstall) from a wheel built from it
    venv_env = dict(env, PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv))
    origin = ("python -c 'import importlib.metadata as m, ncclbench; "
              "print(ncclbench.__file__, m.distribution(\"ncclbench\").read_text(\"direct_url.json\"))'")
    from_checkout, *from_wheel = code_lines(section("Install"))
    for lines, kind in (([from_checkout], "dir_info"), (from_wheel, ".whl")):
        assert run("pip uninstall -y -q ncclbench", clone, venv_env).returncode == 0
        for line in lines:
            done = run(line, clone, venv_env)
            assert done.returncode == 0, (line, done.stderr[-3000:])
        where = run(origin, tmp_path, venv_env).stdout
        assert "site-packages" in where and kind in where, where  # installed, not the checkout's src/
    # the README's CPU line with the installed wheel (a smaller sweep: later options win)
    cpu = next(line for line in code_lines(section("Usage")) if "--backend mpi --nprocs 4" in line)
    usage = run(cpu + " -e 1M", tmp_path, venv_env)
    assert usage.returncode == 0, usage.stderr[-3000:]
    assert usage.stdout.count("Rank  ") == 4 and "# Out of bounds values : 0 OK" in usage.stdout
