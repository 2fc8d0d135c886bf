#!/usr/bin/env bash
# Download Debian's iproute2 (ip, tc) and the libraries they load into DIR, for a machine
# whose image has no iproute2 (the lent GPU machines): carry DIR there and point
# bench/fakehosts.py at it (--iproute2 DIR or NCCLBENCH_IPROUTE2=DIR).  There the .debs are
# unpacked with `dpkg -x` (or `ar`+`tar` where dpkg is missing) into DIR/root by fakehosts.py,
# and ip/tc run with LD_LIBRARY_PATH set for them alone, never for the ranks.
#
#   bench/fetch_iproute2.sh DIR        # needs apt-get (Debian/Ubuntu) and network here
#
# Checked here: the packages are unpacked into a temporary directory and `ip -V`/`tc -V` run
# from it; the libraries they still take from this system are listed (libc and friends,
# present on any glibc image).
set -euo pipefail
dir=${1:?usage: bench/fetch_iproute2.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# ip and tc's own libraries (ldd on Debian 12's iproute2 6.1), and what those load in turn
pkgs=(iproute2 libbpf1 libmnl0 libxtables12 libelf1 libcap2 libbsd0 libmd0 libdb5.3 libselinux1
      libpcre2-8-0 libtirpc3 libzstd1 zlib1g libatm1)
(cd "$dir" && apt-get download "${pkgs[@]}" 2>&1 >/dev/null | grep -v "unsandboxed as root" >&2 || true)
got=$(ls "$dir"/*.deb 2>/dev/null | wc -l)
if [ "$got" -lt "${#pkgs[@]}" ]; then
    echo "fetch_iproute2: only $got of ${#pkgs[@]} packages downloaded into $dir (apt-get update first?)" >&2
    exit 1
fi
echo "fetch_iproute2: $got packages in $dir"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for deb in "$dir"/*.deb; do dpkg -x "$deb" "$tmp"; done
libs=$(find "$tmp" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
ipbin=$(ls "$tmp"/sbin/ip "$tmp"/usr/sbin/ip "$tmp"/bin/ip 2>/dev/null | head -1 || true)
tcbin=$(ls "$tmp"/sbin/tc "$tmp"/usr/sbin/tc 2>/dev/null | head -1 || true)
LD_LIBRARY_PATH=$libs "$ipbin" -V
LD_LIBRARY_PATH=$libs "$tcbin" -V
outside=$(LD_LIBRARY_PATH=$libs ldd "$ipbin" "$tcbin" | awk '/=>/ && $3 !~ "^'"$tmp"'" {print $1}' | sort -u | paste -sd' ')
missing=$(LD_LIBRARY_PATH=$libs ldd "$ipbin" "$tcbin" | grep -c "not found" || true)
echo "fetch_iproute2: ip and tc run from the unpacked packages; libraries still taken from the system: ${outside:-none}"
if [ "$missing" != "0" ]; then
    echo "fetch_iproute2: $missing librar(ies) not found" >&2
    exit 1
fi
