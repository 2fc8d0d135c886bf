"""How much host memory the CPU backend may take, before it takes any.

nccl-tests lowers `-e` when the GPU buffers would not fit ("# Reducing
maxBytes to N due to memory limitation"); the CPU backend does the same for
host memory, so `-b 64G -e 64G` runs the largest size that fits instead of
dying in numpy's allocator or in the kernel's OOM killer.

The room is counted per host, for all ranks on it together: the host's
MemAvailable (/proc/meminfo), and the memory cgroup's limit minus its usage
(v1 or v2, the tightest limit on the way up the hierarchy; reclaimable page
cache counted as free), shared by the ranks in that cgroup.  Pure functions
of file contents, so every branch is tested without a machine to match.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MiB = 1 << 20
NO_LIMIT = 1 << 62  # cgroup v1 writes "no limit" as a huge number
HEADROOM_FRACTION = 0.10  # of the room, left to the OS, MPI and Python
HEADROOM_MIN = 64 * MiB  # per rank
ALIGN = 4096


@dataclass(frozen=True)
class MemoryRoom:
    """What one rank sees: its host, the host's MemAvailable, its memory cgroup
    (None without a limit) and the bytes that cgroup still allows."""

    host: str
    available: int | None
    cgroup: str | None = None
    cgroup_room: int | None = None

    def describe(self) -> str:
        bits = []
        if self.available is not None:
            bits.append(f"MemAvailable {self.available} B")
        if self.cgroup is not None and self.cgroup_room is not None:
            bits.append(f"cgroup {self.cgroup} allows {self.cgroup_room} B more")
        return ", ".join(bits) or "unknown"


def mem_available(meminfo: str) -> int | None:
    """MemAvailable (bytes) from /proc/meminfo text; None if absent."""
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            try:
                return int(parts[1]) * (1024 if len(parts) > 2 and parts[2].lower() == "kb" else 1)
            except (IndexError, ValueError):
                return None
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _stat_value(text: str | None, *keys: str) -> int:
    if not text:
        return 0
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k in keys:
            try:
                return int(v)
            except ValueError:
                return 0
    return 0


def cgroup_dirs(proc_cgroup: str, root: Path) -> list[tuple[str, Path, int]]:
    """Candidate memory-cgroup directories of this process, leaf first, each with
    the cgroup version: v2 ('0::/path') under root or root/unified, v1
    ('N:...memory...:/path') under root/memory.  Only directories that exist."""
    out: list[tuple[str, Path, int]] = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.strip().lstrip("/")
        if controllers == "":
            bases, version = [root, root / "unified"], 2
        elif "memory" in controllers.split(","):
            bases, version = [root / "memory"], 1
        else:
            continue
        for base in bases:
            leaf = base / rel if rel else base
            if not leaf.is_dir():
                continue
            d = leaf
            while True:
                out.append(("/" if d == base else "/" + str(d.relative_to(base)), d, version))
                if d == base:
                    break
                d = d.parent
            break
    return out


def cgroup_room(proc_cgroup: str, root: Path = Path("/sys/fs/cgroup")) -> tuple[str, int] | None:
    """(cgroup path, bytes it still allows) for the tightest memory limit on this
    process's way up the cgroup hierarchy, or None when nothing limits it.
    Inactive page cache counts as room (the kernel reclaims it before OOM)."""
    best: tuple[str, int] | None = None
    for name, d, version in cgroup_dirs(proc_cgroup, root):
        if version == 2:
            raw, usage, stat = _read(d / "memory.max"), _read(d / "memory.current"), _read(d / "memory.stat")
            cache = _stat_value(stat, "inactive_file")
        else:
            raw, usage, stat = (_read(d / "memory.limit_in_bytes"), _read(d / "memory.usage_in_bytes"),
                                _read(d / "memory.stat"))
            cache = _stat_value(stat, "total_inactive_file", "inactive_file")
        if raw is None or raw.strip() in ("", "max"):
            continue
        try:
            limit = int(raw.strip())
            used = int((usage or "0").strip())
        except ValueError:
            continue
        if limit >= NO_LIMIT:
            continue
        room = max(0, limit - used + cache)
        if best is None or room < best[1]:
            best = (name or "/", room)
    return best


def this_process_room(host: str) -> MemoryRoom:
    """The MemoryRoom of the calling process, read from /proc and /sys/fs/cgroup."""
    meminfo = _read(Path("/proc/meminfo")) or ""
    proc_cgroup = _read(Path(f"/proc/{os.getpid()}/cgroup")) or ""
    cg = cgroup_room(proc_cgroup)
    return MemoryRoom(host, mem_available(meminfo), cg[0] if cg else None, cg[1] if cg else None)


def bytes_per_rank(max_bytes: int, nranks: int, unalign: int) -> int:
    """Host memory one CPU-backend rank needs for -e max_bytes: its send and
    receive buffers (padded for -u and page alignment), the scratch block of
    in-place reduce_scatter, and one more buffer's worth for the temporary
    copies MPI's large-message algorithms make (MPICH's allreduce and
    reduce_scatter allocate a message-sized buffer)."""
    one = max_bytes + 8 * unalign + ALIGN
    return 3 * one + max_bytes // max(1, nranks) + 64


def _usable_share(rooms: Iterable[MemoryRoom]) -> tuple[int, str] | None:
    """Bytes one rank may use on the tightest host or memory cgroup, after
    HEADROOM_FRACTION (at least HEADROOM_MIN) is kept free, and which limit
    that is; None when no room is known at all."""
    rooms = list(rooms)
    per_host: dict[str, list[MemoryRoom]] = {}
    per_cgroup: dict[tuple[str, str], list[MemoryRoom]] = {}
    for r in rooms:
        per_host.setdefault(r.host, []).append(r)
        if r.cgroup is not None and r.cgroup_room is not None:
            per_cgroup.setdefault((r.host, r.cgroup), []).append(r)
    shares: list[tuple[int, str]] = []
    for host, rs in per_host.items():
        avail = [r.available for r in rs if r.available is not None]
        if avail:
            shares.append((min(avail) // len(rs), f"host {host}: MemAvailable {min(avail)} B for {len(rs)} "
                                                  f"rank{'s' if len(rs) > 1 else ''}"))
    for (host, cg), rs in per_cgroup.items():
        room = min(r.cgroup_room for r in rs if r.cgroup_room is not None)  # grouped: every one has a limit
        shares.append((room // len(rs), f"host {host}: memory cgroup {cg} allows {room} B more for {len(rs)} "
                                        f"rank{'s' if len(rs) > 1 else ''}"))
    if not shares:
        return None
    share, why = min(shares)
    return share - max(int(share * HEADROOM_FRACTION), HEADROOM_MIN), why


def largest_fitting(rooms: Iterable[MemoryRoom], nranks: int, unalign: int) -> tuple[int, str] | None:
    """The largest -e whose buffers fit every host (and every memory cgroup)
    with all their ranks at once, keeping HEADROOM_FRACTION (at least
    HEADROOM_MIN per rank) free; and which host limits it.  None when no
    room is known at all (nothing to clamp against)."""
    found = _usable_share(rooms)
    if found is None:
        return None
    usable, why = found
    # bytes_per_rank(m) = (3 + 1/n) m + 3 (8 unalign + ALIGN) + 64, solved for m
    fixed = 3 * (8 * unalign + ALIGN) + 64
    per_byte = 3 + 1 / max(1, nranks)
    limit = int(max(0, usable - fixed) / per_byte)
    while limit > 0 and bytes_per_rank(limit, nranks, unalign) > usable:
        limit -= 1
    return max(0, limit), why


def fill_cache_budget(rooms: Iterable[MemoryRoom], max_bytes: int, nranks: int, unalign: int) -> int:
    """Bytes a rank may keep of generated check data (core.verifiable.FillCache): what
    its share of the room holds beyond its buffers for -e max_bytes, up to the
    three streams a sweep reuses (the timed loop's inputs, the check's inputs and
    its expected result, each at most one buffer).  Never what the buffers need:
    with little room the check generates its data each time, as it did before."""
    want = 3 * (max_bytes + ALIGN)
    found = _usable_share(rooms)
    if found is None:
        return want  # nothing known to clamp against: as -e itself
    return max(0, min(want, found[0] - bytes_per_rank(max_bytes, nranks, unalign)))


def clamp_note(requested: int, limit: int, why: str) -> str:
    """Banner note saying why -e was lowered (next to nccl-tests' own line)."""
    return (f"host memory: -e {requested} does not fit: each rank needs about 3 x -e (send, receive and MPI's "
            f"temporary buffer) and {why}; keeping {int(HEADROOM_FRACTION * 100)}% free, the largest size is "
            f"{limit} B")

