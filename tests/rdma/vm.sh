#!/usr/bin/env bash
# Soft-RoCE test VM: boots Debian's own kernel (which has rdma_rxe) in qemu (TCG) from a cached
# initramfs, shares a host folder over 9p at the same path, creates two rxe devices over a
# veth pair (rxe0 on veth0 = 198.18.0.1, rxe1 on veth1 = 198.18.0.2, with the policy routing
# that makes them really exchange packets), runs a command inside and returns its exit status.
# The VM has 2 cpus and 2 NUMA nodes (cpu 0 and 1 GiB on node 0, cpu 1 and 1 GiB on node 1), so
# braid's NUMA detection and ring order run on a real multi-node kernel.
# See ../shared/notes/softroce-vm.md for why each step is there.
#
#   tests/rdma/vm.sh [--share DIR] [--lib-of BIN]... [--timeout SECS] [--] COMMAND...
#
# COMMAND runs under dash inside the VM, in DIR (default: the current directory), which is the
# host folder mounted at the same path. Its stdout and stderr go to DIR/.braid-vm/out (copied
# to this script's stdout at the end); the libraries `ldd` lists for every --lib-of BIN are
# added to the VM. Environment:
#   BRAID_RDMA_VM_CACHE  cache folder (default ~/.cache/braid-rdma-vm): kernel, modules, base
#                        initramfs; a lock keeps two first-time setups apart
#   BRAID_SKIP_RDMA_VM=1 exit 0 with a message when the VM cannot be prepared or booted
#                        (otherwise that is a loud failure, status 3)
# Exit status: the command's, 3 when the VM could not be prepared/booted, 124 on timeout.
set -uo pipefail

cache=${BRAID_RDMA_VM_CACHE:-$HOME/.cache/braid-rdma-vm}
share=$PWD
timeout=900
libof=()
while [ $# -gt 0 ]; do
    case $1 in
    --share) share=$2; shift 2 ;;
    --lib-of) libof+=("$2"); shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--share DIR] [--lib-of BIN]... [--timeout S] [--] COMMAND..." >&2; exit 2; }
share=$(cd "$share" && pwd) || exit 2

die() {
    echo "vm.sh: ERROR: $*" >&2
    if [ "${BRAID_SKIP_RDMA_VM:-0}" = 1 ]; then
        echo "vm.sh: BRAID_SKIP_RDMA_VM=1: skipping the RDMA VM run" >&2
        exit 0
    fi
    exit 3
}

# ---- host packages ---------------------------------------------------------------------------
need_pkgs=()
for p in qemu-system-x86 busybox-static cpio kmod dash iproute2 rdma-core ibverbs-utils \
    rdmacm-utils ibverbs-providers; do
    dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
    echo "vm.sh: installing ${need_pkgs[*]}" >&2
    if [ "$(id -u)" -ne 0 ]; then die "missing packages ${need_pkgs[*]} (not root: apt-get install them)"; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_pkgs[@]}" \
        >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need_pkgs[@]}" >/dev/null; } ||
        die "apt-get install ${need_pkgs[*]} failed"
fi

# ---- cache: kernel, modules, base initramfs ---------------------------------------------------
MODS="crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe configfs ib_cm iw_cm
rdma_cm rdma_ucm ib_umad dummy veth virtio virtio_ring virtio_pci_modern_dev
virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p"
TOOLS="/usr/bin/dash /usr/bin/busybox /usr/sbin/ip /usr/bin/rdma /usr/bin/ibv_devices
/usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/ibv_ud_pingpong /usr/bin/rping
/usr/bin/ucmatose /usr/bin/timeout /usr/bin/env /usr/bin/cat /usr/bin/seq"

# Copies file $1 (following links) into root $2 at its canonical /usr path, keeping its name.
put() {
    local f=$1 root=$2 d
    d=$(readlink -f "$(dirname "$f")")
    mkdir -p "$root$d"
    cp -L "$f" "$root$d/$(basename "$f")"
}
# Copies the shared libraries of binary $1 into root $2.
put_libs() {
    local lib
    for lib in $(ldd "$1" 2>/dev/null | awk '/=>/ { print $3 } /^\t\/.*ld-linux/ { print $1 }'); do
        [ -e "$lib" ] && [ ! -e "$2$(readlink -f "$(dirname "$lib")")/$(basename "$lib")" ] && put "$lib" "$2"
    done
}

layout=2 # bump when the base initramfs changes
prepare() {
    mkdir -p "$cache" || return 1
    local pkg kver deb
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    [ -n "$pkg" ] || { echo "cannot find the kernel package linux-image-amd64 depends on" >&2; return 1; }
    [ -f "$cache/ready-$pkg-v$layout" ] && { echo "$pkg"; return 0; }
    echo "vm.sh: preparing $pkg in $cache (once)" >&2
    rm -rf "$cache/k" "$cache/base" "$cache"/*.deb
    (cd "$cache" && apt-get download "$pkg" >/dev/null 2>&1) || { echo "apt-get download $pkg failed" >&2; return 1; }
    deb=$(ls "$cache"/linux-image-*.deb | head -1)
    dpkg-deb -x "$deb" "$cache/k" || return 1
    kver=$(ls "$cache/k/lib/modules" | head -1)
    depmod -b "$cache/k" "$kver" || return 1
    cp "$cache/k/boot/vmlinuz-$kver" "$cache/vmlinuz"
    # The ELF vmlinux (the XZ payload of the bzImage) boots directly (PVH), about twice as fast.
    python3 - "$cache/vmlinuz" "$cache/vmlinux" <<'EOF' || rm -f "$cache/vmlinux"
import lzma, sys
data = open(sys.argv[1], "rb").read()
i = data.find(b"\xfd7zXZ\x00")
while i >= 0:
    try:
        out = lzma.LZMADecompressor().decompress(data[i:])
        if out[:4] == b"\x7fELF":
            open(sys.argv[2], "wb").write(out)
            sys.exit(0)
    except lzma.LZMAError:
        pass
    i = data.find(b"\xfd7zXZ\x00", i + 1)
sys.exit(1)
EOF
    # Base initramfs: merged-/usr layout, tools and their libraries, modules in load order.
    local b="$cache/base" m
    mkdir -p "$b"/usr/bin "$b"/usr/sbin "$b"/usr/lib/x86_64-linux-gnu "$b"/usr/lib64 \
        "$b"/proc "$b"/sys "$b"/dev "$b"/tmp "$b"/etc/libibverbs.d "$b"/modules "$b"/run
    ln -s usr/bin "$b/bin"; ln -s usr/sbin "$b/sbin"; ln -s usr/lib "$b/lib"; ln -s usr/lib64 "$b/lib64"
    local t
    for t in $TOOLS; do put "$t" "$b"; put_libs "$t" "$b"; done
    # glibc dlopen()s libgcc_s for pthread_exit; the rxe provider is dlopen()ed by libibverbs.
    put /usr/lib/x86_64-linux-gnu/libgcc_s.so.1 "$b"
    for t in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so; do put "$t" "$b"; put_libs "$t" "$b"; done
    cp /etc/libibverbs.d/rxe.driver "$b/etc/libibverbs.d/"
    # Busybox applets last in PATH (its ip cannot add links); /bin/sh is dash.
    mkdir -p "$b/bb"
    for t in $(/usr/bin/busybox --list); do ln -sf /usr/bin/busybox "$b/bb/$t"; done
    ln -sf dash "$b/usr/bin/sh"
    # Modules with their dependencies first (modules.dep), decompressed for busybox insmod.
    local order="$cache/modorder" seen=" "
    : >"$order"
    add_mod() {
        local name=$1 path deps d
        path=$(awk -v n="$name" -F: '{ f = $1; sub(/.*\//, "", f); sub(/\.ko(\.xz|\.zst|\.gz)?$/, "", f);
            gsub(/-/, "_", f); if (f == n) { print $0; exit } }' "$cache/k/lib/modules/$kver/modules.dep")
        [ -n "$path" ] || return 0 # built in
        deps=${path#*:}
        path=${path%%:*}
        case $seen in *" $path "*) return 0 ;; esac
        for d in $deps; do
            d=$(basename "$d"); d=${d%%.ko*}; d=${d//-/_}
            add_mod "$d"
        done
        case $seen in *" $path "*) return 0 ;; esac
        seen="$seen$path "
        echo "$path" >>"$order"
    }
    for m in $MODS; do add_mod "$m"; done
    local i=0 p
    while read -r p; do
        i=$((i + 1))
        local src="$cache/k/lib/modules/$kver/$p" dst
        dst="$b/modules/$(printf %02d $i)-$(basename "${p%%.ko*}").ko"
        case $p in
        *.xz) xz -dc "$src" >"$dst" ;;
        *.zst) zstd -dc "$src" >"$dst" ;;
        *.gz) gzip -dc "$src" >"$dst" ;;
        *) cp "$src" "$dst" ;;
        esac
    done <"$order"
    cat >"$b/init" <<'EOF'
#!/bin/dash
export PATH=/usr/sbin:/usr/bin:/bb
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
mount -t tmpfs tmp /tmp
mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm
for m in /modules/*.ko; do insmod "$m" 2>/dev/null || echo "vm: insmod $m failed"; done
ip link set lo up
. /run/cmd.env
mkdir -p "$SHARE"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share "$SHARE" || echo "vm: 9p mount failed"
out="$SHARE/.braid-vm"
# Two rxe devices over a veth pair; policy routing so traffic between the two local addresses
# leaves through the veth ends instead of lo.
ip link add veth0 type veth peer name veth1
ip addr add 198.18.0.1/24 dev veth0
ip addr add 198.18.0.2/24 dev veth1
ip link set veth0 up; ip link set veth1 up
for f in all/accept_local veth0/accept_local veth1/accept_local; do echo 1 >/proc/sys/net/ipv4/conf/$f; done
for f in all default veth0 veth1 lo; do echo 0 >/proc/sys/net/ipv4/conf/$f/rp_filter; done
ip rule add pref 100 lookup local
ip rule del pref 0 lookup local
ip route add 198.18.0.2 dev veth0 src 198.18.0.1 table 10
ip route add 198.18.0.1 dev veth1 src 198.18.0.2 table 11
ip rule add pref 10 iif lo to 198.18.0.2 lookup 10
ip rule add pref 11 iif lo to 198.18.0.1 lookup 11
rdma link add rxe0 type rxe netdev veth0
rdma link add rxe1 type rxe netdev veth1
cd "$SHARE"
dash /run/cmd.sh >"$out/out" 2>&1
echo $? >"$out/rc"
sync
poweroff -f
EOF
    chmod +x "$b/init"
    (cd "$b" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$cache/base.cpio.gz" || return 1
    rm -rf "$cache/k/usr/share" "$cache/$(basename "$deb")"
    touch "$cache/ready-$pkg-v$layout"
    echo "$pkg"
}

mkdir -p "$cache" || die "cannot create $cache"
exec 9>"$cache/.lock"
flock 9
pkg=$(prepare) || die "could not prepare the VM kernel/initramfs in $cache"
flock -u 9
kernel="$cache/vmlinux"
[ -s "$kernel" ] || kernel="$cache/vmlinuz"

# ---- per-run initramfs: the command, libraries of the binaries it runs -----------------------
work=$(mktemp -d /tmp/braid-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/r/run" "$share/.braid-vm"
rm -f "$share/.braid-vm/out" "$share/.braid-vm/rc"
printf 'SHARE=%q\n' "$share" >"$work/r/run/cmd.env"
{
    echo "cd $(printf %q "$share")"
    printf '%q ' "$@"
    echo
} >"$work/r/run/cmd.sh"
for bin in "${libof[@]}"; do put_libs "$bin" "$work/r"; done
# Never ship /bin, /lib... as real folders (they are merged-/usr symlinks in the base).
rm -rf "$work/r/bin" "$work/r/lib" "$work/r/lib64" "$work/r/sbin"
(cd "$work/r" && find . -mindepth 1 | cpio -o -H newc 2>/dev/null | gzip -1) >"$work/run.cpio.gz"
cat "$cache/base.cpio.gz" "$work/run.cpio.gz" >"$work/initrd"

# ---- boot --------------------------------------------------------------------------------------
t0=$(date +%s.%N)
timeout "$timeout" qemu-system-x86_64 -machine q35 -accel tcg,thread=multi -cpu max -m 2G -smp 2 \
    -object memory-backend-ram,id=mem0,size=1G -object memory-backend-ram,id=mem1,size=1G \
    -numa node,nodeid=0,cpus=0,memdev=mem0 -numa node,nodeid=1,cpus=1,memdev=mem1 \
    -nographic -nic none -no-reboot -kernel "$kernel" -initrd "$work/initrd" \
    -append 'console=ttyS0 quiet panic=-1 loglevel=3' \
    -virtfs "local,path=$share,mount_tag=share,security_model=none,id=share" \
    </dev/null >"$work/console" 2>&1
qrc=$?
t1=$(date +%s.%N)
[ -f "$share/.braid-vm/out" ] && cat "$share/.braid-vm/out"
echo "vm.sh: VM ran $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s ($pkg)" >&2
if [ $qrc -eq 124 ]; then
    tail -n 30 "$work/console" >&2
    echo "vm.sh: ERROR: the VM timed out after $timeout s" >&2
    exit 124
fi
if [ ! -f "$share/.braid-vm/rc" ]; then
    tail -n 40 "$work/console" >&2
    die "the VM did not boot or did not finish the command (qemu status $qrc)"
fi
grep -a "^vm: " "$work/console" >&2
exit "$(cat "$share/.braid-vm/rc")"
