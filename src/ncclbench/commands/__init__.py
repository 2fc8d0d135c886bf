"""The command line: `ncclbench <collective> [nccl-tests options]` runs a
benchmark exactly like the nccl-tests binary of that name; `ncclbench
<command> ...` runs one of the tools on top (list, preflight, history, ...).

Adding a command
----------------
One module `ncclbench/commands/<name>.py` defining (a name that is a Python
keyword or builtin gets a trailing underscore, which the command drops:
`import_.py` is `ncclbench import`, `list_.py` is `ncclbench list`):

    NAME = "<name>"                      # what the user types
    HELP = "one line"                    # in `ncclbench --help` and `<name> -h`

    def add_arguments(parser: CommandParser) -> None:   # argparse declarations
        parser.add_argument(...)

    def run(args: argparse.Namespace) -> int:           # the exit status
        ...

Nothing else registers it: the dispatcher finds the module by its file name
(modules starting with `_`, and `base`, are helpers, not commands).  Rules:

* Anticipated failures raise `BenchError`/`ArgumentError` (`ncclbench.core.errors`)
  with nccl-tests' exit code; the dispatcher prints them as one line
  (`core.errors.print_error`).  Usage errors from the parser exit 255.
* Import what the command needs inside `run()` (or keep module-level imports
  light): `ncclbench --help` imports every command module.
* Machine output on stdout (or a file), progress on stderr only on a terminal.
* A command that forms a job (several ranks) does it through `ncclbench.launch`;
  spawned children run `python -m ncclbench <name> ...` again.

`main(argv) -> int` is the dispatcher (`ncclbench.cli:main`, the console
entry point, delegates here).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from types import ModuleType
from typing import cast

from .. import __version__
from ..core.errors import BenchError, ExitCode, print_error
from .base import PROGRAM, Command, make_parser

_HELPERS = frozenset({"base"})


def _command_modules() -> dict[str, str]:
    """command name -> module name, for every command module of this package."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_") and info.name not in _HELPERS:
            found[info.name.removesuffix("_")] = info.name
    return found


def command_names() -> list[str]:
    """Every command this package holds, sorted."""
    return sorted(_command_modules())


def find_command(name: str) -> Command | None:
    """The module of command `name`, or None when no command has that name."""
    module_name = _command_modules().get(name)
    if module_name is None:
        return None
    module: ModuleType = importlib.import_module(f"{__name__}.{module_name}")
    return cast(Command, module)


def top_level_help() -> str:
    from ..collectives import COLLECTIVES

    commands = [cast(Command, find_command(n)) for n in command_names()]
    width = max(len(c.NAME) for c in commands)
    listed = "\n".join(f"  {c.NAME:<{width}}  {c.HELP}" for c in commands)
    return f"""{PROGRAM} {__version__}: nccl-tests-compatible collective benchmarks, no build step.

usage:
  {PROGRAM} <collective> [nccl-tests options]   run a benchmark, e.g.
      {PROGRAM} all_reduce_perf -b 8 -e 8G -f 2      (one process per visible GPU)
      mpirun -np 16 {PROGRAM} all_reduce -b 8 -e 8G -f 2 -g 1
      {PROGRAM} all_reduce -b 8 -e 64M -f 2 --nprocs 4 --backend mpi   (CPU backend)
  {PROGRAM} <collective> -h                     the nccl-tests option list (+ {PROGRAM}'s own)
  {PROGRAM} <command> [options]                 one of the commands below (-h for its options)
  {PROGRAM} --version                           version, the libnccl it would load, the CUDA driver

commands:
{listed}

collectives: {", ".join(COLLECTIVES)}
(each also answers to its nccl-tests binary name, e.g. all_reduce_perf)

exit codes: 0 ok, 1 internal, 2 CUDA, 3 NCCL, 4 timeout, 5 not supported,
            6 invalid usage, 7 wrong results / bandwidth gate / --fail-on-trap,
            8 `health` found faults (a GPU, node, NIC rail or link to act on),
            9 not judged (`check`: the checked run far noisier than its baseline; re-run), 255 bad arguments,
            128+N ended by signal N (130 SIGINT, 143 SIGTERM); like nccl-tests, an
            unknown option of a collective prints its usage and exits 0 (a mistyped
            ncclbench option: one line, 'did you mean', 255)
"""


def run_command(command: Command, argv: list[str]) -> int:
    """Parse `argv` with the command's parser and run it."""
    parser = make_parser(command)
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # -h/--help printed its text
        return int(done.code or 0)
    return int(command.run(args))


def _collective_first(argv: list[str]) -> list[str]:
    """The benchmark's command line with the collective first: options may precede it
    (`ncclbench --nprocs 8 all_reduce_perf ...`).  A first word that names neither a
    command nor a collective is one line, with the likely name (exit 255)."""
    from ..collectives import COLLECTIVES, lookup
    from ..core.errors import ArgumentError
    from ..run.bench_args import did_you_mean, split_leading_options

    if argv[0].startswith("-"):
        found = split_leading_options(argv)
        if found is None:
            raise ArgumentError(f"no collective or command in '{' '.join(argv)}' (usage: {PROGRAM} [options] "
                                f"<collective> [options], or {PROGRAM} <command> ...; see {PROGRAM} --help)")
        return [found[0], *found[1]]
    if lookup(argv[0]) is None and "/" not in argv[0]:
        names = [*command_names(), *COLLECTIVES, *(f"{c}_perf" for c in COLLECTIVES)]
        guess = did_you_mean(argv[0].lower(), names)
        hint = f" (did you mean '{guess}'?)" if guess else ""
        raise ArgumentError(f"unknown collective or command '{argv[0]}'{hint}; see '{PROGRAM} --help'")
    return argv


def main(argv: list[str] | None = None) -> int:
    """Run one command line (without the program name); return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv or argv[0] in ("-h", "--help", "help"):
            print(top_level_help(), end="")
            return 0
        name = "version" if argv[0] == "--version" else argv[0]
        command = find_command(name)
        if command is not None:
            return run_command(command, argv[1:])
        argv = _collective_first(argv)
        from ..cuda import driver_warmup

        if driver_warmup.wanted(argv[1:]):  # cuInit overlaps the imports below (driver_warmup's docstring)
            driver_warmup.start()
        from ._benchmark import run_benchmark

        return run_benchmark(argv[0], argv[1:])
    except BenchError as exc:
        return print_error(exc)
    except KeyboardInterrupt:
        print(f"{PROGRAM}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return int(ExitCode.OK)
