"""The timed loop's call paths (nccl/callpath.py) against the real libnccl
from the wheel, which loads and validates arguments without a GPU: both paths
turn a failing call into the same NcclError, the ctypes path keeps 64-bit
counts and pointers intact, and nccl4py is used only for the very library
ncclbench loaded."""

from __future__ import annotations

import ctypes

import pytest

from ncclbench.core.errors import ArgumentError, BenchError
from ncclbench.nccl.binding import NcclError, NcclLibrary
from ncclbench.nccl.callpath import CtypesCallPath, Nccl4pyCallPath, choose_call_path, timed_call_path
from ncclbench.nccl.loader import wheel_library_path

WHEEL = wheel_library_path()


@pytest.fixture(scope="module")
def lib() -> NcclLibrary:
    if WHEEL is None:
        pytest.skip("nvidia-nccl wheel not installed")
    return NcclLibrary.load(environ={})


def nccl4py_or_skip(lib):
    pytest.importorskip("nccl.bindings.nccl", reason="nccl4py not installed")
    path, why = Nccl4pyCallPath.open(lib)
    assert path is not None, why  # installed next to the wheel: it must drive the same file
    return path


def failing_calls():
    """NULL communicator: libnccl rejects each call with ncclInvalidArgument."""
    return [("ncclAllReduce", (0x1000, 0x2000, 8, 7, 0, 0, 0), 0),
            ("ncclGroupStart", (), None),
            ("ncclSend", (0x1000, 8, 7, 1, 0, 0), 0),
            ("ncclGroupEnd", (), None)]


def error_of(fn) -> NcclError:
    with pytest.raises(NcclError) as info:
        fn()
    return info.value


def test_ctypes_conversion_keeps_64_bit_values():
    big = (1 << 40) + 12345
    args = CtypesCallPath.convert("ncclAllReduce", (big, big + 8, (1 << 33) + 1, 7, 2, big + 16, big + 24))
    assert [type(a) for a in args] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    assert [a.value for a in args] == [big, big + 8, (1 << 33) + 1, 7, 2, big + 16, big + 24]
    assert CtypesCallPath.convert("ncclAllReduce", (0, 0, 0, 0, 0, 0, 0))[0].value is None  # NULL
    with pytest.raises(TypeError):
        CtypesCallPath.convert("ncclSend", (1, 2, 3))


@pytest.mark.parametrize("kind", ["ctypes", "nccl4py"])
def test_failing_call_raises_the_nccl_error_of_that_call(lib, kind):
    path = CtypesCallPath(lib) if kind == "ctypes" else nccl4py_or_skip(lib)
    handled = []

    def on_error(exc):
        handled.append(exc.function)
        return exc.at_rank(5)

    one = path.build(failing_calls()[:1], on_error)
    err = error_of(one)
    assert (err.function, err.result, err.rank) == ("ncclAllReduce", 4, 5)
    assert "invalid argument" in str(err) and "rank 5" in str(err)
    # A group: start succeeds, the send fails; the error names the send.
    group = path.build(failing_calls()[1:3], on_error)
    err = error_of(group)
    assert err.function == "ncclSend" and handled == ["ncclAllReduce", "ncclSend"]
    try:  # close the group the failed send left open (it may carry the send's error)
        lib.group_end()
    except NcclError:
        pass


def test_both_paths_give_identical_messages(lib):
    nccl4py = nccl4py_or_skip(lib)
    msgs = [str(error_of(p.build(failing_calls()[:1], lambda e: e))) for p in (CtypesCallPath(lib), nccl4py)]
    assert msgs[0] == msgs[1]


def test_nccl4py_is_refused_for_another_library(lib, tmp_path):
    pytest.importorskip("nccl.bindings.nccl", reason="nccl4py not installed")
    other = object.__new__(NcclLibrary)
    other.path, other.version_code = str(tmp_path / "libnccl.so.2"), lib.version_code
    path, why = Nccl4pyCallPath.open(other)
    assert path is None and "not the loaded" in why and str(tmp_path) in why


def test_choice_follows_the_environment(lib):
    path, note = choose_call_path(lib, {"NCCLBENCH_CALLS": "ctypes"})
    assert isinstance(path, CtypesCallPath) and note == ""
    with pytest.raises(ArgumentError, match="NCCLBENCH_CALLS"):
        choose_call_path(lib, {"NCCLBENCH_CALLS": "cython"})
    try:
        import nccl.bindings.nccl  # noqa: F401
    except ImportError:
        path, note = choose_call_path(lib, {})
        assert isinstance(path, CtypesCallPath) and "not installed" in note
        with pytest.raises(BenchError, match="nccl4py"):
            choose_call_path(lib, {"NCCLBENCH_CALLS": "nccl4py"})
    else:
        path, note = choose_call_path(lib, {})
        assert isinstance(path, Nccl4pyCallPath) and note == ""
        assert "nccl4py" in path.describe()


def test_library_chooses_once(lib):
    first = timed_call_path(lib, {"NCCLBENCH_CALLS": "ctypes"})
    assert timed_call_path(lib, {"NCCLBENCH_CALLS": "nccl4py"}) is first


def test_nccl4py_drives_a_user_library_loaded_first(tmp_path):
    """--nccl-lib with a copy elsewhere: loaded first, it is the one nccl4py
    finds (cuda-pathfinder takes an already-loaded libnccl), so the timed
    loop and ncclbench use one library.  A fresh process: loading is global."""
    pytest.importorskip("nccl.bindings.nccl", reason="nccl4py not installed")
    if WHEEL is None:
        pytest.skip("nvidia-nccl wheel not installed")
    import shutil
    import subprocess
    import sys

    own = tmp_path / "lib" / "libnccl.so.2"
    own.parent.mkdir()
    shutil.copyfile(WHEEL, own)
    code = ("from ncclbench.nccl.binding import NcclLibrary\n"
            "from ncclbench.nccl.callpath import Nccl4pyCallPath\n"
            f"lib = NcclLibrary.load(explicit={str(own)!r}, environ={{}})\n"
            "path, why = Nccl4pyCallPath.open(lib)\n"
            "maps = {l.split()[-1] for l in open('/proc/self/maps') if 'libnccl.so' in l}\n"
            "print(lib.path, path is not None, why, sorted(maps), sep='|')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    loaded, usable, why, maps = p.stdout.strip().split("|")
    assert loaded == str(own) and usable == "True", why
    assert maps == str([str(own)])  # one libnccl in the process, the user's
