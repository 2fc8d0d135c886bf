"""Tune's environment lines when size bands disagree.

Why: on the CPU backend each one-size band won another MPICH algorithm, and tune printed four
bare `MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=` lines (and the .env file exported all four), though an
environment variable holds for every size: pasting or sourcing them kept only the last.  Now
each line says which sizes it holds for, and conflicting exports are commented out.
"""
from __future__ import annotations

from test_tune_emit import synthetic_result

from ncclbench.tune.emit import env_file, won_bands
from ncclbench.tune.outputs import print_env_lines

SLOW = [10.0, 10.1, 9.9, 10.0, 10.05]
FAST = [5.0, 5.1, 4.9, 5.0, 5.05]
LABELS = ("default", "Ring/LL", "Ring/Simple", "Tree/LL", "Tree/Simple", "auto/LL", "auto/Simple")


def _result(winners: dict[int, str]):
    times = {}
    for size, fast in winners.items():
        row = {label: list(SLOW) for label in LABELS}
        row[fast] = list(FAST)
        times[size] = row
    return synthetic_result(times)


def test_disagreeing_bands_say_their_sizes_and_are_not_all_exported(capsys) -> None:
    r = _result({1024: "Tree/LL", 8192: "Ring/Simple"})
    env = env_file(r)
    assert "export NCCL_ALGO=" not in env.replace("# export", "")  # nothing sourced blindly
    assert "# export NCCL_ALGO=allreduce:Tree" in env and "# export NCCL_ALGO=allreduce:Ring" in env
    print_env_lines(won_bands(r))
    out = capsys.readouterr().out.splitlines()
    assert not [line for line in out if line.startswith("NCCL_")], out  # no bare conflicting lines
    assert any(line.startswith("#   1 KiB .. 1 KiB: NCCL_ALGO=allreduce:Tree") for line in out), out
    assert any(line.startswith("#   8 KiB .. 8 KiB: NCCL_ALGO=allreduce:Ring") for line in out), out


def test_agreeing_bands_print_one_usable_line(capsys) -> None:
    r = _result({1024: "Tree/LL", 8192: "Tree/LL", 4096: "Tree/LL"})
    env = env_file(r)
    assert "\nexport NCCL_ALGO=allreduce:Tree" in env
    print_env_lines(won_bands(r))
    out = capsys.readouterr().out.splitlines()
    assert out.count("NCCL_ALGO=allreduce:Tree") == 1, out
