#!/usr/bin/env bash
# Runs the cross-built arm64 programs under qemu-user with the sysroot's libraries: omnisat must
# load (PortAudio), print its version and accept the example configuration; the camera program
# must load OpenCV and send a JPEG of a test video.
# usage: packaging/smoke-arm64.sh BINDIR SYSROOT
set -euo pipefail
cd "$(dirname "$0")/.."
bindir="${1:?usage: smoke-arm64.sh BINDIR SYSROOT}"
root=$(realpath "${2:?usage: smoke-arm64.sh BINDIR SYSROOT}")
bin="$bindir/omnisat"
run() { QEMU_LD_PREFIX="$root" qemu-aarch64-static "$bin" "$@"; }

out=$(run version)
echo "smoke arm64: $out"
case "$out" in "omnisat "*) ;; *) echo "smoke arm64: unexpected version output" >&2; exit 1 ;; esac

# The file alone: under qemu on the build host there are none of the satellite's devices.
run config check --file-only -c configs/omnisat.example.yaml
echo "smoke arm64: config check passed"

# The camera program on a two-second test video: its stream starts with its header and holds a
# frame message ('F', a length, then a JPEG's FF D8 FF) within a minute of emulated start-up.
frame() { LC_ALL=C grep -qaP 'F[\x00-\xff]{4}\xff\xd8\xff' "$work/stream"; }
work=$(mktemp -d)
trap 'kill "${cam:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
ffmpeg -loglevel error -f lavfi -i testsrc=size=320x240:rate=5 -t 2 -pix_fmt yuv420p "$work/cam.mp4"
QEMU_LD_PREFIX="$root" qemu-aarch64-static "$bindir/omnisat-camera" --source "file:$work/cam.mp4" \
	>"$work/stream" 2>"$work/log" &
cam=$!
for _ in $(seq 600); do
	if frame; then
		break
	fi
	if ! kill -0 "$cam" 2>/dev/null; then
		echo "smoke arm64: omnisat-camera exited:" >&2
		cat "$work/log" >&2
		exit 1
	fi
	sleep 0.1
done
kill -TERM "$cam"
wait "$cam" || true
if [ "$(head -c 17 "$work/stream")" != "omnisat-camera 1" ] || ! frame; then
	echo "smoke arm64: omnisat-camera sent no frame:" >&2
	cat "$work/log" >&2
	exit 1
fi
echo "smoke arm64: omnisat-camera loaded OpenCV and sent a frame ($(wc -c <"$work/stream") bytes)"
