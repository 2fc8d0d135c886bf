"""What the store commands share: the `--db` option and run references.

A run reference names a stored run (`12`, `latest`, `latest~1`, a baseline
name) or a file of nccl-tests output (`run.log`, `run.json`, `run.log#2` for
the second test of a log); `RunRefs` resolves them, opening the store only
when a reference needs it.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..core.errors import ArgumentError
from ..store.db import ResultStore, StoredRun, default_db_path
from ..store.importers import ImportedRun, load_file
from .base import CommandParser

DB_HELP = "result store file (default: $NCCLBENCH_DB, else $XDG_DATA_HOME/ncclbench/results.sqlite)"
REF_HELP = "run id, 'latest' (or latest~N), a baseline name, or an nccl-tests output file (FILE#N " \
           "picks the N-th test of a log)"


def add_db_option(parser: argparse.ArgumentParser, **kwargs: object) -> None:
    parser.add_argument("--db", metavar="PATH", help=DB_HELP, **kwargs)  # type: ignore[arg-type]


def add_in_place_option(parser: CommandParser, what: str) -> None:
    parser.add_argument("--in-place", action="store_true", help=f"{what} in-place columns")


def db_path(args: argparse.Namespace) -> Path:
    return Path(args.db).expanduser() if getattr(args, "db", None) else default_db_path()


def open_store(args: argparse.Namespace, *, create: bool = False) -> ResultStore:
    return ResultStore(db_path(args), create=create)


def placement(args: argparse.Namespace) -> str:
    """Which columns a comparison reads: `--in-place` or the out-of-place ones."""
    return "in_place" if getattr(args, "in_place", False) else "out_of_place"


class RunRefs:
    """Resolves run references, opening the store only when one is needed."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self._store: ResultStore | None = None

    @property
    def store(self) -> ResultStore:
        if self._store is None:
            path = db_path(self.args)
            if not path.exists():
                raise ArgumentError(f"no result store at {path} (nothing recorded yet; "
                                    "run a test or `ncclbench import FILE`)")
            self._store = ResultStore(path, create=False)
        return self._store

    def get(self, ref: str) -> StoredRun | ImportedRun:
        file_part, _, pick = ref.rpartition("#")
        if os.path.isfile(ref):
            return self._from_file(ref, None)
        if file_part and os.path.isfile(file_part):
            if not pick.isdigit() or int(pick) < 1:
                raise ArgumentError(f"bad run reference {ref!r}: use FILE#N with N >= 1")
            return self._from_file(file_part, int(pick))
        if ("/" in ref or ref.endswith((".txt", ".log", ".json", ".out"))) and not ref.isdigit():
            raise ArgumentError(f"no such file: {ref}")
        store = self.store
        return store.get_run(store.resolve(ref))

    def _from_file(self, path: str, pick: int | None) -> ImportedRun:
        runs = load_file(path, getattr(self.args, "collective", None))
        if pick is None:
            if len(runs) > 1:
                raise ArgumentError(f"{path} holds {len(runs)} tests; pick one with {path}#N "
                                    "or import the file and use run ids")
            return runs[0]
        if pick > len(runs):
            raise ArgumentError(f"{path} holds {len(runs)} test(s); there is no #{pick}")
        return runs[pick - 1]

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> RunRefs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
