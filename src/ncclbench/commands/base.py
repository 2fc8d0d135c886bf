"""What every `ncclbench <command>` shares: the argparse parser class and the
shape of a command module (see the package docstring for how to add one).

argparse's own manners do not fit a tool that scripts call: a usage error
prints the whole usage block and exits 2.  `CommandParser` turns it into an
`ArgumentError` instead, which the dispatcher prints as one line
(`ncclbench: <command>: <message>`) and exits 255, nccl-tests' code for bad
arguments.
"""

from __future__ import annotations

import argparse
from typing import NoReturn, Protocol

from ..core.errors import ArgumentError

PROGRAM = "ncclbench"


class CommandParser(argparse.ArgumentParser):
    """The one parser class of the command layer: errors are `ArgumentError`s."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix(PROGRAM).strip()
        raise ArgumentError(f"{command}: {message}" if command else message)


class Command(Protocol):
    """A command module, as the dispatcher sees it (module attributes)."""

    NAME: str  # what the user types after `ncclbench`
    HELP: str  # one line: `ncclbench --help` and the command's own -h

    def add_arguments(self, parser: CommandParser) -> None:
        """Declare the command's options and positionals on `parser`."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the work; return the exit status (raise BenchError for a failure)."""


def make_parser(command: Command) -> CommandParser:
    """The parser of one command, built from its module."""
    parser = CommandParser(prog=f"{PROGRAM} {command.NAME}", description=command.HELP)
    command.add_arguments(parser)
    return parser
