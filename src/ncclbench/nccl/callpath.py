"""How the timed loop calls libnccl: the one place where Python's per-call
cost shows in a measurement.

For a small message NCCL's own enqueue (a few µs of C) is what the host
clock sees; every call a collective makes from Python adds the binding's
overhead on top.  Measured on the 4xH200 host (bench/enqueue_cost.py,
bench/results/gpu-h200x4-2026-11-21-callpaths.md): ctypes with pre-converted
arguments costs 0.2-0.6 µs more per NCCL call than NVIDIA's Cython binding
`nccl4py` (broadcast, 1 call: 5.62 vs 5.06 µs per op; alltoallv, 8 calls: 9.30
vs 6.86, nccl-tests ~6.9), and nccl4py's own cost is ~0.1-0.15 µs per call
(gpu-h200x4-2026-11-21-hypercube.md).

Two call paths build the same closures from recorded NCCL calls:

* `Nccl4pyCallPath`: `nccl.bindings.nccl` (the low-level layer of the
  optional `nccl4py` wheel), used only when it drives *the very library*
  ncclbench loaded (same file, same version), so communicator handles are
  valid for it.
* `CtypesCallPath`: the stdlib fallback; argtype-less function objects
  with every argument converted once, before the clock starts.

`NCCLBENCH_CALLS=auto|nccl4py|ctypes` chooses (auto: nccl4py when usable).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.errors import ArgumentError, BenchError, ExitCode
from .binding import SIGNATURES, NcclError, NcclLibrary

# One recorded NCCL call: (NCCL function name, its C arguments as Python ints,
# the communicator handle for error messages or None).
RawCall = tuple[str, tuple[int, ...], "int | None"]
OnError = Callable[[NcclError], BaseException]

CALL_PATH_ENV = "NCCLBENCH_CALLS"
CALL_PATH_CHOICES = ("auto", "nccl4py", "ctypes")

# NCCL function -> nccl4py low-level function name.
_NCCL4PY_NAMES = {
    "ncclAllReduce": "all_reduce", "ncclBroadcast": "broadcast", "ncclReduce": "reduce",
    "ncclAllGather": "all_gather", "ncclReduceScatter": "reduce_scatter",
    "ncclAlltoAll": "allto_all", "ncclGather": "gather", "ncclScatter": "scatter",
    "ncclSend": "send", "ncclRecv": "recv",
    "ncclGroupStart": "group_start", "ncclGroupEnd": "group_end",
}


class CtypesCallPath:
    """Calls through ctypes with arguments converted once (no `argtypes`:
    ctypes then passes each pre-built c_void_p/c_size_t/c_int as is)."""

    def __init__(self, lib: NcclLibrary):
        self.lib = lib
        # A second CDLL object on the same already-open file: fresh function
        # objects whose argtypes stay unset (the library's own keep theirs).
        self._raw = ctypes.CDLL(lib.path, mode=ctypes.RTLD_GLOBAL)
        self._fns: dict[str, Callable[..., int]] = {}

    def _fn(self, name: str) -> Callable[..., int]:  # restype c_int: returns the ncclResult_t
        fn = self._fns.get(name)
        if fn is None:
            raw = getattr(self._raw, name)
            raw.restype = ctypes.c_int
            fn = self._fns[name] = raw
        return fn

    def describe(self) -> str:
        return "ctypes (pre-converted arguments)"

    @staticmethod
    def convert(name: str, args: tuple[int, ...]) -> tuple[object, ...]:
        """`args` as the C types of `name`'s signature.  Without argtypes ctypes
        would pass a bare Python int as a 32-bit C int, truncating counts and
        pointers, so every argument must arrive already typed."""
        argtypes = SIGNATURES[name][0]
        if len(argtypes) != len(args):
            raise TypeError(f"{name} takes {len(argtypes)} arguments, got {len(args)}")
        return tuple(t(v) for t, v in zip(argtypes, args))

    def build(self, calls: Sequence[RawCall], on_error: OnError) -> Callable[[], None]:
        lib = self.lib
        steps = [(self._fn(name), self.convert(name, args), name, comm) for name, args, comm in calls]
        if len(steps) == 1:
            fn, fargs, fname, fcomm = steps[0]

            def run_one() -> None:
                r = fn(*fargs)
                if r:
                    raise on_error(lib.error(fname, r, fcomm))

            return run_one
        frozen = tuple(steps)

        def run_all() -> None:
            for fn, fargs, fname, fcomm in frozen:
                r = fn(*fargs)
                if r:
                    raise on_error(lib.error(fname, r, fcomm))

        return run_all


class Nccl4pyCallPath:
    """Calls through nccl4py's Cython layer (GIL released around each call,
    ~10x less overhead than ctypes).  Failures arrive as its NCCLError with
    `.status`, turned into ncclbench's `NcclError` (same message as the
    ctypes path: error string and last error come from the library)."""

    def __init__(self, lib: NcclLibrary, module: Any, version: str):
        self.lib, self.module, self.version = lib, module, version
        self._comms: dict[int, Any] = {}

    @classmethod
    def open(cls, lib: NcclLibrary) -> tuple[Nccl4pyCallPath | None, str]:
        """The call path, or None and why it cannot be used."""
        try:
            import nccl.bindings.nccl as module
        except ModuleNotFoundError:
            return None, "nccl4py is not installed"
        except Exception as exc:  # a broken install
            return None, f"nccl4py is not importable ({type(exc).__name__}: {exc})"
        try:
            from importlib.metadata import version

            ver = version("nccl4py")
        except Exception:
            ver = "?"
        try:
            their_path = module.get_library_path()
            their_code = module.get_version()
        except Exception as exc:
            return None, f"nccl4py could not load libnccl ({type(exc).__name__}: {exc})"
        if not _same_file(their_path, lib.path) or their_code != lib.version_code:
            return None, (f"nccl4py drives {their_path} (version code {their_code}), not the loaded "
                          f"{lib.path} ({lib.version_code})")
        missing = [n for n in _NCCL4PY_NAMES.values() if not hasattr(module, n)]
        if missing:
            return None, f"nccl4py {ver} lacks {', '.join(missing)}"
        return cls(lib, module, ver), ""

    def describe(self) -> str:
        return f"nccl4py {self.version} (Cython)"

    def _comm(self, handle: int) -> object:  # an nccl4py Comm, only passed back to nccl4py
        c = self._comms.get(handle)
        if c is None:  # a plain wrapper: dropping it does not destroy the communicator
            c = self._comms[handle] = self.module.Comm(handle)
        return c

    def _args(self, name: str, args: tuple[int, ...]) -> tuple[object, ...]:
        # The communicator is the one pointer argument nccl4py wants wrapped;
        # it sits second to last (before the stream) in every call used here.
        if not args:
            return ()
        return (*args[:-2], self._comm(args[-2]), args[-1])

    def build(self, calls: Sequence[RawCall], on_error: OnError) -> Callable[[], None]:
        lib, nccl_error = self.lib, self.module.NCCLError
        steps = tuple((getattr(self.module, _NCCL4PY_NAMES[name]), self._args(name, args), name, comm)
                      for name, args, comm in calls)

        def fail(exc: Any, fname: str, fcomm: int | None) -> BaseException:
            return on_error(lib.error(fname, int(getattr(exc, "status", 0) or 0), fcomm))

        if len(steps) == 1:
            fn, fargs, fname, fcomm = steps[0]

            def run_one() -> None:
                try:
                    fn(*fargs)
                except nccl_error as exc:
                    raise fail(exc, fname, fcomm) from None

            return run_one

        def run_all() -> None:
            for fn, fargs, fname, fcomm in steps:
                try:  # free when nothing is raised (Python >= 3.11)
                    fn(*fargs)
                except nccl_error as exc:
                    raise fail(exc, fname, fcomm) from None

        return run_all


CallPath = CtypesCallPath | Nccl4pyCallPath


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def choose_call_path(lib: NcclLibrary, environ: Mapping[str, str] | None = None) -> tuple[CallPath, str]:
    """(call path, note): the note says why nccl4py was not used, or ''."""
    env = os.environ if environ is None else environ
    want = env.get(CALL_PATH_ENV, "auto").strip().lower() or "auto"
    if want not in CALL_PATH_CHOICES:
        raise ArgumentError(f"{CALL_PATH_ENV}={want!r}: choose one of {', '.join(CALL_PATH_CHOICES)}")
    note = ""
    if want != "ctypes":
        path, why = Nccl4pyCallPath.open(lib)
        if path is not None:
            return path, ""
        if want == "nccl4py":
            raise BenchError(f"{CALL_PATH_ENV}=nccl4py: {why}", ExitCode.INTERNAL)
        note = why
    return CtypesCallPath(lib), note


def timed_call_path(lib: NcclLibrary, environ: Mapping[str, str] | None = None) -> CallPath:
    """The call path of `lib`'s timed loop, chosen once per loaded library (kept
    on `lib.call_path`): nccl4py when it drives this very library, else ctypes;
    `lib.call_path_note` says why nccl4py was passed over."""
    if lib.call_path is None:
        lib.call_path, lib.call_path_note = choose_call_path(lib, environ)
    path: CallPath = lib.call_path
    return path


def timed_calls_text(lib: NcclLibrary) -> str:
    """``nccl4py 0.6.0 (Cython)``, or the ctypes path and why not nccl4py."""
    path = timed_call_path(lib)
    why = f"; nccl4py not used: {lib.call_path_note}" if lib.call_path_note else ""
    return str(path.describe()) + why
