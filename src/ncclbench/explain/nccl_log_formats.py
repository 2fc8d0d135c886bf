"""NCCL's INFO message formats, 2.18-2.30, as regular expressions, each with where it comes from.

Read from NVIDIA/nccl's source at the tags named (`git show TAG:path`); a
message here is what follows `NCCL INFO ` (see `log_line`).  Only formats
that were read in the source are matched: anything else that looks like one
of these lines but does not match is reported as unknown, never guessed.
"""

from __future__ import annotations

import re

# Names NCCL's model table uses (src/collectives.cc ncclAlgoStr/ncclProtoStr, every tag);
# 2.20-2.23 per-call lines print the index into these (src/include/nccl_common.h:
# NCCL_ALGO_TREE 0 .. NCCL_ALGO_NVLS_TREE 5, NCCL_ALGO_PAT 6 from v2.23.4-1).
ALGOS_BY_ID = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOS_BY_ID = ("LL", "LL128", "Simple")
# 2.24+ per-call lines and the profiler use ncclAlgoToString/ncclProtoToString
# (src/collectives.cc, v2.24.3-1 .. v2.30.7-1): upper case, underscores.
_ALGO_ALIASES = {"TREE": "Tree", "RING": "Ring", "COLLNET_DIRECT": "CollNetDirect",
                 "COLLNET_CHAIN": "CollNetChain", "NVLS": "NVLS", "NVLS_TREE": "NVLSTree", "PAT": "PAT"}
_PROTO_ALIASES = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}

# Collectives with an algorithm choice (ncclFuncStr, the rows of the model table).
NCCL_FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
NCCL_FUNC_OF_COLLECTIVE = {"broadcast": "Broadcast", "reduce": "Reduce", "all_gather": "AllGather",
                           "reduce_scatter": "ReduceScatter", "all_reduce": "AllReduce"}

OLDEST_READ = (2, 18)
NEWEST_READ = (2, 30)
# Older releases whose connection, channel and plugin lines were read too (OLD_CONN below); their
# per-call and model-table lines were not.
OLDEST_CONNECTIONS_READ = (2, 4)


def canonical_algo(name: str) -> str | None:
    """The model table's spelling of an algorithm name from any NCCL source, else None."""
    if name in ALGOS_BY_ID:
        return name
    return _ALGO_ALIASES.get(name.upper())


def canonical_proto(name: str) -> str | None:
    if name in PROTOS_BY_ID:
        return name
    return _PROTO_ALIASES.get(name.upper())


# init.cc VERSION_STRING "NCCL version %d.%d.%d%s+cuda%d.%d" (all tags).
VERSION = re.compile(r"^NCCL version (?P<v>\d+\.\d+\.\d+)(?P<suffix>\S*)")

# init.cc: INFO(NCCL_INIT, "Using network %s", comm->ncclNet->name) (v2.18.6-1 .. v2.30.7-1).
USING_NETWORK = re.compile(r"^Using network (?P<name>.+?)\s*$")
# Net plugin loading: src/net.cc (2.18-2.23), src/plugin/net*.cc (2.24+).
PLUGIN_LOADED = re.compile(r"^NET/Plugin ?: Loaded (?:net|coll|collnet) plugin (?P<name>.+?) \(v\d+\)")
PLUGIN_LOADED_EXTERNAL = re.compile(r"^Successfully loaded external network plugin (?P<lib>\S+)")  # 2.27+
PLUGIN_INTERNAL = re.compile(
    r"^NET/Plugin ?: (?:No plugin found|.*[Uu]sing internal (?:network plugin|implementation))")
# Any plugin-loading line, kept as evidence ("External network plugin %s is unsupported",
# "Failed to initialize NET plugin %s", "NET/Plugin: Could not find: ...", ...).
PLUGIN_EVENT = re.compile(r"^(?:NET/Plugin|Failed to initialize NET plugin|Initialized NET plugin|Assigned NET plugin|"
                          r"Successfully loaded external network plugin|External network plugin)")
PLUGIN_ASSIGNED = re.compile(r"^Assigned NET plugin (?P<name>.+?) to comm")  # 2.27+
# A plugin NCCL tried and could not use: net.cc "NET/Plugin : Plugin load returned %d : %s." (2.4-2.23),
# "NET/Plugin: Could not find: %s %s." / "Failed to initialize NET plugin %s" (plugin/net.cc 2.24+),
# "NET/Plugin : dlerror=%s No plugin found (%s), using internal implementation" (2.19+).
PLUGIN_FAILED = re.compile(r"^(?:NET/Plugin ?: (?:Plugin load returned|Could not find|Failed to find (?!ncclCollNet)|dlerror=)|"
                           r"Failed to initialize NET plugin|External network plugin .* is unsupported)")
# aws-ofi-nccl's own start line (its src/nccl_ofi_net.c: "Initializing " PACKAGE_STRING), e.g.
# "NET/OFI Initializing aws-ofi-nccl 1.5.0aws" / "... 1.17.1"; older releases "NET/OFI Using aws-ofi-nccl %s".
OFI_VERSION = re.compile(r"^NET/OFI (?:Initializing|Using) (?P<name>aws-ofi-nccl) (?P<version>\S+)")
OFI_PROVIDER = re.compile(r"^NET/OFI Selected [Pp]rovider is (?P<provider>[\w;-]+)")
# bootstrap.cc "Bootstrap : Using%s" with " %s:%s" per interface (every tag), e.g. "Bootstrap : Using eth0:10.0.0.1<0>".
BOOTSTRAP_USING = re.compile(r"^Bootstrap ?: Using (?P<ifs>.+)$")

# transport/net_ib.cc "NET/IB : Using%s %s; OOB %s:%s" with " [%d]%s:%d/%s" per device
# (v2.18.6-1, v2.24+), or " [%d]={[%d] %s:%d/%s, ...}" for merged devices (v2.20.5-1 .. v2.23.4-1).
IB_USING = re.compile(r"^NET/IB : Using(?P<devs>.*?)(?: \[RO\])?\s*(?:; OOB (?P<oob>\S+))?\s*$")
IB_DEV = re.compile(r"\[(?P<idx>\d+)\](?P<name>[^\s:\[\]{},]+):(?P<port>\d+)/(?P<ll>IB|RoCE|UNSPECIFIED)")
IB_MERGED = re.compile(r"\[(?P<idx>\d+)\]=\{(?P<body>[^}]*)\}")
IB_MERGED_MEMBER = re.compile(r"\[(?P<idx>\d+)\] (?P<name>[^\s:]+):(?P<port>\d+)/(?P<ll>IB|RoCE|UNSPECIFIED)")
IB_NO_DEVICE = re.compile(r"^NET/IB : No device found")
# net_ib.cc: INFO(NCCL_NET, "NET/IB: [%d] %s:%s:%d/%s provider=%s speed=%d ..." (v2.28.9-1, v2.30.7-1;
# TRACE before 2.27) and "NET/IB : Made virtual device [%d] name=%s speed=%d ndevs=%d" (2.26+).
IB_SPEED = re.compile(r"^NET/IB: \[\d+\] (?P<name>[^\s:]+):\S*?:(?P<port>\d+)/\S+ .*?speed=(?P<speed>\d+)")
IB_VDEV_SPEED = re.compile(r"^NET/IB : Made virtual device \[(?P<idx>\d+)\] name=(?P<name>\S+) speed=(?P<speed>\d+)")
# transport/net_socket.cc "NET/Socket : Using%s" with " [%d]%s:%s" (all tags).
SOCKET_USING = re.compile(r"^NET/Socket : Using(?P<devs>.*)$")
SOCKET_DEV = re.compile(r"\[(?P<idx>\d+)\](?P<name>[^\s:\[\]]+):(?P<addr>\S+)")
# graph/topo.cc "NET/%s : GPU Direct RDMA %s for HCA %d '%s'" (all tags).
GDR_SUPPORT = re.compile(
    r"^NET/(?P<net>.+?) : GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<idx>\d+) '(?P<name>[^']*)'")
# transport/generic.cc (2.24+): "Connected all rings, use ring PXN %d GDR %d".
RINGS_CONNECTED = re.compile(r"^Connected all rings(?:, use ring PXN (?P<pxn>\d+) GDR (?P<gdr>\d+))?")

# transport/p2p.cc: "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/..." (all tags).
P2P_CONN = re.compile(
    r"^Channel (?P<ch>\d+)/(?P<ci>\d+) : (?P<src>\d+)\[(?P<sdev>[0-9a-fx]+)\] -> "
    r"(?P<dst>\d+)\[(?P<ddev>[0-9a-fx]+)\] via (?P<detail>P2P/.+?)\s*$")
# transport/shm.cc: "Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s" (2.18-2.28), "via SHM/direct" (2.30).
SHM_CONN = re.compile(
    r"^Channel (?P<ch>\d+)(?:/(?P<ci>\d+))? : (?P<src>\d+)\[(?P<sdev>[0-9a-fx]+)\] -> "
    r"(?P<dst>\d+)\[(?P<ddev>[0-9a-fx]+)\] via (?P<detail>SHM/\S+)\s*$")
# transport/net.cc: "Channel %02d/%d : %d[%d] -> %d[%d] [send|receive] via NET/%s/%d[(%d)]%s%s[%s]".
NET_CONN = re.compile(
    r"^Channel (?P<ch>\d+)/(?P<ci>\d+) : (?P<src>\d+)\[(?P<sdev>[0-9a-fx]+)\] -> "
    r"(?P<dst>\d+)\[(?P<ddev>[0-9a-fx]+)\] \[(?P<dir>send|receive)\] via (?P<detail>NET/.+?)\s*$")
NET_DETAIL = re.compile(r"^NET/(?P<net>.+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<flags>(?:/[^/]+)*)$")
# transport/coll_net.cc: "CollNet %02d/%1d : %d [send|receive] via COLLNET/%s/%d%s%s".
COLLNET_CONN = re.compile(
    r"^CollNet (?P<ch>\d+)/(?P<ci>\d+) : (?P<src>\d+) \[(?P<dir>send|receive)\] via (?P<detail>COLLNET/.+?)\s*$")
# Before 2.18 (read at v2.4.8-1, v2.7.8-1, v2.8.4-1 .. v2.12.12-1, v2.13.4-1, v2.17.1-1):
#   2.4   "Ring %02d : %d[%d] -> %d[%d] via P2P/IPC", "Ring %02d : %d -> %d via P2P/common device",
#         "Ring %02d : %d -> %d [send] via NET/%s/%d%s", "Ring %02d : %d[%d] -> %d[%d] via direct shared memory"
#   2.5-2.12  "Channel %02d : %d[%lx] -> %d[%lx] via P2P/IPC%s" (no connection index), "... [send] via NET/%s/%d%s%s",
#             "... via direct shared memory"; 2.13+ SHM "via SHM/%s/%s", P2P "Channel %02d/%01d" from 2.14.
OLD_CONN = re.compile(
    r"^(?:Ring|Channel) (?P<ch>\d+)(?:/(?P<ci>\d+))? : (?P<src>\d+)(?:\[(?P<sdev>[0-9a-fx]+)\])? -> "
    r"(?P<dst>\d+)(?:\[(?P<ddev>[0-9a-fx]+)\])?(?: \[(?P<dir>send|receive)\])? via "
    r"(?P<detail>P2P/.+?|SHM/\S+|NET/.+?|direct shared memory)\s*$")
# Something that looks like a connection line but matched none of the above.
CONN_LIKE = re.compile(r"^(?:Channel|CollNet|Ring|Coll) \d+(?:/\d+)? : .* via ")

# graph/rings.cc "Channel %02d/%02d :" then " %*d" per rank, cut with "..." at 128 characters (rank 0 only).
RING = re.compile(r"^Channel (?P<ch>\d+)/(?P<n>\d+) :(?P<ranks>(?:\s+\d+)+)(?:\.\.\.)?\s*$")
# init.cc "%d coll channels, [%d collnet channels, ]%d nvls channels, %d p2p channels, %d p2p channels per peer"
# (collnet count from v2.20.5-1; no nvls count before 2.17: "%d coll channels, %d p2p channels, ..." in 2.7-2.16).
CHANNELS = re.compile(
    r"^(?P<coll>\d+) coll channels, (?:(?P<collnet>\d+) collnet channels, )?(?:(?P<nvls>\d+) nvls channels, )?"
    r"(?P<p2p>\d+) p2p channels, (?P<p2p_per_peer>\d+) p2p channels per peer")
# init.cc "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d" (MNNVL from 2.19).
COMM = re.compile(
    r"^comm (?P<comm>\S+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
    r"localRanks (?P<local>\d+) localRank (?P<lrank>\d+)")
# init.cc "[%s ]comm %p rank %d nranks %d cudaDev %d nvmlDev %d busId %lx ... - Init COMPLETE" (all tags;
# the function name in front from 2.19): the only rank count 2.18 prints.
INIT_COMPLETE = re.compile(
    r"(?:^|\s)comm (?P<comm>\S+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>-?\d+) .*- Init COMPLETE")
# transport/nvls.cc "NVLS multicast support is %savailable on dev %d" (2.18+).
NVLS_SUPPORT = re.compile(r"^NVLS multicast support is (?P<not>not )?available on dev (?P<dev>\d+)")
# graph/paths.cc: "P2P is disabled between connected GPUs %d and %d. ..." (2.24+);
# transport/p2p.cc: "Could not enable P2P between dev %d(=%lx) and dev %d(=%lx)".
P2P_DISABLED = re.compile(r"^(?:P2P is disabled between|Could not enable P2P between)")

# graph/topo.cc ncclTopoPrintRec (GRAPH subsystem, every tag v2.12.12-1 .. v2.30.7-1): the topology NCCL built,
# one node per line, a node's links indented under it: "+ PCI[48.0] - GPU/0-18000 (0)" (the link into the GPU, then
# the GPU: "%s/%lx-%lx (%d)" from 2.18, "%s/%lX (%d)" before) and under it "+ NVL[370.8] - NVS/0-0" (its NVLinks to
# the NVSwitch, count x NCCL's per-link bandwidth) or "+ NVL[40.0] - GPU/..." (direct NVLink to a peer).
TOPO_GPU = re.compile(r"^(?P<lead>\s*(?:\+ (?P<ltype>\w+)\[(?P<lbw>[\d.]+)\] - )?)GPU/(?:[0-9a-fA-F]+-)?"
                      r"(?P<id>[0-9a-fA-F]+) \((?P<rank>-?\d+)\)\s*$")
TOPO_LINK = re.compile(r"^(?P<indent>\s*)\+ (?P<ltype>\w+)\[(?P<bw>[\d.]+)\] - (?P<rtype>\w+)/(?:[0-9a-fA-F]+-)?"
                       r"(?P<rid>[0-9a-fA-F]+)")

# ENV: "NCCL_X set by environment to Y" (output.nccl_log_line.ENV_SET, with its source lines;
# the import reads it there too).

# Model table (graph/tuning.cc ncclTopoTuneModel, rank 0, all tags): blocks of
# "  Algorithm   |" (names), "  Protocol    |", " Max NThreads |", then one
# "%13s |" row per function with "%8.1f/%6.1f |" = latency (us) / algBw (GB/s).
TABLE_ALGOS = re.compile(r"^\s*Algorithm\s+\|(?P<names>.*)$")
TABLE_PROTOS = re.compile(r"^\s*Protocol\s+\|(?P<names>.*)$")
TABLE_THREADS = re.compile(r"^\s*Max NThreads\s+\|")
TABLE_ROW = re.compile(r"^\s*(?P<func>[A-Za-z]+) \|(?P<cells>(?:\s*[-+\w.]+/\s*[-+\w.]+ \|)*)\s*(?P<rest>.*)$")
TABLE_CELL = re.compile(r"\s*(?P<lat>[-+\w.]+)/\s*(?P<bw>[-+\w.]+) \|")

# Per-call choice, enqueue.cc, rank 0 only, INFO(NCCL_TUNING, ...):
#  2.20.3-1 .. 2.22.3-1  "%ld Bytes -> Algo %d proto %d time %f"
#  2.23.4-1              "%s: %ld Bytes -> Algo %d proto %d time %f"
#  2.24.3-1 .. 2.30.7-1  "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"
#  2.27.3-1 ..           "%s [Symmetric]: %ld Bytes -> Kernel %s nchannels %d nthreads %d[ nWorks %d]"
#                        (enqueue.cc in 2.27, scheduler/symmetric_sched.cc with nWorks from 2.28)
#  2.29.2-1 ..           "%s [Copy Engine]: %ld Bytes -> cudaMemcpy%s"
# 2.18-2.19 release builds print nothing per call (the INFO is commented out).
CALL_V220 = re.compile(r"^(?P<nbytes>\d+) Bytes -> Algo (?P<algo>-?\d+) proto (?P<proto>-?\d+) time (?P<time>[-\d.e+]+)\s*$")
CALL_V223 = re.compile(
    r"^(?P<func>\w+): (?P<nbytes>\d+) Bytes -> Algo (?P<algo>-?\d+) proto (?P<proto>-?\d+) time (?P<time>[-\d.e+]+)\s*$")
CALL_V224 = re.compile(
    r"^(?P<func>\w+): (?P<nbytes>\d+) Bytes -> Algo (?P<algo>\S+) proto (?P<proto>\S+) "
    r"channel\{Lo\.\.Hi\}=\{(?P<lo>-?\d+)\.\.(?P<hi>-?\d+)\}\s*$")
CALL_SYMMETRIC = re.compile(
    r"^(?P<func>\w+) \[Symmetric\]: (?P<nbytes>\d+) Bytes -> Kernel (?P<kernel>\S+) nchannels (?P<nch>\d+) "
    r"nthreads (?P<nthreads>\d+)(?: nWorks (?P<nworks>\d+))?\s*$")
CALL_CE = re.compile(r"^(?P<func>\w+) \[Copy Engine\]: (?P<nbytes>\d+) Bytes -> cudaMemcpy(?P<kind>\S*)\s*$")
CALL_LIKE = re.compile(r" Bytes -> ")
# enqueue.cc INFO(NCCL_COLL, "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d
# comm %p [nranks=%d] stream %p") (all tags): names the function of 2.20-2.22's nameless per-call line.
COLL_CALL = re.compile(r"^(?P<func>\w+): opCount (?P<op>[0-9a-f]+) sendbuff ")
