#!/bin/sh
# The lab's torch root: Debian trixie (minbase) with python3-torch and its dependencies,
# no recommends, from Debian's mirror. Run by lab.BuildImages (lab/torch.go) as root on the
# test machine: debootstrap ROOT, then apt-get in the root; the caller imports ROOT into
# Docker. Every step says which it is when it fails. Usage: rootfs.sh ROOT MIRROR PACKAGES...
set -eu
root=$1 mirror=$2
shift 2
step() { echo "tpdeploy-torch-step: $*"; }
step "debootstrap --variant=minbase trixie $mirror"
debootstrap --variant=minbase --merged-usr trixie "$root" "$mirror" || { echo "debootstrap of trixie from $mirror failed" >&2; exit 10; }
cp /etc/resolv.conf "$root/etc/resolv.conf"
step "apt-get install --no-install-recommends $*"
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "$@" || { echo "apt-get install $* in the trixie root failed" >&2; exit 11; }
step "clean"
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/apt "$root"/var/log/dpkg.log
: > "$root/etc/resolv.conf"
step "done"
