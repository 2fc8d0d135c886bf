"""MPICH's collective algorithm controls, read and written through MPI_T.

mpi4py has no MPI_T interface, so the control variables (cvars) are reached
through ctypes in the very libmpi that mpi4py loaded (found in
/proc/self/maps): a cvar written here changes what that library does next.

Why MPI_T and not the environment: MPICH reads `MPIR_CVAR_*` from the
environment once, at MPI_Init, so one process could measure only one
setting.  Through MPI_T, `MPIR_CVAR_<COLL>_INTRA_ALGORITHM` (scope ALL_EQ:
every process must hold the same value) can be changed between two calls;
MPICH's `MPIR_<Coll>_impl` reads it on every call (measured:
bench/results/tune-mpich-probe.md).  The enumerated values and their names
come from MPICH itself (`MPI_T_enum_get_item`), never from a list kept here.

The ABI is MPICH's own (libmpi.so.12, `mpi.h` of the mpich wheel):
MPI_Datatype is an int, MPI_T_enum and MPI_T_cvar_handle are pointers.
"""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

from ..core.errors import UnsupportedError

MPI_SUCCESS = 0
MPI_THREAD_SINGLE = 0
MPI_T_SCOPE_NAMES = {60438: "constant", 60439: "readonly", 60440: "local", 60441: "group",
                     60442: "group_eq", 60443: "all", 60444: "all_eq"}
WRITABLE_SCOPES = ("local", "group", "group_eq", "all", "all_eq")

# ncclbench collective -> the MPICH collective whose algorithm cvar drives it.
MPICH_COLLECTIVE = {
    "all_reduce": "ALLREDUCE",
    "all_gather": "ALLGATHER",
    "broadcast": "BCAST",
    "reduce": "REDUCE",
    "reduce_scatter": "REDUCE_SCATTER_BLOCK",
    "alltoall": "ALLTOALL",
    "gather": "GATHER",
    "scatter": "SCATTER",
}


def algorithm_cvar(collective: str) -> str | None:
    """The intra-communicator algorithm cvar for an ncclbench collective
    (None: the CPU backend runs it as point-to-point messages, no choice)."""
    name = MPICH_COLLECTIVE.get(collective)
    return None if name is None else f"MPIR_CVAR_{name}_INTRA_ALGORITHM"


@dataclass(frozen=True)
class Cvar:
    """One control variable as MPICH describes it."""

    name: str
    index: int
    scope: str
    description: str
    choices: dict[str, int]  # enum item name -> value (empty: not an enum)

    @property
    def writable(self) -> bool:
        return self.scope in WRITABLE_SCOPES


_CHOICE_LINE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s+-\s")


def description_choices(description: str) -> dict[str, int]:
    """`name - text` lines of an MPICH cvar description -> {name: position}."""
    names = [m.group(1) for m in map(_CHOICE_LINE.match, description.splitlines()[1:]) if m]
    return {name: i for i, name in enumerate(names)}


def cvar_choices(cvar: Cvar | None) -> dict[str, int]:
    """Choice name -> value of an enumerated cvar (MPI_T enum if MPICH gives
    one, else its description); empty when the cvar is missing or not an enum."""
    if cvar is None:
        return {}
    return dict(cvar.choices) or description_choices(cvar.description)


def _loaded_libmpi() -> str | None:
    """Path of the libmpi already mapped into this process (mpi4py's)."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if "/libmpi" in path and ".so" in path and "abi" not in path:
                    return path
    except OSError:
        return None
    return None


class MpiT:
    """MPI_T control variables of the loaded MPICH (after MPI_Init)."""

    def __init__(self, path: str | None = None):
        from mpi4py import MPI  # noqa: F401  (loads libmpi and initialises MPI)

        path = path or _loaded_libmpi()
        if path is None:
            raise UnsupportedError("cannot find the libmpi that mpi4py loaded (needed for MPI_T)")
        lib = ctypes.CDLL(path)
        if not hasattr(lib, "MPI_T_cvar_write") or "MPICH" not in MPI.Get_library_version():
            raise UnsupportedError("tuning the CPU backend needs MPICH's MPI_T control variables "
                                   f"(loaded: {MPI.Get_library_version().splitlines()[0].strip()})")
        self.lib = lib
        provided = ctypes.c_int()
        self._check(lib.MPI_T_init_thread(MPI_THREAD_SINGLE, ctypes.byref(provided)), "MPI_T_init_thread")
        self._handles: dict[str, ctypes.c_void_p] = {}
        self._closed = False

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != MPI_SUCCESS:
            raise UnsupportedError(f"{what} failed (MPI_T error {rc})")

    def index(self, name: str) -> int | None:
        idx = ctypes.c_int()
        rc = self.lib.MPI_T_cvar_get_index(name.encode(), ctypes.byref(idx))
        return idx.value if rc == MPI_SUCCESS else None

    def info(self, name: str) -> Cvar | None:
        """The cvar's scope, description and enum choices, or None if MPICH has no such cvar."""
        idx = self.index(name)
        if idx is None:
            return None
        name_buf, desc_buf = ctypes.create_string_buffer(256), ctypes.create_string_buffer(4096)
        name_len, desc_len = ctypes.c_int(256), ctypes.c_int(4096)
        verbosity, datatype, bind, scope = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        enum = ctypes.c_void_p()
        self._check(self.lib.MPI_T_cvar_get_info(idx, name_buf, ctypes.byref(name_len), ctypes.byref(verbosity),
                                                 ctypes.byref(datatype), ctypes.byref(enum), desc_buf,
                                                 ctypes.byref(desc_len), ctypes.byref(bind), ctypes.byref(scope)),
                    f"MPI_T_cvar_get_info({name})")
        return Cvar(name, idx, MPI_T_SCOPE_NAMES.get(scope.value, str(scope.value)),
                    desc_buf.value.decode(errors="replace"), self._enum_items(enum))

    def _enum_items(self, enum: ctypes.c_void_p) -> dict[str, int]:
        if not enum.value:
            return {}
        num = ctypes.c_int()
        name_buf, name_len = ctypes.create_string_buffer(256), ctypes.c_int(256)
        self._check(self.lib.MPI_T_enum_get_info(enum, ctypes.byref(num), name_buf, ctypes.byref(name_len)),
                    "MPI_T_enum_get_info")
        items: dict[str, int] = {}
        for i in range(num.value):
            value = ctypes.c_int()
            item_buf, item_len = ctypes.create_string_buffer(256), ctypes.c_int(256)
            self._check(self.lib.MPI_T_enum_get_item(enum, i, ctypes.byref(value), item_buf, ctypes.byref(item_len)),
                        "MPI_T_enum_get_item")
            items[item_buf.value.decode()] = value.value
        return items

    def _handle(self, name: str) -> ctypes.c_void_p:
        handle = self._handles.get(name)
        if handle is None:
            idx = self.index(name)
            if idx is None:
                raise UnsupportedError(f"MPICH has no control variable {name}")
            handle, count = ctypes.c_void_p(), ctypes.c_int()
            self._check(self.lib.MPI_T_cvar_handle_alloc(idx, None, ctypes.byref(handle), ctypes.byref(count)),
                        f"MPI_T_cvar_handle_alloc({name})")
            self._handles[name] = handle
        return handle

    def read(self, name: str) -> int:
        value = ctypes.c_int()
        self._check(self.lib.MPI_T_cvar_read(self._handle(name), ctypes.byref(value)), f"MPI_T_cvar_read({name})")
        return value.value

    def write(self, name: str, value: int) -> None:
        """Set an int/enum cvar in this process (ALL_EQ cvars: every process must write the same)."""
        self._check(self.lib.MPI_T_cvar_write(self._handle(name), ctypes.byref(ctypes.c_int(value))),
                    f"MPI_T_cvar_write({name}={value})")

    def close(self) -> None:
        if self._closed:
            return
        for handle in self._handles.values():
            self.lib.MPI_T_cvar_handle_free(ctypes.byref(handle))
        self._handles.clear()
        self.lib.MPI_T_finalize()
        self._closed = True
