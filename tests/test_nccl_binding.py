"""The libnccl ctypes binding against the real library from the nvidia-nccl wheel.

libnccl loads and answers version / unique-id / error-string calls without a
GPU, and fails communicator creation with a clean NCCL error, so all of this
runs on a CPU-only machine."""

from __future__ import annotations

import ctypes
import os
import re

import numpy as np
import pytest

from ncclbench.core.datatypes import DATATYPE_BY_NAME, REDOP_BY_NAME
from ncclbench.core.errors import ExitCode
from ncclbench.nccl import config_struct
from ncclbench.nccl.binding import NCCL_UNIQUE_ID_BYTES, NcclError, NcclLibrary, scalar_bytes
from ncclbench.nccl.communicator import NcclCommunicator
from ncclbench.nccl.loader import (
    LIBNAME,
    LibraryCandidate,
    NcclLibraryNotFound,
    candidates,
    read_banner,
    wheel_library_path,
)

WHEEL = wheel_library_path()
needs_wheel = pytest.mark.skipif(WHEEL is None, reason="nvidia-nccl wheel not installed")


def _gpu_present() -> bool:
    try:
        from cuda.bindings import runtime as rt
    except ImportError:
        return os.path.exists("/dev/nvidiactl")
    err, count = rt.cudaGetDeviceCount()
    return int(err) == 0 and bool(count)


cpu_only = pytest.mark.skipif(_gpu_present(), reason="a GPU is present: the no-GPU error cannot be reached")


@pytest.fixture(scope="module")
def lib() -> NcclLibrary:
    if WHEEL is None:
        pytest.skip("nvidia-nccl wheel not installed")
    return NcclLibrary.load(environ={})


@needs_wheel
def test_search_order_prefers_explicit_then_env_then_wheel():
    assert candidates("/x/libnccl.so.2", {"NCCLBENCH_NCCL_LIB": "/y"}) == [
        LibraryCandidate("/x/libnccl.so.2", "explicit")]
    assert candidates(None, {"NCCLBENCH_NCCL_LIB": "/y/libnccl.so.2"}) == [
        LibraryCandidate("/y/libnccl.so.2", "env")]
    found = candidates(None, {"NCCL_HOME": "/opt/nccl"})
    assert [c.source for c in found] == ["wheel", "NCCL_HOME", "system"]
    assert found[0].path == WHEEL
    assert found[1].path == "/opt/nccl/lib/libnccl.so.2"
    assert found[2].path == LIBNAME


def test_version_and_identity(lib):
    assert lib.source == "wheel"
    assert os.path.samefile(lib.path, WHEEL)
    assert lib.version_code >= 22700
    major, minor, patch = (int(x) for x in lib.version.split("."))
    assert major * 10000 + minor * 100 + patch == lib.version_code
    nccl_version, cuda = read_banner(lib.path)
    assert nccl_version == lib.version
    assert re.fullmatch(r"1[0-9]\.\d+", cuda)
    assert lib.describe() == f"libnccl {lib.version}+cuda{cuda} (wheel: {lib.path})"


def test_version_text_old_and_new_encodings():
    assert config_struct.version_text(22809) == "2.28.9"
    assert config_struct.version_text(23203) == "2.32.3"
    assert config_struct.version_text(2804) == "2.8.4"  # before 2.9: X*1000+Y*100+Z


def test_unique_id_is_128_fresh_bytes(lib):
    a, b = lib.get_unique_id(), lib.get_unique_id()
    assert len(a) == len(b) == NCCL_UNIQUE_ID_BYTES
    assert a != b


def test_error_strings(lib):
    assert lib.error_string(0) == "no error"
    assert "invalid argument" in lib.error_string(4)
    assert "unhandled cuda error" in lib.error_string(1)


def test_capabilities_of_a_recent_library(lib):
    caps = lib.caps
    assert caps.config_init and caps.async_error and caps.last_error and caps.send_recv
    assert caps.premulsum and caps.mem_alloc and caps.comm_register and caps.window_register
    assert caps.alltoall == (lib.version_code >= 22800) == caps.gather == caps.scatter


@cpu_only
def test_comm_init_without_gpu_is_a_clean_nccl_error(lib):
    uid = lib.get_unique_id()
    with pytest.raises(NcclError) as info:
        lib.comm_init_rank(1, uid, 0, lib.make_config(nvlinkCentricSched=1))
    err = info.value
    assert err.code == ExitCode.NCCL_ERROR
    assert err.function == "ncclCommInitRankConfig"
    assert err.result != 0
    assert f"'{lib.error_string(err.result)} / " in err.message
    assert err.at_rank(5).message.endswith("(rank 5)")


@cpu_only
def test_mem_alloc_without_gpu_is_a_clean_nccl_error(lib):
    with pytest.raises(NcclError) as info:
        lib.mem_alloc(1 << 20)
    assert info.value.function == "ncclMemAlloc"


@needs_wheel
def test_explicit_path_that_does_not_exist():
    with pytest.raises(NcclLibraryNotFound) as info:
        NcclLibrary.load("/nonexistent/libnccl.so.2", environ={})
    assert info.value.code == ExitCode.NCCL_ERROR
    assert "--nccl-lib=/nonexistent/libnccl.so.2 does not exist" in info.value.message


def test_env_path_that_does_not_exist():
    with pytest.raises(NcclLibraryNotFound) as info:
        NcclLibrary.load(environ={"NCCLBENCH_NCCL_LIB": "/nope/libnccl.so.2"})
    assert "NCCLBENCH_NCCL_LIB=/nope/libnccl.so.2" in info.value.message


def test_explicit_path_that_is_not_nccl():
    from numpy._core import _multiarray_umath  # any real shared library without NCCL symbols

    with pytest.raises(NcclLibraryNotFound) as info:
        NcclLibrary.load(_multiarray_umath.__file__, environ={})
    assert "is not an NCCL library" in info.value.message


def test_explicit_directory_means_the_library_inside(lib):
    other = NcclLibrary.load(os.path.dirname(WHEEL), environ={})
    assert other.source == "explicit"
    assert other.version_code == lib.version_code


class _Hiding:
    """The real library with some symbols hidden, as an older libnccl would be."""

    def __init__(self, handle, hidden):
        self._handle, self._hidden = handle, set(hidden)

    def __getattr__(self, name):
        if name in self._hidden:
            raise AttributeError(name)
        return getattr(self._handle, name)


def test_missing_symbols_become_capability_flags(lib):
    hidden = ["ncclAlltoAll", "ncclGather", "ncclScatter", "ncclCommWindowRegister", "ncclMemAlloc",
              "ncclGetLastError"]
    old = NcclLibrary(_Hiding(lib.handle, hidden), LibraryCandidate(lib.path, "explicit"), lib.path)
    assert not old.caps.alltoall and not old.caps.gather and not old.caps.scatter
    assert not old.caps.window_register and not old.caps.mem_alloc and not old.caps.last_error
    assert old.caps.comm_register and old.caps.send_recv
    assert old.last_error() == ""
    with pytest.raises(Exception) as info:
        old.alltoall(0, 0, 1, 7, 0, 0)
    assert info.value.code == ExitCode.NOT_IMPLEMENTED
    assert "ncclAlltoAll needs NCCL >= 2.28" in info.value.message
    with pytest.raises(Exception) as info:
        old.mem_alloc(16)
    assert "ncclMemAlloc is not available" in info.value.message


def test_missing_required_symbol_refuses_the_library(lib):
    with pytest.raises(NcclLibraryNotFound) as info:
        NcclLibrary(_Hiding(lib.handle, ["ncclAllReduce"]), LibraryCandidate(lib.path, "explicit"), lib.path)
    assert "ncclAllReduce" in info.value.message


class _Recorder:
    """Records the NCCL calls a communicator makes (for the fallback paths)."""

    def __init__(self, caps):
        self.caps, self.calls, self.version = caps, [], "2.21.5"

    def __getattr__(self, name):
        def record(*args):
            self.calls.append((name,) + args)
            return 77 if name == "redop_create_premulsum" else None
        return record


def _old_caps(lib):
    from dataclasses import replace

    return replace(lib.caps, alltoall=False, gather=False, scatter=False)


def test_alltoall_gather_scatter_fall_back_to_send_recv(lib):
    f32 = DATATYPE_BY_NAME["float"]
    rec = _Recorder(_old_caps(lib))
    comm = NcclCommunicator(rec, handle=9, rank=1, nranks=3, stream=5, device=0)
    comm.alltoall(1000, 2000, 4, f32)
    assert rec.calls == [("group_start",),
                         ("send", 1000, 4, 7, 0, 9, 5), ("recv", 2000, 4, 7, 0, 9, 5),
                         ("send", 1016, 4, 7, 1, 9, 5), ("recv", 2016, 4, 7, 1, 9, 5),
                         ("send", 1032, 4, 7, 2, 9, 5), ("recv", 2032, 4, 7, 2, 9, 5),
                         ("group_end",)]
    rec.calls.clear()
    comm.gather(1000, 2000, 2, f32, root=1)  # this rank is the root: receives every block
    assert rec.calls == [("group_start",), ("send", 1000, 2, 7, 1, 9, 5),
                         ("recv", 2000, 2, 7, 0, 9, 5), ("recv", 2008, 2, 7, 1, 9, 5),
                         ("recv", 2016, 2, 7, 2, 9, 5), ("group_end",)]
    rec.calls.clear()
    comm.scatter(1000, 2000, 2, f32, root=0)  # not the root: only receives
    assert rec.calls == [("group_start",), ("recv", 2000, 2, 7, 0, 9, 5), ("group_end",)]


def test_native_alltoall_when_available(lib):
    rec = _Recorder(lib.caps)
    comm = NcclCommunicator(rec, handle=9, rank=0, nranks=2, stream=5, device=0)
    comm.alltoall(1000, 2000, 4, DATATYPE_BY_NAME["int8"])
    assert rec.calls == [("alltoall", 1000, 2000, 4, 0, 9, 5)]


def test_mulsum_creates_and_destroys_an_op_per_call(lib):
    rec = _Recorder(lib.caps)
    f16 = DATATYPE_BY_NAME["half"]
    comm = NcclCommunicator(rec, handle=9, rank=3, nranks=4, stream=5, device=0)
    comm.all_reduce(1, 2, 8, f16, REDOP_BY_NAME["mulsum"])
    assert rec.calls == [("redop_create_premulsum", np.float16(2).tobytes(), 6, 9),
                         ("all_reduce", 1, 2, 8, 6, 77, 9, 5), ("redop_destroy", 77, 9)]


@pytest.mark.parametrize("name,np_type", [("half", np.float16), ("float", np.float32), ("double", np.float64)])
def test_scalar_bytes_matches_ieee(name, np_type):
    for v in (0, 1, 2, 4):
        assert scalar_bytes(DATATYPE_BY_NAME[name], v) == np.array(v, np_type).tobytes()


def test_scalar_bytes_small_floats_and_ints():
    d = DATATYPE_BY_NAME
    assert scalar_bytes(d["bfloat16"], 1) == (0x3F80).to_bytes(2, "little")
    assert scalar_bytes(d["bfloat16"], 2) == (0x4000).to_bytes(2, "little")
    assert scalar_bytes(d["f8e4m3"], 1) == b"\x38" and scalar_bytes(d["f8e4m3"], 2) == b"\x40"
    assert scalar_bytes(d["f8e5m2"], 1) == b"\x3c" and scalar_bytes(d["f8e5m2"], 2) == b"\x40"
    assert scalar_bytes(d["int32"], 2) == b"\x02\x00\x00\x00"
    assert scalar_bytes(d["uint64"], 1) == b"\x01" + bytes(7)
    with pytest.raises(ValueError):
        scalar_bytes(d["float"], 3)


def _header_fields(header: str) -> list[str]:
    text = open(header).read()
    body = text[text.index("typedef struct ncclConfig_v"):]
    body = body[:body.index("} ncclConfig_t;")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = re.findall(r"^\s*(?:const\s+)?(?:size_t|unsigned int|int|char)\s*\*?\s*(\w+);", body, flags=re.M)
    return names


def test_config_layout_matches_the_installed_header(lib):
    header = os.path.join(os.path.dirname(os.path.dirname(lib.path)), "include", "nccl.h")
    if not os.path.exists(header):
        pytest.skip("wheel ships no nccl.h")
    names = _header_fields(header)
    assert names[:3] == ["size", "magic", "version"]
    assert names[3:] == config_struct.fields_for(lib.version_code)


def test_config_struct_sizes_and_initializer():
    assert ctypes.sizeof(config_struct.struct_type(21400)) == 24
    assert ctypes.sizeof(config_struct.struct_type(21800)) == 48
    assert ctypes.sizeof(config_struct.struct_type(23203)) == 120
    cfg = config_struct.make_config(22809, CTAPolicy=1, nvlinkCentricSched=1)
    values = config_struct.config_values(cfg)
    assert values["size"] == ctypes.sizeof(cfg)
    assert values["magic"] == 0xCAFEBEEF and values["version"] == 22809
    assert values["CTAPolicy"] == 1 and values["nvlinkCentricSched"] == 1
    assert values["blocking"] == config_struct.NCCL_CONFIG_UNDEF_INT
    assert values["netName"] is None
    assert "maxP2pPeers" not in values
    with pytest.raises(ValueError, match="maxP2pPeers needs NCCL >= 2.30.0"):
        config_struct.make_config(22809, maxP2pPeers=2)
    with pytest.raises(ValueError):
        config_struct.make_config(21300)


def test_every_reader_decodes_version_codes_alike():
    """One decoding (nccl.version_text.version_text) behind the banner, the store's imports,
    explain, preflight's facts and tune's rules, old layout included."""
    from ncclbench.backends import nccl_gpu
    from ncclbench.explain import live, stored
    from ncclbench.launch import facts
    from ncclbench.nccl import version_text as version
    from ncclbench.store import imported
    from ncclbench.tune import nccl_rules

    for module in (config_struct, nccl_gpu, facts, nccl_rules):
        assert module.version_text is version.version_text
    for code, text in ((22809, "2.28.9"), (2804, "2.8.4"), (21003, "2.10.3")):
        assert imported.nccl_version_string(code) == stored._nccl_version(code) == live._nccl_version_text(code) == text
    assert (imported.nccl_version_string(None), stored._nccl_version(0), live._nccl_version_text(None)) == ("", None, None)
