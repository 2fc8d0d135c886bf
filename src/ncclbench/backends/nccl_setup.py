"""Setting up the NCCL backend: nccl-tests' `run()` before the first test.

Find the processes on each host (local rank), split the world into groups
(NCCL_TESTS_SPLIT*), pick devices, share one unique id per group through
the HostComm, create the T·G communicators of the process (one
ncclGroupStart/End, or one per thread with -p), refuse buffer sizes that
cannot fit, allocate send/receive buffers (ncclMemAlloc when available) and
register them (-R).  Every step that cannot block inside NCCL is agreed on
world-wide, so a failure in one process stops all of them with one line.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..collectives.collective import Collective
from ..core.config import BenchOptions
from ..core.errors import BenchError, ExitCode, UnsupportedError
from ..cuda.runtime import NULL_STREAM, CudaError, CudaRuntime, DeviceProps, get_runtime
from ..launch.affinity import bind_thread_to_core, bind_to_gpu
from ..launch.hostcomm import HostComm
from ..nccl import runmodel
from ..nccl.binding import NCCL_WIN_COLL_SYMMETRIC, NcclError, NcclLibrary, get_library, short_hostname
from ..nccl.callpath import CALL_PATH_ENV, timed_call_path, timed_calls_text
from ..nccl.native_loop import NATIVE_ENV, NativeLoop
from .nccl_gpu import NcclSlot, NcclWorker, ProcessSetup, communicator_for, release_memory
from .nccl_native import open_native_loop
from .threads import ThreadTeam


def _agree(host: HostComm, error: BaseException | None) -> None:
    """World-wide agreement on a setup step: every process learns whether any
    failed, so all stop together instead of some waiting forever."""
    msg = None
    if error is not None:
        code = error.code if isinstance(error, BenchError) else ExitCode.INTERNAL
        msg = (str(error), int(code))
    results = host.allgather(msg)
    if error is not None:
        raise error
    for proc, r in enumerate(results):
        if r is not None:
            text, code = r
            raise BenchError(f"process {proc}: {text}", ExitCode(code))


@dataclass(frozen=True)
class _HostLayout:
    """Step 1's outcome, agreed on world-wide: the library and runtime this process opened, and
    where it sits among the world's processes (host, local rank, NCCL_TESTS_SPLIT group)."""

    lib: NcclLibrary
    cuda: CudaRuntime
    native: NativeLoop | None
    native_why: str
    hostname: str
    hosts: list[str]
    colors: list[int]
    local: int
    group_proc: int
    group_size: int
    leader: int


def _host_layout(opts: BenchOptions, host: HostComm, env: Mapping[str, str]) -> _HostLayout:
    """Step 1: library, runtime, host layout.  One allgather carries both each process's place and
    its error, so that a process that cannot open the library stops every process with its line."""
    lib = cuda = native = None
    native_why = ""
    err: BenchError | None = None
    try:
        lib = get_library(opts.nccl_lib)
        native, native_why = open_native_loop(lib.handle)
        if native is None or env.get(CALL_PATH_ENV, "auto").strip().lower() not in ("", "auto"):
            timed_call_path(lib)  # chosen (and a bad choice refused) up front, on every rank
        cuda = get_runtime()
        color = runmodel.split_color(host.rank, env)
    except BenchError as exc:
        err, color = exc, 0
    hostname = short_hostname()
    info = host.allgather((runmodel.host_identity(), hostname, color,
                           None if err is None else (str(err), int(err.code))))
    if err is not None:
        raise err
    for proc, (_, _, _, e) in enumerate(info):
        if e is not None:
            raise BenchError(f"process {proc}: {e[0]}", ExitCode(e[1]))
    ids, hosts, colors = [i[0] for i in info], [i[1] for i in info], [i[2] for i in info]
    assert lib is not None and cuda is not None
    group_proc, group_size, leader = runmodel.group_layout(colors, host.rank)
    return _HostLayout(lib, cuda, native, native_why, hostname, hosts, colors, runmodel.local_rank(ids, host.rank),
                       group_proc, group_size, leader)


def _device_props(opts: BenchOptions, host: HostComm, cuda: CudaRuntime, local: int,
                  env: Mapping[str, str]) -> tuple[int, list[DeviceProps]]:
    """Step 2: (first device, properties of the process's T*G devices), agreed on world-wide
    (a process with too few GPUs stops every process)."""
    T, G = opts.nthreads, opts.ngpus
    props: list[DeviceProps] = []
    err = None
    base = 0
    try:
        base = runmodel.base_device(local, T, G, env)
        runmodel.check_device_count(base, T, G, cuda.device_count)
        props = [cuda.properties(base + i) for i in range(T * G)]
    except BenchError as exc:
        err = exc
    _agree(host, err)
    return base, props


def _calls_note(lib: NcclLibrary, native: NativeLoop | None, native_why: str) -> str:
    """The note that says which NCCL calls the timed loop makes (and why the C loop is not used)."""
    if native is not None:
        # nccl4py is imported only if a loop outside the C loop's reach needs it
        # (~0.35 s of start-up on an H100 host: bench/results/stability-h100-*).
        calls = ("C loop (ncclbench.nccl._timedloop) for -z 0 -m 1 without -I/-G on one GPU per thread; "
                 "other loops through nccl4py or ctypes (`ncclbench list` says which)")
    else:
        calls = timed_calls_text(lib)
        if native_why != f"{NATIVE_ENV}=0":
            calls += f"; C loop not used: {native_why}"
    return f"NCCL calls in the timed loop: {calls}"


def _run_settings(opts: BenchOptions, lib: NcclLibrary, props: Sequence[DeviceProps],
                  notes: list[str]) -> tuple[int, int | None]:
    """(registration mode, CTA policy) for this library, and the CPU binding of --cpu-bind; each
    adds its note to `notes`.  The binding comes before the communicators start NCCL's threads,
    which inherit it (for `core` too: its one core is the launching thread's alone, set after)."""
    if opts.cpu_bind in ("numa", "core"):
        p0 = props[0]
        notes.append(bind_to_gpu(p0.pci_domain, p0.pci_bus, p0.pci_device))
    reg_mode, note = runmodel.registration_mode(opts.local_register, lib.version_code,
                                                lib.caps.comm_register, lib.caps.window_register)
    if note:
        notes.append(note)
    cta, note = runmodel.cta_policy_setting(opts.cta_policy, lib.version_code)
    if note:
        notes.append(note)
    return reg_mode, cta


def _group_unique_id(host: HostComm, lib: NcclLibrary, leader: int) -> bytes:
    """Step 3: one unique id per group, from its first process, shared with every process."""
    err, uid = None, None
    try:
        uid = lib.get_unique_id() if host.rank == leader else None
    except BenchError as exc:
        err = exc
    _agree(host, err)
    uids = host.allgather(uid)
    uid = uids[leader]
    host.barrier()
    return uid


def _abandon(lib: NcclLibrary, cuda: CudaRuntime, slots: Sequence[NcclSlot]) -> None:
    """After a failed build: abort the communicators made and free the memory taken, ignoring
    their own errors so that the first failure is the one raised."""
    for slot in slots:
        if slot.handle:
            try:
                lib.comm_abort(slot.handle)
            except NcclError:
                pass
            slot.handle = 0
        try:
            release_memory(lib, cuda, slot)
        except (CudaError, NcclError):
            pass


def create_nccl_workers(opts: BenchOptions, host: HostComm, collective: Collective | str,
                        config_overrides: dict[str, int] | None = None,
                        on_comm_init: Callable[[], None] | None = None) -> list[NcclWorker]:
    """Set up this process's part of the run (see module docstring) and return
    one NcclWorker per -t thread, in thread order.  Collective over `host`:
    every world process must call it.  Failures raise BenchError in every
    process (exit 2 CUDA, 3 NCCL, 5 too few GPUs / unsupported option).

    `config_overrides`: ncclConfig_t fields set on top of the run's own (tune's
    candidates: minCTAs, maxCTAs, ...); a field this libnccl lacks raises
    ValueError (nccl/config_struct.py).  `on_comm_init`: called right before the
    communicators' init, whose ~0.5 s in C with the GIL released is the start-up's
    one long stretch where other Python work (explain's topology read) costs nothing."""
    if opts.device_implementation > 0:
        raise UnsupportedError("device-API kernels (-D) are not supported by ncclbench yet")
    T, G = opts.nthreads, opts.ngpus
    env = os.environ
    lay = _host_layout(opts, host, env)
    lib, cuda = lay.lib, lay.cuda
    base, props = _device_props(opts, host, cuda, lay.local, env)
    max_mem = int(host.allreduce(min(p.total_mem for p in props), "min"))
    min_arch = int(host.allreduce(min(p.cuda_arch for p in props), "min"))
    max_bytes = min(opts.max_bytes, runmodel.nccl_tests_max_bytes(max_mem, opts.check != 0))
    notes: list[str] = [_calls_note(lib, lay.native, lay.native_why)]
    reg_mode, cta = _run_settings(opts, lib, props, notes)
    name = collective if isinstance(collective, str) else collective.name
    config_values = runmodel.comm_config_values(lib.version_code, cta, name, config_overrides)
    uid = _group_unique_id(host, lib, lay.leader)

    setup = ProcessSetup(opts=opts, host=host, lib=lib, cuda=cuda, team=ThreadTeam(T, host),
                         world_rank=host.rank, world_size=host.size, hostname=lay.hostname, hosts=lay.hosts,
                         local_rank=lay.local, color=lay.colors[host.rank], colors=lay.colors,
                         group_proc=lay.group_proc, group_size=lay.group_size, nranks=lay.group_size * T * G,
                         base_device=base, max_bytes=max_bytes,
                         min_cuda_arch=min_arch, register_mode=reg_mode, notes=notes,
                         native_loop=lay.native, config_values=config_values)
    slots = [NcclSlot(rank=runmodel.global_rank(lay.group_proc, i // G, i % G, T, G), comm=None,  # type: ignore[arg-type]
                      send=0, recv=0, device=base + i, local_index=i, props=props[i])
             for i in range(T * G)]
    try:
        workers = _build(setup, slots, uid, config_values, on_comm_init)
    except BaseException:
        _abandon(lib, cuda, slots)
        raise
    if opts.cpu_bind == "core":
        notes.append(bind_thread_to_core(lay.local) if T == 1 else
                     f"--cpu-bind core needs -t 1 (one launching thread; here {T}): NUMA-local cores only")
    return workers


def _init_comms(setup: ProcessSetup, slots: Sequence[NcclSlot], uid: bytes, config_values: dict) -> None:
    """ncclCommInitRankConfig for `slots`, inside one ncclGroupStart/End."""
    lib, cuda = setup.lib, setup.cuda
    config = lib.make_config(**config_values) if lib.caps.config_init else None
    lib.group_start()
    try:
        for slot in slots:
            cuda.set_device(slot.device)
            slot.handle = lib.comm_init_rank(setup.nranks, uid, slot.rank, config)
    finally:
        lib.group_end()


def _register(setup: ProcessSetup, slots: Sequence[NcclSlot]) -> None:
    """-R 1: ncclCommRegister; -R 2: ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC);
    both over maxBytes of each buffer from its unshifted start, in one group."""
    lib, cuda, n = setup.lib, setup.cuda, setup.max_bytes
    windows = []  # ncclCommWindowRegister fills these at group end
    lib.group_start()
    try:
        for slot in slots:
            cuda.set_device(slot.device)
            if setup.register_mode == 2:
                windows.append((slot, lib.window_register(slot.handle, slot.send_base, n, NCCL_WIN_COLL_SYMMETRIC),
                                lib.window_register(slot.handle, slot.recv_base, n, NCCL_WIN_COLL_SYMMETRIC)))
            else:
                slot.send_reg = lib.comm_register(slot.handle, slot.send_base, n)
                slot.recv_reg = lib.comm_register(slot.handle, slot.recv_base, n)
    finally:
        lib.group_end()
    for slot, send_win, recv_win in windows:
        slot.send_reg, slot.recv_reg = send_win.value or 0, recv_win.value or 0


def _free_per_slot(cuda: CudaRuntime, slots: Sequence[NcclSlot]) -> list[int]:
    out = []
    for slot in slots:
        cuda.set_device(slot.device)
        out.append(cuda.mem_get_info()[0])
    return out


def _create_streams(setup: ProcessSetup, slots: Sequence[NcclSlot]) -> None:
    """Each slot's stream: the null stream with -y, else a non-blocking one of its own."""
    cuda, stream_null = setup.cuda, setup.opts.stream_null
    for slot in slots:
        cuda.set_device(slot.device)
        slot.stream = NULL_STREAM if stream_null else cuda.stream_create(nonblocking=True)


def _init_all_comms(setup: ProcessSetup, slots: Sequence[NcclSlot], uid: bytes, config_values: dict) -> None:
    """Communicators: all T*G in one group, or each thread its own G (-p).
    A failure here is raised at once, without a world-wide agreement: the
    other processes may be blocked inside NCCL's bootstrap, and only the
    launcher's abort (HostComm.abort) can release them."""
    T, G = setup.opts.nthreads, setup.opts.ngpus
    if not (setup.opts.parallel_init and T > 1):
        _init_comms(setup, slots, uid, config_values)
        return
    failures: list[BaseException] = []

    def init_thread(t: int) -> None:
        try:
            _init_comms(setup, slots[t * G:(t + 1) * G], uid, config_values)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=init_thread, args=(t,), name=f"ncclbench-init-{t}")
               for t in range(T - 1, -1, -1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if failures:
        raise failures[0]


def _refuse_unfit(setup: ProcessSetup, slots: Sequence[NcclSlot], free: Sequence[int]) -> None:
    """Refuse sizes that cannot fit in the memory left, before allocating anything (agreed on)."""
    err = None
    for slot, free_bytes in zip(slots, free):
        msg = runmodel.fit_error(setup.max_bytes, setup.opts.unalign, free_bytes, slot.device)
        if msg:
            err = BenchError(msg, ExitCode.CUDA_ERROR)
            break
    _agree(setup.host, err)


def _allocate_buffers(setup: ProcessSetup, slots: Sequence[NcclSlot]) -> None:
    """Send and receive buffers of each slot (ncclMemAlloc where the library has it), agreed on:
    nothing collective happens during allocation."""
    lib, cuda = setup.lib, setup.cuda
    nbytes = runmodel.buffer_bytes(setup.max_bytes, setup.opts.unalign)
    use_nccl_alloc = lib.caps.mem_alloc
    err = None
    try:
        for slot in slots:
            cuda.set_device(slot.device)
            slot.alloc_bytes = nbytes
            slot.allocated_by_nccl = use_nccl_alloc
            alloc = lib.mem_alloc if use_nccl_alloc else cuda.malloc
            slot.send_base = alloc(max(nbytes, 1))
            slot.recv_base = alloc(max(nbytes, 1))
            slot.send, slot.recv = slot.send_base, slot.recv_base
    except (NcclError, CudaError) as exc:
        err = exc
    _agree(setup.host, err)


def _make_workers(setup: ProcessSetup, slots: list[NcclSlot], free0: Sequence[int], free1: Sequence[int],
                  free2: Sequence[int]) -> list[NcclWorker]:
    """One worker per thread over its G slots, with the memory its communicators (free0 - free1)
    and buffers (free1 - free2) took; -c loads the check kernels."""
    opts = setup.opts
    T, G = opts.nthreads, opts.ngpus
    workers: list[NcclWorker] = []
    for t in range(T):
        mine = slots[t * G:(t + 1) * G]
        idx = range(t * G, (t + 1) * G)
        init_mem = max(free0[i] - free1[i] for i in idx)
        user_mem = max(free1[i] - free2[i] for i in idx)
        worker = NcclWorker(setup, t, mine, init_mem, user_mem, [free2[i] for i in idx])
        for slot in mine:
            slot.comm = communicator_for(worker, slot)
        workers.append(worker)
        if opts.check:
            worker.load_kernels()
    return workers


def _build(setup: ProcessSetup, slots: list[NcclSlot], uid: bytes, config_values: dict,
           on_comm_init: Callable[[], None] | None = None) -> list[NcclWorker]:
    """Streams, communicators, buffers and registration of the slots, then their workers; the
    free memory is read between the steps to say what each took."""
    cuda = setup.cuda
    _create_streams(setup, slots)
    free0 = _free_per_slot(cuda, slots)
    if on_comm_init is not None:
        on_comm_init()
    _init_all_comms(setup, slots, uid, config_values)
    free1 = _free_per_slot(cuda, slots)
    _refuse_unfit(setup, slots, free1)
    # Buffers, then registration (window registration is collective: failures raise at once).
    _allocate_buffers(setup, slots)
    if setup.register_mode and setup.max_bytes > 0:
        _register(setup, slots)
    free2 = _free_per_slot(cuda, slots)
    workers = _make_workers(setup, slots, free0, free1, free2)
    cuda.set_device(slots[0].device)
    return workers
