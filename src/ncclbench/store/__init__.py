"""Result store: every run kept in SQLite, imports of nccl-tests output,
comparisons and the regression gate.  See db.py for the layout, comparison.py
for the size-by-size compare, gate.py for the gate and the modules it is made of."""

from .db import ResultStore, RunHeader, StoredRun, default_db_path, env_that_matters
from .reporter import StoreReporter, store_imported

__all__ = ["ResultStore", "RunHeader", "StoredRun", "StoreReporter", "default_db_path",
           "env_that_matters", "store_imported"]
