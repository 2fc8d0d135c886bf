"""Why a run failed or hung, from what its log says: NCCL's WARN lines, nccl-tests' failure lines,
the table's `#wrong` column, and where the log stops.

Each signature is raised as a `traps.Trap` (the same lines, the same cause ids) with the line that
shows it and the fix.  The messages are NCCL's own (NVIDIA/nccl, every tag v2.4.8-1 .. v2.30.7-1):

* bootstrap.cc `WARN("Bootstrap : no socket interface found")`, `"NET/Socket : No usable listening
  interface found"`: NCCL_SOCKET_IFNAME names nothing that is up (or no interface has an address);
* net_ib.cc `"NET/IB : Got completion from peer %s with error %d, opcode %d, len %d, vendor err %d"`
  (2.12-2.27; `status=%s(%d) ... vendor_err=%u` from 2.28): an ibverbs work completion failed.
  Error 4 is IBV_WC_LOC_PROT_ERR and vendor error 0x51 (81) a local protection fault: the HCA could not
  reach the GPU memory it was given -- GPUDirect RDMA blocked by PCIe ACS or the IOMMU (NCCL's
  troubleshooting guide, "PCI Access Control Services"); error 12 (retry exceeded) a link or peer down;
* init.cc ncclGetErrorString(ncclRemoteError) = "remote process exited or there was a network error",
  socket.cc "Net : Connection closed by remote peer", "Connection reset by peer": a peer died or the
  network dropped it; with GPUDirect RDMA in use this is also ACS/IOMMU's signature;
* cudawrap.h "Cuda failure %d '%s'", alloc.h "Failed to CUDA calloc", nccl-tests' "Test CUDA failure":
  CUDA errors, 'out of memory' among them;
* a log that stops after NCCL set up its P2P connections, with no table and no error: the hang that
  ACS on PCIe switches causes (P2P writes routed to the root complex and dropped).  A log whose last
  line is a gap ('...', '[snip]': the paste lost its tail) does not show where the run stopped: the
  hang is then only possible.  Where NCCL's lines say P2P is off, no peer-to-peer write is left for
  ACS to drop: with SHM on it is not suspected; with SHM off too, only through GPUDirect RDMA.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.results import ResultRow
from .nccl_log import NcclLogFacts
from .traps import ERROR, WARN, Trap

_BOOTSTRAP = re.compile(r"no socket interface found|No usable listening interface found|"
                        r"Bootstrap : no socket interface|No interface found in the same subnet", re.IGNORECASE)
_IB_COMPLETION = re.compile(r"Got completion (?:from peer \S+ )?with (?:error (?P<err>\d+)|status=(?:\w+\()?(?P<st>\d+)\)?)"
                            r".*?vendor[ _]err(?:or)?[ =]?(?P<vendor>\d+)", re.IGNORECASE)
_REMOTE = re.compile(r"remote process exited or there was a network error|Connection closed by remote peer|"
                     r"Connection reset by peer|ncclRemoteError|Net : Call to recv from .* failed", re.IGNORECASE)
# socket.cc "Connect to %s failed : %s" / "Call to connect returned %s" as a WARN: a peer NCCL cannot reach at all
_UNREACHABLE = re.compile(r"(?:Connect to|connect to) \S+ failed ?: ?(?:Connection refused|No route to host|"
                          r"Connection timed out|Network is unreachable)|socketStartConnect: Connect to", re.IGNORECASE)
_OOM = re.compile(r"out of memory|Failed to CUDA calloc|cudaMalloc.*failed|Cannot allocate memory|"
                  r"CUDA_ERROR_OUT_OF_MEMORY|failed to allocate", re.IGNORECASE)
_CUDA = re.compile(r"Test CUDA failure|Cuda failure|unhandled cuda error|CUDA error|cudaError|CUDA driver version is "
                   r"insufficient", re.IGNORECASE)
_VERSION = re.compile(r"version mismatch|mismatched (?:nccl )?version|driver version is insufficient|"
                      r"undefined symbol: nccl|GLIBC_\S+ not found|requires a newer", re.IGNORECASE)
_NO_IB_DEVICE = re.compile(r"NET/IB : No device found")


def _first(lines: Sequence[str], regex: re.Pattern[str]) -> str | None:
    return next((ln for ln in lines if regex.search(ln)), None)


def _gdr_in_use(log: NcclLogFacts | None) -> bool:
    if log is None:
        return False
    return any(c.gdr for c in log.connections if c.kind == "NET") or bool(log.gdr_in_rings) or any(
        d.gdr for d in log.net_devices if d.transport != "Socket")


@dataclass(frozen=True)
class _RunLog:
    """What `failure_traps` was told about one run, with the lines its signatures are searched in."""

    log: NcclLogFacts | None
    text: list[str]  # NCCL's WARN lines, then the failure lines
    env: dict[str, str]
    rows: Sequence[ResultRow]
    status: str
    out_of_bounds: int | None
    version_note: str | None
    nnodes: int | None
    gpus_per_host: int | None
    ends_in_gap: bool


def _bootstrap_traps(run: _RunLog, traps: list[Trap]) -> None:
    """No interface for NCCL's bootstrap, and NCCL_SOCKET_IFNAME as the likely cause when set."""
    if not (line := _first(run.text, _BOOTSTRAP)):
        return
    ifname = run.env.get("NCCL_SOCKET_IFNAME")
    traps.append(Trap(
        "bootstrap-no-interface",
        f"NCCL found no network interface for its bootstrap: '{line.strip()[:200]}'"
        + (f" with NCCL_SOCKET_IFNAME={ifname}" if ifname else ""),
        "set NCCL_SOCKET_IFNAME to an interface that is up and has an address on every host "
        "(`ip -br addr`; prefix match, '=' exact, '^' excludes), or unset it; in containers check that "
        "the network namespace has that interface", ERROR))
    if ifname:
        traps.append(Trap(
            "iface-list-empty",
            f"NCCL_SOCKET_IFNAME={ifname} selects no usable interface (NCCL: '{line.strip()[:120]}')",
            "name an interface that exists and is up on every host, or unset NCCL_SOCKET_IFNAME", ERROR))


def _hca_list_trap(run: _RunLog, traps: list[Trap]) -> None:
    """NCCL_IB_HCA set and NCCL found no IB device: the list selects nothing."""
    if run.log is not None and run.log.ib_no_device and run.env.get("NCCL_IB_HCA"):
        traps.append(Trap(
            "hca-list-empty",
            f"NCCL_IB_HCA={run.env['NCCL_IB_HCA']} and NCCL's 'NET/IB : No device found.': the list selects no "
            "active RDMA port, so NCCL falls back to sockets",
            "fix NCCL_IB_HCA (names from ibv_devices / ibstat; '=' exact, '^' excludes) or unset it", ERROR))


def _ib_completion(text: Sequence[str]) -> tuple[str, int, int] | None:
    """(line, error, vendor error) of the first failed ibverbs work completion, or None."""
    for ln in text:
        if m := _IB_COMPLETION.search(ln):
            return ln, int(m.group("err") or m.group("st") or -1), int(m.group("vendor"))
    return None


def _ib_completion_traps(run: _RunLog, traps: list[Trap]) -> None:
    """A failed IB work completion; a local protection fault (error 4 / vendor 0x51) also names ACS/IOMMU."""
    if (ib := _ib_completion(run.text)) is None:
        return
    line, err, vendor = ib
    traps.append(Trap(
        "ib-completion-error",
        f"an InfiniBand work completion failed with error {err}, vendor error {vendor}: '{line.strip()[:220]}'",
        {12: "error 12 is 'transport retry counter exceeded': a link, switch port or the peer went away; "
             "check ibstat / the fabric's error counters on both hosts and the peer's own log"}.get(
            err, "look the error up in ibv_wc_status_str(); check the HCAs' firmware and the fabric's error "
                 "counters"), ERROR))
    if err == 4 or vendor == 81:
        traps.append(Trap(
            "acs-iommu",
            f"IB completion error {err} / vendor error {vendor} (local protection): the NIC could not DMA to "
            "GPU memory -- GPUDirect RDMA blocked by PCIe ACS or the IOMMU",
            "disable ACS on the PCIe switches (setpci ... ECAP_ACS+6.w=0 at boot, or the BIOS option) and put "
            "the IOMMU in passthrough (iommu=pt) or off; in VMs enable ATS; as a stopgap NCCL_NET_GDR_LEVEL=LOC "
            "(no GDR) confirms it", ERROR))


def _remote_exit_traps(run: _RunLog, traps: list[Trap]) -> None:
    """A lost peer; with GPUDirect RDMA in use (or possibly in use, between hosts, with no other error
    named) also ACS/IOMMU, unless an IB completion error named it already."""
    if not (line := _first(run.text, _REMOTE)):
        return
    log, text, nnodes = run.log, run.text, run.nnodes
    gdr = _gdr_in_use(log)
    traps.append(Trap(
        "network-error-remote-exit",
        f"NCCL lost a peer (a remote process exited or a network error): '{line.strip()[:200]}'",
        "find the first rank that failed (its own log: an earlier WARN, a CUDA error, an OOM kill in dmesg); "
        "if none did, the network dropped the connection: check the NICs' and switches' error counters",
        ERROR))
    nets = [c for c in log.connections if c.kind == "NET"] if log is not None else []
    gdr_unknown = not gdr and not nets and (nnodes or 0) > 1 and not _first(text, _OOM) and not _first(text, _CUDA)
    if (gdr or gdr_unknown) and not any(t.name == "acs-iommu" for t in traps):
        traps.append(Trap(
            "acs-iommu",
            ("'remote process exited or there was a network error' while NCCL used GPUDirect RDMA: the known "
             "signature of PCIe ACS or the IOMMU redirecting the NIC's peer-to-peer DMA" if gdr else
             f"possible: a peer lost between {nnodes} hosts with no other error named, and the log does not show "
             "whether GPUDirect RDMA was in use; with GDR this is the known signature of PCIe ACS or the IOMMU"),
            "check ACS on the PCIe switches (lspci -vvv | grep ACSCtl: SrcValid- expected) and the IOMMU "
            "(iommu=pt); NCCL_NET_GDR_LEVEL=LOC (GDR off) confirms it if the error goes away", WARN))


def _unreachable_trap(run: _RunLog, traps: list[Trap]) -> None:
    """A peer NCCL could not connect to, unless a lost peer was already named."""
    if (line := _first(run.text, _UNREACHABLE)) and not any(t.name == "network-error-remote-exit" for t in traps):
        traps.append(Trap(
            "network-error-remote-exit",
            f"NCCL could not reach a peer (a network error): '{line.strip()[:200]}'",
            "the address is the interface NCCL picked: set NCCL_SOCKET_IFNAME to the interface the hosts reach each "
            "other on (not docker0, lo or a management NIC) and check firewalls between the hosts", ERROR))


def _alloc_or_cuda_trap(run: _RunLog, traps: list[Trap]) -> None:
    """A failed allocation, or else a failed CUDA call (an OOM is also a CUDA error: named once)."""
    if line := _first(run.text, _OOM):
        traps.append(Trap(
            "oom-or-alloc-failure",
            f"an allocation failed (out of memory): '{line.strip()[:200]}'",
            "lower -e (the largest size) or the number of GPUs per process, check for other processes on the "
            "GPUs (nvidia-smi); for ibv_reg_mr 'Cannot allocate memory' raise the locked-memory limit "
            "(ulimit -l unlimited)", ERROR))
    elif line := _first(run.text, _CUDA):
        traps.append(Trap(
            "cuda-error", f"a CUDA call failed: '{line.strip()[:200]}'",
            "check the driver and CUDA runtime versions (nvidia-smi, the CUDA version nccl-tests was built "
            "with), the GPU's health (dmesg: Xid) and CUDA_VISIBLE_DEVICES", ERROR))


def _version_trap(run: _RunLog, traps: list[Trap]) -> None:
    """Versions that do not fit: the caller's note (a warning) or a line of the log (an error)."""
    version_note = run.version_note
    if version_note or (line := _first(run.text, _VERSION)):
        traps.append(Trap(
            "version-mismatch", version_note or f"versions do not fit: '{(line or '').strip()[:200]}'",
            "build nccl-tests against the NCCL it runs with (make NCCL_HOME=...), and use one NCCL and one "
            "driver version on every host", ERROR if not version_note else WARN))


def _wrong_results_trap(run: _RunLog, traps: list[Trap]) -> None:
    """Rows with #wrong > 0 or out-of-bounds values counted by nccl-tests."""
    out_of_bounds = run.out_of_bounds
    wrong = [r for r in run.rows if (r.out_of_place.wrong or 0) > 0 or (r.in_place.wrong or 0) > 0]
    if wrong or (out_of_bounds or 0) > 0:
        r0 = wrong[0] if wrong else None
        traps.append(Trap(
            "wrong-results",
            (f"{len(wrong)} row(s) with #wrong > 0, first at {r0.size} B ({r0.out_of_place.wrong} out of place, "
             f"{r0.in_place.wrong} in place)" if r0 else "")
            + (f"{'; ' if r0 else ''}nccl-tests counted {out_of_bounds} out of bounds value(s)" if out_of_bounds else ""),
            "wrong results are a hardware or driver fault until shown otherwise: run ncclbench health or "
            "nccl-tests per GPU pair to find the GPU or link, check dmesg for Xid errors", ERROR))


def _hang_traps(run: _RunLog, traps: list[Trap]) -> None:
    """A run that did not finish, with no row and no error named: a hang, and ACS/IOMMU as its
    likely cause where peer-to-peer traffic was in play."""
    if run.status in ("complete", "failed", "unknown") or run.rows or any(t.severity == ERROR for t in traps):
        return
    log, ends_in_gap = run.log, run.ends_in_gap
    after_p2p = log is not None and any(c.kind == "P2P" for c in log.connections)
    # NCCL's own lines say P2P is off: no peer-to-peer write between its GPUs for ACS to reroute
    p2p_off = log is not None and log.p2p_disabled is True
    # a log whose last line is a gap ('...', '[snip]') was cut by whoever pasted it: no row is shown,
    # but the rows may be what was cut, so the hang is a possibility, not what the log says
    traps.append(Trap(
        "hang-no-table",
        ("possible: no result row after the header, but the log ends in a gap (lines cut out of the paste), "
         "so it does not show where the run stopped" if ends_in_gap else
         "the log stops after the header with no result row and no error"
         + (" -- after NCCL set up its P2P connections" if after_p2p else "")),
        ("get the whole log; if the run did hang, " if ends_in_gap else "")
        + "re-run with NCCL_DEBUG=INFO and a timeout (-T 300 / timeout(1))"
        + ("" if p2p_off else "; a hang right after P2P set-up is the signature of PCIe ACS (run with "
           "NCCL_P2P_DISABLE=1 to confirm)"), WARN if ends_in_gap else ERROR))
    _hang_acs_trap(run, traps, after_p2p, p2p_off)


def _hang_acs_trap(run: _RunLog, traps: list[Trap], after_p2p: bool, p2p_off: bool) -> None:
    """ACS/IOMMU as a possible cause of the hang: through GPUDirect RDMA where P2P and SHM are off
    on a host of several GPUs, through peer-to-peer writes where P2P is on."""
    log, gpus_per_host = run.log, run.gpus_per_host
    several = (gpus_per_host or 0) > 1
    hung = "possible" + (", if the run hung (the log ends in a gap)" if run.ends_in_gap else "") + ": "
    if p2p_off and log is not None and log.shm_disabled is True and several:
        # P2P and SHM off: the GPUs of one host talk through NCCL's network transport; ACS still
        # stops GPUDirect RDMA (the NIC's peer-to-peer reads and writes of GPU memory)
        traps.append(Trap(
            "acs-iommu",
            hung + f"a hang with {gpus_per_host} GPUs on one host whose traffic NCCL sends through its network "
            f"transport ({log.p2p_disabled_reason or 'P2P off'}, SHM off): with GPUDirect RDMA the NIC reads "
            "and writes GPU memory peer-to-peer, which PCIe ACS routes to the root complex, where the IOMMU "
            "drops it",
            "disable ACS on the PCIe switches and check the IOMMU (iommu=pt); NCCL_NET_GDR_LEVEL=LOC (GDR off) "
            "confirms it if the run then completes", WARN))
    elif not p2p_off and (after_p2p or several):
        traps.append(Trap(
            "acs-iommu",
            hung + ("a hang right after NCCL set up its P2P connections" if after_p2p else
                    f"a hang with {gpus_per_host} GPUs on one host, where NCCL uses PCIe/NVLink peer-to-peer")
            + ": PCIe ACS routes GPU peer-to-peer writes to the root complex, where the IOMMU drops them",
            "disable ACS on the PCIe switches and check the IOMMU (iommu=pt); NCCL_P2P_DISABLE=1 confirms "
            "it if the run then completes", WARN))


# In order: some look at the traps raised before them (one ACS/IOMMU trap, one lost peer, a hang
# only where no error was named).
_SIGNATURES: tuple[Callable[[_RunLog, list[Trap]], None], ...] = (
    _bootstrap_traps, _hca_list_trap, _ib_completion_traps, _remote_exit_traps, _unreachable_trap,
    _alloc_or_cuda_trap, _version_trap, _wrong_results_trap, _hang_traps)


def failure_traps(log: NcclLogFacts | None, failure_lines: Sequence[str], rows: Sequence[ResultRow], *,
                  status: str = "complete", out_of_bounds: int | None = None,  # "unknown": no nccl-tests output
                  version_note: str | None = None, nnodes: int | None = None,
                  gpus_per_host: int | None = None, ends_in_gap: bool = False) -> list[Trap]:
    """The failure signatures in a run's log (module docstring), each with the line that shows it."""
    warns = list(log.warnings) if log is not None else []
    run = _RunLog(log, warns + list(failure_lines), dict(log.env) if log is not None else {}, rows, status,
                  out_of_bounds, version_note, nnodes, gpus_per_host, ends_in_gap)
    traps: list[Trap] = []
    for signature in _SIGNATURES:
        signature(run, traps)
    return traps


__all__ = ["failure_traps"]
