"""nccl-tests' run model as pure functions (docs/behaviour.md §2.1–2.5, §7.1, §7.3, §7.4).

Which rank a GPU gets, which CUDA device a process uses, how the world is
split into groups, how large the buffers may be and how the `-M` line is
worded: all of it decides whether ncclbench reproduces an nccl-tests run,
so it lives here, free of CUDA and NCCL, where tests can pin it down.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ..core.errors import ArgumentError, BenchError, ExitCode

GiB = 1 << 30


# -- ranks and devices (§2.1, §2.2) ------------------------------------------------------

def global_rank(proc: int, thread: int, gpu: int, nthreads: int, ngpus: int) -> int:
    """Rank of (group-local process p, thread t, GPU g): (p·T + t)·G + g."""
    return (proc * nthreads + thread) * ngpus + gpu


def local_rank(host_ids: Sequence[object], proc: int) -> int:
    """How many lower-numbered world processes run on the same host as `proc`."""
    return sum(1 for p in range(proc) if host_ids[p] == host_ids[proc])


def base_device(local: int, nthreads: int, ngpus: int, environ: Mapping[str, str] | None = None) -> int:
    """First CUDA ordinal of this process: NCCL_TESTS_DEVICE (atoi) if set,
    else localRank·T·G.  The GPU of local slot i = t·G + g is base + i."""
    env = os.environ if environ is None else environ
    value = env.get("NCCL_TESTS_DEVICE")
    if value is not None:
        dev = c_atoi(value)
        if dev != -1:
            return dev
    return local * nthreads * ngpus


def check_device_count(base: int, nthreads: int, ngpus: int, available: int) -> None:
    """nccl-tests' "too few GPUs" failure (exit status 5)."""
    needed = base + nthreads * ngpus
    if needed > available:
        raise BenchError(f"Invalid number of GPUs: {needed} requested but only {available} were found. "
                         "Please check the number of processes and GPUs per process.",
                         ExitCode.NOT_IMPLEMENTED)


def host_identity(hostname: str | None = None, boot_id_path: str = "/proc/sys/kernel/random/boot_id") -> str:
    """What nccl-tests hashes to find processes on one host: the short
    hostname (cut at the first '.') followed by the boot id."""
    import socket

    name = (hostname if hostname is not None else socket.gethostname()).split(".")[0]
    try:
        with open(boot_id_path) as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return name + boot


# -- C number parsing, as nccl-tests does it ---------------------------------------------

def _strtoul(s: str, base: int) -> tuple[int, int]:
    """C strtoul: (value, characters consumed); consumed 0 when no digits were read.

    Leading whitespace and one sign are accepted; base 0 picks 0x (hex),
    leading 0 (octal) or decimal; base 16 accepts an optional 0x prefix."""
    i, n = 0, len(s)
    while i < n and s[i] in " \t\n\v\f\r":
        i += 1
    neg = False
    if i < n and s[i] in "+-":
        neg = s[i] == "-"
        i += 1
    if base in (0, 16) and s[i:i + 2].lower() == "0x" and i + 2 < n and s[i + 2] in "0123456789abcdefABCDEF":
        base, i = 16, i + 2
    elif base == 0:
        base = 8 if s[i:i + 1] == "0" else 10
    start, value = i, 0
    while i < n:
        d = int(s[i], 36) if s[i].isalnum() and s[i].isascii() else 99
        if d >= base:
            break
        value = value * base + d
        i += 1
    if i == start:
        return 0, 0
    value %= 1 << 64
    if neg:
        value = (-value) % (1 << 64)
    return value, i


def _to_c_int(value: int) -> int:
    """(int) cast of an unsigned long: keep the low 32 bits, two's complement."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def c_atoi(s: str) -> int:
    """atoi: leading decimal digits (with sign), 0 when there are none."""
    value, used = _strtoul(s, 10)
    return _to_c_int(value) if used else 0


def parse_c_int(s: str) -> int | None:
    """nccl-tests' `parseInt` for NCCL_TESTS_SPLIT values: whitespace skipped,
    ``0b``/``0B`` = binary, else C base 0; None when nothing parses."""
    i = 0
    while i < len(s) and s[i] in " \t\n\v\f\r":
        i += 1
    s = s[i:]
    if not s:
        return None
    if s[:2].lower() == "0b":
        value, _ = _strtoul(s[2:], 2)
        return _to_c_int(value)  # nccl-tests compares with the string start: "0b" alone is 0
    value, used = _strtoul(s, 0)
    return _to_c_int(value) if used else None


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def split_color(world_rank: int, environ: Mapping[str, str] | None = None) -> int:
    """Group color of a world process (§2.3).

    NCCL_TESTS_SPLIT_MASK (hex, wins) gives rank & mask; NCCL_TESTS_SPLIT is
    ``AND|&``, ``OR||``, ``MOD|%`` or ``DIV|/`` (case-insensitive) followed by
    a value; anything unparsable gives color 0."""
    env = os.environ if environ is None else environ
    mask = env.get("NCCL_TESTS_SPLIT_MASK")
    if mask is not None:
        value, _ = _strtoul(mask, 16)
        return _to_c_int(world_rank & value)
    spec = env.get("NCCL_TESTS_SPLIT")
    if spec is None:
        return 0
    low = spec.lower()
    for prefixes, op in ((("and", "&"), "and"), (("or", "|"), "or"), (("mod", "%"), "mod"),
                         (("div", "/"), "div")):
        for prefix in prefixes:
            if low.startswith(prefix):
                parsed = parse_c_int(spec[len(prefix):])
                if parsed is None:
                    return 0
                value = parsed
                if op == "and":
                    return _to_c_int(world_rank & value)
                if op == "or":
                    return _to_c_int(world_rank | value)
                if value == 0:
                    raise ArgumentError(f"NCCL_TESTS_SPLIT={spec}: division by zero")
                if op == "mod":
                    return world_rank - _c_div(world_rank, value) * value
                return _c_div(world_rank, value)
    return 0


def group_layout(colors: Sequence[int], proc: int) -> tuple[int, int, int]:
    """(group-local process index, processes in the group, group leader's
    world rank) for world process `proc`, given every process's color.
    Keys are world ranks, as nccl-tests' MPI_Comm_split(color, proc)."""
    mine = colors[proc]
    members = [p for p, c in enumerate(colors) if c == mine]
    return members.index(proc), len(members), members[0]


# -- memory (§2.5, §7.4) ---------------------------------------------------------------

def nccl_tests_max_bytes(max_mem: int, check: bool) -> int:
    """nccl-tests' largest allowed -e for GPUs of `max_mem` bytes (the smallest
    totalGlobalMem in the world): reserve 1 GiB per 16 GiB (at most 4), keep
    1 GiB more, divide by 3 buffers (2 with -c 0)."""
    reserve = min(-(-max_mem // (16 * GiB)) * GiB, 4 * GiB)
    return max(0, (max_mem - reserve - GiB) // (3 if check else 2))


def buffer_bytes(max_bytes: int, unalign: int) -> int:
    """Bytes of one send or receive buffer: maxBytes padded by 8·unalign."""
    return max_bytes + 8 * unalign


def fit_error(max_bytes: int, unalign: int, free_bytes: int, device: int,
              nbuffers: int = 2, headroom: int = GiB // 2) -> str | None:
    """Why `nbuffers` buffers for -e `max_bytes` cannot be allocated on a GPU
    with `free_bytes` free (keeping `headroom` for NCCL's lazy allocations),
    or None when they fit."""
    need = nbuffers * buffer_bytes(max_bytes, unalign)
    if need <= free_bytes - headroom:
        return None
    limit = max(0, (free_bytes - headroom) // nbuffers - 8 * unalign)
    return (f"maxBytes {max_bytes} does not fit on GPU {device}: {nbuffers} buffers of "
            f"{buffer_bytes(max_bytes, unalign)} bytes need {need} bytes but {free_bytes} are free "
            f"(limit {limit} bytes per buffer, keeping {headroom} for NCCL); lower -e")


def format_mem(amount: int) -> str:
    """nccl-tests' getMemString: binary units, 2/1/0 decimals below 10/100/above."""
    value, unit = float(amount), " B"
    for size, name in ((GiB, " GB"), (1 << 20, " MB"), (1 << 10, " KB")):
        if abs(value) >= size:
            value, unit = value / size, name
            break
    digits = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:.{digits}f}{unit}"


def memory_line(init: int, user: int, collective: int) -> str:
    """The -M footer line (§5.5, §7.4)."""
    body = (f"Initialization {format_mem(init)} | User-Allocated {format_mem(user)} | "
            f"Collective {format_mem(collective)} | Total  {format_mem(init + user + collective)}")
    return f"# {'GPU memory usage':<20} : {body}"


# -- options that depend on the library version (§1.5, §7.1, §7.3) ----------------------

def registration_mode(requested: int, version_code: int, has_register: bool = True,
                      has_window: bool = True) -> tuple[int, str | None]:
    """Effective -R mode (0 none, 1 ncclCommRegister, 2 symmetric window) and
    the note nccl-tests prints when it has to change it."""
    if requested == 0:
        return 0, None
    if not has_register or version_code < 21900:
        return 0, "Option -R (register) is not supported before NCCL 2.19. Ignoring"
    if requested == 2:
        if not has_window or version_code < 22700:
            return 1, "Option -R 2 (symmetric) is not supported before NCCL 2.27. Defaulting to local registration"
        return 2, None
    return 1, None


def cta_policy_setting(requested: int | None, version_code: int) -> tuple[int | None, str | None]:
    """Value for ncclConfig_t.CTAPolicy (None = leave undefined) and a note."""
    if requested is None or requested < 0:
        return None, None
    if version_code < 22700:
        return None, f"Option -x (cta_policy) {requested} is not supported before NCCL 2.27. Ignoring"
    if requested > 1 and version_code < 22800:
        return None, f"Option -x (cta_policy) {requested} is not supported before NCCL 2.28. Ignoring"
    return requested, None


def comm_config_values(version_code: int, cta_policy: int | None, collective: str,
                       overrides: dict[str, int] | None = None) -> dict[str, int]:
    """The ncclConfig_t fields nccl-tests sets (§2.4 item 3): CTAPolicy when -x
    was given, nvlinkCentricSched = 1 from 2.28, and sendrecv's
    maxP2pPeers = 2 from 2.30.  Only fields the library knows are set.
    `overrides` (tune's candidates: minCTAs, maxCTAs, ...) are set on top;
    `config_struct.make_config` refuses a field the library lacks."""
    values: dict[str, int] = {}
    if cta_policy is not None and version_code >= 22700:
        values["CTAPolicy"] = cta_policy
    if version_code >= 22800:
        values["nvlinkCentricSched"] = 1
    if collective == "sendrecv" and version_code >= 23000:
        values["maxP2pPeers"] = 2
    return {**values, **(overrides or {})}
