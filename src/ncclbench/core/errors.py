"""Exit codes and the one exception type that reaches the command line.

nccl-tests' exit statuses are part of the contract scripts rely on
(docs/behaviour.md §1.6), so every failure path raises `BenchError` with one of
these codes; the CLI prints its message as one line on stderr and exits with
the code.  No traceback ever reaches the user for an anticipated failure.
"""

from __future__ import annotations

import sys
from enum import IntEnum
from typing import TextIO


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1  # internal error (e.g. alltoallv matrix problems)
    CUDA_ERROR = 2
    NCCL_ERROR = 3
    TIMEOUT = 4
    NOT_IMPLEMENTED = 5  # too few GPUs, feature the backend/library lacks
    INVALID_USAGE = 6
    DATA_ERRORS = 7  # completed, but wrong results or below NCCL_TESTS_MIN_BW
    # `ncclbench health` confirmed a faulty GPU, node, NIC rail or link: a code of its own,
    # outside nccl-tests' 0-7 and 255, so automation tells "the fabric has a bad part" from
    # "the tool failed"
    FAULTS_FOUND = 8
    # A verdict could not be reached, and saying "ok" or "healthy" would be a guess: `check` found the
    # checked run far noisier than its baseline ("unstable candidate: cannot confirm; re-run"), or
    # `ncclbench health` confirmed no fault but could not judge everything (a group with no fleet,
    # baseline or ceiling to compare with, an unconfirmed suspect, a host not tested; its
    # `--accept-not-judged` makes that 0).  Outside nccl-tests' codes and not 0, so automation
    # re-runs or looks instead of passing or failing.
    NOT_JUDGED = 9
    ARGUMENT = 255  # bad command-line values


class BenchError(Exception):
    """An anticipated failure: printed as one line, exits with `code`."""

    def __init__(self, message: str, code: ExitCode = ExitCode.INTERNAL, *, all_ranks: bool = False):
        super().__init__(message)
        self.code = ExitCode(code)
        # True when every rank raises the same error by itself (a check of the
        # options, say): then no rank needs to be aborted to stop the job.
        self.all_ranks = all_ranks

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class ArgumentError(BenchError):
    def __init__(self, message: str):
        super().__init__(message, ExitCode.ARGUMENT)


class UnsupportedError(BenchError):
    """The backend or library cannot honour an option (exit 5, like nccl-tests' 'not implemented')."""

    def __init__(self, message: str):
        super().__init__(message, ExitCode.NOT_IMPLEMENTED)


def print_error(exc: BenchError, stream: TextIO | None = None) -> int:
    """The one way an anticipated failure reaches the user: `ncclbench: <message>`
    as one line on stderr.  Returns the exit status to end with."""
    print(f"ncclbench: {exc.message}", file=sys.stderr if stream is None else stream, flush=True)
    return int(exc.code)
