"""The command layer: every command module has the declared shape, the
dispatcher finds commands by file name, and errors end as one line."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from ncclbench import commands
from ncclbench.commands.base import CommandParser, make_parser
from ncclbench.core.errors import ArgumentError

STORE_AND_TOOLS = {"history", "show", "import", "compare", "check", "baseline", "report", "list",
                   "preflight", "version", "explain", "topo"}


def test_the_commands_are_found_by_file_name():
    names = set(commands.command_names())
    assert STORE_AND_TOOLS <= names
    assert not {n for n in names if n.startswith("_") or n == "base"}
    assert commands.find_command("import").NAME == "import"  # import_.py: a keyword as file name
    assert commands.find_command("all_reduce_perf") is None  # a collective is not a command


@pytest.mark.parametrize("name", sorted(STORE_AND_TOOLS))
def test_every_command_module_has_the_declared_shape(name):
    module = commands.find_command(name)
    assert module.NAME == name and isinstance(module.HELP, str) and "\n" not in module.HELP
    assert callable(module.run)
    parser = make_parser(module)
    assert isinstance(parser, CommandParser) and parser.prog == f"ncclbench {name}"


def test_a_usage_error_is_one_argument_error_naming_the_command():
    parser = make_parser(commands.find_command("history"))
    with pytest.raises(ArgumentError) as e:
        parser.parse_args(["--limit", "x"])
    assert e.value.message.startswith("history: argument --limit") and e.value.code == 255


def test_dispatcher_prints_one_line_and_returns_255(capsys):
    assert commands.main(["history", "--format", "yaml"]) == 255
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ncclbench: history: argument --format")


def test_a_new_command_module_plugs_in(tmp_path, monkeypatch, capsys):
    """A module dropped into the package is a command, with no registration."""
    (tmp_path / "hello.py").write_text(
        "NAME = 'hello'\nHELP = 'say hello'\n"
        "def add_arguments(parser):\n    parser.add_argument('--to', default='world')\n"
        "def run(args):\n    print('hello', args.to)\n    return 3\n")
    monkeypatch.setattr(commands, "__path__", [*commands.__path__, str(tmp_path)])
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    real = importlib.import_module

    def import_module(name, package=None):
        if name == "ncclbench.commands.hello":
            return real("hello")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    assert "hello" in commands.command_names()
    assert commands.main(["hello", "--to", "you"]) == 3
    assert capsys.readouterr().out == "hello you\n"
    assert commands.main(["--help"]) == 0
    assert "hello  " in capsys.readouterr().out


def test_help_of_a_command_exits_zero(capsys):
    assert commands.main(["compare", "-h"]) == 0
    assert "usage: ncclbench compare" in capsys.readouterr().out


def test_version_names_the_library_and_driver_fast_and_cleanly(ncclbench_env):
    import time

    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "ncclbench", "--version"], capture_output=True, text=True,
                       env=ncclbench_env, timeout=60)
    took = time.monotonic() - t0
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    from ncclbench import __version__

    assert lines[0] == f"ncclbench {__version__}"
    assert lines[1].startswith("libnccl: ") and lines[2].startswith("driver: ")
    from ncclbench.backends.select import nccl_available

    lib = nccl_available()
    assert (lib in lines[1]) if lib else "not found (" in lines[1]
    assert took < 20


def test_version_without_a_libnccl_says_not_found(ncclbench_env, tmp_path):
    env = dict(ncclbench_env, NCCLBENCH_NCCL_LIB=str(tmp_path / "none" / "libnccl.so.2"))
    p = subprocess.run([sys.executable, "-m", "ncclbench", "--version"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0 and "Traceback" not in p.stderr
    assert p.stdout.splitlines()[1].startswith("libnccl: not found (")


def test_version_lines_report_the_driver(monkeypatch):
    from ncclbench.commands import version
    from ncclbench.launch import facts

    monkeypatch.setattr(facts, "cuda_driver_version", lambda: "13.0")
    monkeypatch.setattr(facts, "driver_version", lambda: "580.65.06")
    assert version.version_lines()[2] == "driver: CUDA 13.0 (NVIDIA kernel module 580.65.06)"
    monkeypatch.setattr(facts, "cuda_driver_version", lambda: None)
    monkeypatch.setattr(facts, "driver_version", lambda: None)
    assert version.version_lines()[2] == "driver: not found (no NVIDIA driver)"


def test_parser_base_is_argparse():
    assert issubclass(CommandParser, argparse.ArgumentParser)
