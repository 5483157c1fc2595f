#!/usr/bin/env bash
# Makes a minimal Debian bookworm system (mmdebstrap minbase) with the runtime packages named,
# into which packaging/package_test.go installs the amd64 .deb with dpkg inside a chroot: the
# maintainer scripts really run, and the binary runs on the libraries its Depends brought.
# Kept and reused while the package list is the same. usage: install-root.sh DIR PKG,PKG,...
set -euo pipefail

dir="${1:?usage: install-root.sh DIR PACKAGES}"
packages="${2:?usage: install-root.sh DIR PACKAGES}"
stamp="$dir/.omnisat-install-root"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ]; then
	exit 0
fi
rm -rf "$dir" "$dir.tmp"
mkdir -p "$(dirname "$dir")"
echo "install-root: bookworm minbase with $packages into $dir" >&2
mmdebstrap --quiet --variant=minbase --include="$packages" bookworm "$dir.tmp"
echo "$packages" >"$dir.tmp/.omnisat-install-root"
mv "$dir.tmp" "$dir"
