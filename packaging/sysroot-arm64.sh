#!/usr/bin/env bash
# Makes the arm64 sysroot the cross build links against: Debian bookworm's arm64 OpenCV,
# PortAudio, speexdsp and libc headers and libraries, unpacked without root or emulation
# (mmdebstrap's "extract" variant). OpenCV's :arm64 packages cannot be installed beside the
# native ones through multiarch, hence a separate tree. Kept and reused when it is complete.
# usage: packaging/sysroot-arm64.sh DIR
set -euo pipefail

dir="${1:?usage: sysroot-arm64.sh DIR}"
stamp="$dir/.omnisat-sysroot"
packages="libopencv-dev,portaudio19-dev,libspeexdsp-dev,libc6-dev"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ]; then
	exit 0
fi

rm -rf "$dir" "$dir.tmp"
mkdir -p "$(dirname "$dir")"
echo "sysroot: unpacking bookworm arm64 ($packages) into $dir"
mmdebstrap --quiet --arch=arm64 --variant=extract --include="$packages" bookworm "$dir.tmp"

# "extract" runs no maintainer scripts, so the BLAS/LAPACK alternatives links that OpenCV's
# libraries need are made here (without them linking fails on slange_, csscal_ ...).
lib="$dir.tmp/usr/lib/aarch64-linux-gnu"
ln -sfn blas/libblas.so.3 "$lib/libblas.so.3"
ln -sfn lapack/liblapack.so.3 "$lib/liblapack.so.3"

echo "$packages" >"$dir.tmp/.omnisat-sysroot"
mv "$dir.tmp" "$dir"
