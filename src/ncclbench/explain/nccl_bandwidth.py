"""NCCL's own bandwidth model: the constants and per-channel formulas NCCL plans with, one function
per formula, read in NCCL's source at the tags named (nothing here is fitted to measurements).
`ceiling.py` assembles them into the bound of a run.

NCCL's constants (NVIDIA/nccl):
* NVLink GB/s per link (src/graph/topo.h, ncclTopoNVLinkBw): SM60 18, SM70 20,
  SM80 20, SM86 12, SM90 20.6 (20.0 before v2.20.3-1), SM100 40.1 (40.0 in
  v2.26.2-1 .. v2.27.3-1).  A GPU's NVLink edge is links x that.
* PCIe: width x kvDictPciGen / 80 with kvDictPciGen 15/30/60/120/240/480 for
  Gen1..Gen6 (src/graph/topo.cc v2.28.9-1, ncclTopoAddPci): Gen4 x16 = 24 GB/s.
* NIC: sysfs speed Mb/s / 8000 (topo.cc, ncclTopoAddNet), and per channel at
  most the largest entry of the search's inter-node speed array not above it
  (src/graph/search.cc v2.28.9-1: speedArrayInter tops at 48, sm90 at 48, sm100
  at 96): a 400 Gb/s NIC plans at 48 GB/s, 200 Gb/s at 24, 100 Gb/s at 12.
* NVLS, one model (`nvls_model`) that both picks the algorithm and sizes the
  ceiling, NCCL's own stepped figures: the search (src/graph/search.cc
  v2.28.9-1, ncclTopoCompute) forces nCh = min(NCCL_MAX_NVLS_ARITY 32, GPUs)
  channels in one NVLink domain and charges a GPU's switch link (nCh+1) x the
  channel bw (ncclTopoSearchTryNvls), the channel bw stepping down NCCL's intra
  speed array (sm90 {60,50,40,...}, sm100 {90,80,70,...}); the model
  (tuning.cc ncclTopoTuneModel, v2.28.3-1+) is then per channel bw x
  nvlsEfficiency (Hopper 0.85, Blackwell 0.74) x (nCh-1)/nCh x 2 for
  all_reduce ("pipelines two operations"), busbw = nCh x that.  Bounded: at
  most 2 x efficiency x the GPU's NVLink, whatever the GPU count (72 GPUs of an
  NVL72 rack: 32 channels x 20 GB/s -> 917.6 GB/s).  Left out: the graph's
  bwInter, which NCCL's search raises after the fact and tuning.cc takes as a
  second per-channel cap; on 8x B200 it would cap NVLS at 8 x 90 = 720 GB/s,
  below the 830-845 GB/s published (bench/results/explain-published.md).
* Multi-node NVLink (GB200/GB300 NVL racks, `explain.mnnvl`): hosts in one
  NVLink fabric clique are one NCCL node; Ring and NVLS are modelled over all
  the domain's GPUs as on one NVSwitch host.
* Tree all_reduce x 0.92 (tuning.cc "busBw*.92"); with 2 nodes a tree's NIC
  traffic is halved (each node is a leaf of one of the two trees).  Left out:
  the tree's per-channel caps (perChMaxTreeBws) and x 0.85 for the simple
  TREE pattern, which need the tree graph's channel count.
* Several nodes, or several NVLink domains (GB200/GB300 racks joined by their
  trays' NICs, each domain one NCCL node: `domains_joined`), NCCL's own model
  per algorithm (tuning.cc ncclTopoTuneModel, v2.28.3-1 .. v2.30.7-1):
  - Ring: nCh x bw, bw = bwIntra on 2 nodes, bwInter past 2 (the same speed for
    a ring); every channel crosses each GPU's NVLink once and leaves the node
    through one NIC, so min(the GPU's NVLink, the node's NICs).
  - NVLSTree (`nvls_tree_model`): the NVLS graph of a node with NICs
    (`nvls_net_graph`: search.cc ncclTopoSearchRecNet gives each channel a head,
    one GPU with its own NIC, so min(32, GPUs, heads) channels, at the node's
    own NVLS channel speed over NVLink and the NIC's plan through the head),
    then per channel min(bwIntra x nvlsEfficiency x (nCh-1)/nCh x 2 (NVLink
    within the node), bwInter x (2 on 2 nodes: "Handle 2 node case of
    NVLSTree") (the tree between nodes, through the heads' NICs),
    perChMaxNVLSTreeBws (NCCL's cap per channel at 2 / more nodes)), busbw =
    nCh x that.  Left out: NCCL's cap of the multi-node graph's speeds at the
    GPU-NIC path, a plan that published figures pass (`nvls_net_graph`).  The
    fabric that joins the nodes' NICs (switch tiers, oversubscription) is in
    neither NCCL's model nor the facts read.
"""

from __future__ import annotations

from dataclasses import dataclass


def fmt_gbps(x: float) -> str:
    """370.8, 48, 0.012: one decimal, and two significant digits below 1 GB/s (latency-bound sizes)."""
    if 0 < abs(x) < 1:
        return f"{x:.2g}"
    return f"{x:.1f}".rstrip("0").rstrip(".")


_PCI_GEN_BW = {1: 15, 2: 30, 3: 60, 4: 120, 5: 240, 6: 480}  # kvDictPciGen, x100 Mb/s per lane
_SPEED_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24,
                0.12)
_SPEED_INTER_SM90 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
_SPEED_INTER_SM100 = (96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2,
                      0.24, 0.12)
_SPEED_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
_SPEED_INTRA_SM100 = (90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)
_SPEED_INTRA_SM100_229 = (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0)  # v2.29.2-1+
NVLS_EFFICIENCY = {9: 0.85, 10: 0.74}  # by compute-capability major: Hopper, Blackwell
# tuning.cc ncclTunerConstantsDefaults.perChMaxNVLSTreeBws [compCap][N1, N2, N4]: NCCL's cap on one NVLSTree
# channel on 2 nodes / more than 2 (N1 is 0: NVLSTree needs several nodes).  Hopper 57.7 / 45.5 from v2.28.3-1 on;
# Blackwell 96.0 / 80.0 from v2.30.3-1 (> 2 nodes: 43.1 in v2.28.3-1 .. v2.28.7-1, 43.8 in v2.28.9-1 .. v2.29.7-1).
# NCCL before 2.28.3 had neither this cap nor nvlsEfficiency (NVLSTree: min(bwIntra, bwInter, halved past 2 nodes)
# x 5/6 as algbw, v2.26.2-1 .. v2.27.7-1): as for NVLS, the newest model is used for every version.
NVLS_TREE_CHANNEL_CAP = {9: (57.7, 45.5), 10: (96.0, 80.0)}
TREE_ALLREDUCE_EFFICIENCY = 0.92
PAT_EFFICIENCY = 0.75

NVLS_MAX_ARITY = 32  # NCCL_MAX_NVLS_ARITY (src/include/device.h, v2.23.4-1 .. v2.30.7-1)
RING_LIKE = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
POINT_TO_POINT = ("alltoall", "sendrecv")
# scatter / gather: the root's link carries the (n-1)/n of the data that busbw counts (nccl-tests' factor),
# so on one host the root GPU's own link bounds them; measured at 99-102 % of it on 2 and 4 H100 and H200
# (bench/results/gpu-h100x4-2026-11-26/parity-*gpu.md).  Across hosts no model: the root's NIC share.
ROOTED = ("scatter", "gather")


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(x) for x in text.split(".")[:3])
    except ValueError:
        return None


def nccl_nvlink_bw(cc: tuple[int, int], nccl_version: str | None = None) -> float:
    """GB/s NCCL assigns one NVLink (topo.h ncclTopoNVLinkBw), for the NCCL version if known."""
    sm = cc[0] * 10 + cc[1]
    v = _version(nccl_version)
    if sm >= 100:
        return 40.0 if v is not None and (2, 26) <= v[:2] and v < (2, 27, 5) else 40.1
    if sm >= 90:
        return 20.0 if v is not None and v < (2, 20) else 20.6
    if sm == 86:
        return 12.0
    if sm >= 70:
        return 20.0
    if sm >= 60:
        return 18.0
    return 20.0


def nccl_pcie_bw(gen: int, width: int) -> float:
    """NCCL's PCIe link bandwidth: width x gen/80 (Gen4 x16 = 24, Gen5 x16 = 48 GB/s)."""
    return width * _PCI_GEN_BW.get(gen, 60) / 80.0


def _inter_speeds(cc: tuple[int, int] | None) -> tuple[float, ...]:
    """The search's speed array for a node with NICs (search.cc speedArrayInter, sm90 / sm100 variants)."""
    sm = cc[0] * 10 + cc[1] if cc else 0
    return _SPEED_INTER_SM100 if sm >= 100 else _SPEED_INTER_SM90 if sm >= 90 else _SPEED_INTER


def nccl_nic_channel_bw(gbps: float, cc: tuple[int, int] | None) -> float:
    """The most NCCL plans through one NIC per channel: speed/8000 floored to the search's speed array."""
    raw = gbps * 1000 / 8000
    speeds = _inter_speeds(cc)
    return next((s for s in speeds if s <= raw + 1e-9), speeds[-1])


def nvls_channels(n: int) -> int:
    """NVLS channels NCCL's search asks for in one NVLink domain of `n` GPUs: one per GPU, at most
    NCCL_MAX_NVLS_ARITY (search.cc ncclTopoCompute: maxChannels = min(32, GPUs), minChannels = max)."""
    return min(NVLS_MAX_ARITY, n)


def nvls_channel_bw(gpu_bw: float, n: int, cc: tuple[int, int], nccl_version: str | None = None,
                    channels: int | None = None) -> float:
    """NCCL's NVLS channel bw in one NVLink domain of `n` GPUs: the largest intra speed whose
    (nCh+1)-fold charge fits the GPU's switch link (search.cc ncclTopoSearchTryNvls: each channel
    crosses every GPU's link once, its head's twice) and whose nCh-fold total fits the box
    (ncclTopoCompute: totalBw x n/(n-1) for non-ring patterns); 0 when none does.  nCh is
    `nvls_channels(n)` unless `channels` says (NVLSTree: fewer heads with a NIC)."""
    if n < 2:
        return 0.0
    v = _version(nccl_version)
    speeds = (_SPEED_INTRA_SM90 if cc[0] < 10 else
              _SPEED_INTRA_SM100_229 if v is None or v >= (2, 29) else _SPEED_INTRA_SM100)
    ch = channels if channels is not None else nvls_channels(n)
    total = gpu_bw * n / (n - 1)
    for s in speeds:
        if s <= gpu_bw and s * ch <= total + 1e-6 and (ch + 1) * s <= gpu_bw + 1e-6:
            return s
    return 0.0


@dataclass
class NvlsModel:
    """NCCL's NVLS all_reduce figure in one NVLink domain (`nvls_model`), in nccl-tests' busbw units."""

    gpus: int
    channels: int
    channel_bw: float  # GB/s per channel from the search's speed array
    efficiency: float
    busbw: float

    @property
    def text(self) -> str:
        return (f"NVLS: NCCL's model {self.channels} channels x {fmt_gbps(self.channel_bw)} GB/s x {self.efficiency} "
                f"(NVLS efficiency) x {self.channels - 1}/{self.channels} x 2 = {fmt_gbps(self.busbw)} GB/s")


def nvls_model(gpu_bw: float, n: int, cc: tuple[int, int] | None,
               nccl_version: str | None = None) -> tuple[NvlsModel | None, str]:
    """The one NVLS model: NCCL's own per-channel figure for all_reduce over `n` GPUs of one NVLink
    domain whose switch links carry `gpu_bw` GB/s in NCCL's terms (tuning.cc ncclTopoTuneModel, v2.28.3-1+:
    nCh x bwIntra x nvlsEfficiency x (nCh-1)/nCh x 2).  Used both to pick NVLS over Ring and as NVLS's
    ceiling, so the two never disagree.  (None, why) where NCCL has no NVLS figure."""
    if cc is None or cc[0] not in NVLS_EFFICIENCY:
        return None, "NVLS: no NVLS efficiency for this GPU generation (NCCL: Hopper and Blackwell)"
    ch = nvls_channels(n)
    if ch < 2:
        return None, "NVLS needs at least 2 channels (tuning.cc)"
    s = nvls_channel_bw(gpu_bw, n, cc, nccl_version)
    if s <= 0:
        return None, f"NVLS: no channel speed fits {ch + 1} x the GPU's {fmt_gbps(gpu_bw)} GB/s"
    eff = NVLS_EFFICIENCY[cc[0]]
    return NvlsModel(n, ch, s, eff, ch * s * eff * (ch - 1) / ch * 2), ""


BASEBOARD_GPUS = 8  # an HGX/DGX NVSwitch baseboard holds at most 8 GPUs


def nvls_baseboard(m: NvlsModel, gpu_bw: float) -> tuple[float, str]:
    """NVLS all_reduce on one NVSwitch baseboard: NCCL's formula with the channel at its share of the GPU's
    switch link, gpu_bw / (nCh+1) (the bound the search steps down to), not the step it lands on.  NCCL's
    steps plan 8-link H800 at 15 GB/s a channel (178.5 GB/s) and 7 of 8 H200 at 40 (408), where the
    published systems reach 215 and 460; at the share the model gives 218.5 and 472.8, and within -4 %..+2 %
    of every published baseboard (bench/results/explain-published.md).  Across hosts (NVL72 racks) the
    stepped plan stays: the published rack sits below it, not above."""
    total = gpu_bw * m.gpus / max(1, m.gpus - 1)
    share = min(gpu_bw / (m.channels + 1), total / m.channels)
    v = m.channels * share * m.efficiency * (m.channels - 1) / m.channels * 2
    return v, (f"NVLS on one NVSwitch baseboard: {m.channels} channels x the switch link's share "
               f"{fmt_gbps(gpu_bw)}/{m.channels + 1} = {fmt_gbps(share)} GB/s x {m.efficiency} (NVLS efficiency) x "
               f"{m.channels - 1}/{m.channels} x 2 = {fmt_gbps(v)} GB/s (NCCL's speed steps plan "
               f"{fmt_gbps(m.busbw)})")


@dataclass
class NvlsNetGraph:
    """NVLSTree's NVLS graph in one node that has NICs (several nodes): its channels, each headed by one GPU with
    its own NIC, and the bandwidth per channel over NVLink (bwIntra) and through the head's NIC (bwInter)."""

    channels: int
    bw_intra: float
    bw_inter: float


def nvls_net_graph(gpu_bw: float, gpus: int, heads: int, nic_bw: float, cc: tuple[int, int],
                   nccl_version: str | None = None) -> tuple[NvlsNetGraph | None, str]:
    """NVLSTree's channels and their speeds for `gpus` GPUs of one node (an NVSwitch box or an NVLink domain)
    whose switch links carry `gpu_bw` GB/s in NCCL's terms, `heads` of them with a NIC of their own that NCCL
    plans at `nic_bw` GB/s a channel (`nccl_nic_channel_bw`).  search.cc (v2.26.2-1 .. v2.30.7-1):
    * channels: ncclTopoSearchRecNet, NVLS pattern: each channel is a NIC and its local GPU, the channel's head,
      no GPU heading two; ncclTopoCompute: maxChannels = min(NCCL_MAX_NVLS_ARITY, GPUs).  So nCh = min(32, GPUs,
      heads), and only the heads' NICs carry the tree between the nodes.
    * over NVLink: the node's own NVLS channel speed for nCh channels (`nvls_channel_bw`: (nCh+1) x it within the
      GPU's switch link).  With NICs NCCL's search also caps it at the GPU-NIC path (system->maxBw: 48 GB/s for
      a 400G NIC), a planning figure rather than the NVLS kernel's speed: on 2 nodes of 8 B200 it plans
      8 x 48 x 0.74 x 7/8 x 2 = 497 GB/s where 690 is published (coreweave/nccl-tests#92), so it is left out.
      Where it does not bind (H100 nodes: 40; NVL72 racks: 20 GB/s a channel) the two agree.
    * through the head's NIC: the NIC's plan.  NCCL's pass 2 raises bwInter only while below 2 x bwIntra, but
      the NVLS part per channel (bwIntra x efficiency x 2 x (nCh-1)/nCh) is below that, so the smaller of the
      two parts is the same."""
    ch = min(NVLS_MAX_ARITY, gpus, heads)
    if ch < 2:
        return None, f"NVLSTree: {ch} NVLS channel(s) ({heads} GPU(s) with a NIC of their own), NCCL needs 2"
    s = nvls_channel_bw(gpu_bw, gpus, cc, nccl_version, channels=ch)
    if s <= 0:
        return None, f"NVLSTree: no channel speed fits {ch + 1} x the GPU's {fmt_gbps(gpu_bw)} GB/s"
    return NvlsNetGraph(ch, s, nic_bw), ""


def nvls_tree_channel_cap(cc: tuple[int, int], nodes: int, nccl_version: str | None = None) -> float | None:
    """NCCL's cap on one NVLSTree channel over `nodes` nodes (perChMaxNVLSTreeBws), None where it has none."""
    caps = NVLS_TREE_CHANNEL_CAP.get(cc[0])
    if caps is None:
        return None
    if nodes <= 2 or cc[0] != 10:
        return caps[0] if nodes <= 2 else caps[1]
    v = _version(nccl_version)
    if v is not None and (2, 28, 3) <= v < (2, 28, 9):
        return 43.1
    if v is not None and (2, 28, 9) <= v < (2, 30):
        return 43.8
    return caps[1]


@dataclass
class NvlsTreeModel:
    """NCCL's NVLSTree all_reduce figure over `nodes` nodes (`nvls_tree_model`), in nccl-tests' busbw units."""

    nodes: int
    graph: NvlsNetGraph
    efficiency: float
    intra: float  # per channel: NVLS inside the node, over NVLink
    inter: float  # per channel: the tree between the nodes, through the heads' NICs
    cap: float  # per channel: NCCL's NVLSTree cap at this node count

    @property
    def per_channel(self) -> float:
        return min(self.intra, self.inter, self.cap)

    @property
    def busbw(self) -> float:
        return self.graph.channels * self.per_channel

    @property
    def bound(self) -> str:
        """'NVLink' where the NVLS part inside the node binds, 'NIC' where the tree between the nodes does."""
        return "NVLink" if self.intra <= min(self.inter, self.cap) else "NIC"

    def text(self, scope: str) -> str:
        g, ch = self.graph, self.graph.channels
        net = (f"{fmt_gbps(g.bw_inter)} x 2 (2 nodes: each is a leaf of one of the two trees) = {fmt_gbps(self.inter)}"
               if self.nodes <= 2 else fmt_gbps(self.inter))
        where = (f"NVLink within each {scope}" if self.bound == "NVLink" else
                 f"the network between the {scope}s (the heads' NICs)" if self.inter <= self.cap else
                 f"NCCL's NVLSTree cap per channel at {'2' if self.nodes <= 2 else 'more than 2'} nodes, the tree "
                 f"between the {scope}s")
        return (f"NVLSTree over {self.nodes} {scope}s: NCCL's NVLS graph {ch} channels, each headed by a GPU with its "
                f"own NIC, {fmt_gbps(g.bw_intra)} GB/s a channel over NVLink and {fmt_gbps(g.bw_inter)} "
                f"through the head's NIC; per channel min(NVLink {fmt_gbps(g.bw_intra)} x {self.efficiency} x "
                f"{ch - 1}/{ch} x 2 = {fmt_gbps(self.intra)}, network {net}, NCCL's cap "
                f"{fmt_gbps(self.cap)}) = {fmt_gbps(self.per_channel)} GB/s; {ch} x {fmt_gbps(self.per_channel)} = "
                f"{fmt_gbps(self.busbw)} GB/s, bound by {where}")


def nvls_tree_model(gpu_bw: float, gpus: int, heads: int, nic_bw: float, nodes: int, cc: tuple[int, int] | None,
                    nccl_version: str | None = None) -> tuple[NvlsTreeModel | None, str]:
    """NCCL's NVLSTree all_reduce over `nodes` nodes of `gpus` GPUs (tuning.cc ncclTopoTuneModel, v2.28.3-1 ..
    v2.30.7-1): per channel min(bwIntra x nvlsEfficiency x (nCh-1)/nCh x 2, bwInter x (2 on 2 nodes),
    perChMaxNVLSTreeBw), times nCh; the graph is `nvls_net_graph`'s.  (None, why) where NCCL has no figure."""
    if cc is None or cc[0] not in NVLS_EFFICIENCY:
        return None, "NVLSTree: no NVLS efficiency for this GPU generation (NCCL: Hopper and Blackwell)"
    g, why = nvls_net_graph(gpu_bw, gpus, heads, nic_bw, cc, nccl_version)
    if g is None:
        return None, why
    eff = NVLS_EFFICIENCY[cc[0]]
    cap = nvls_tree_channel_cap(cc, nodes, nccl_version) or float("inf")
    intra = g.bw_intra * eff * (g.channels - 1) / g.channels * 2
    return NvlsTreeModel(nodes, g, eff, intra, g.bw_inter * (2 if nodes <= 2 else 1), cap), ""
