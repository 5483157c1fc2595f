#!/usr/bin/env bash
# Installs what omnisat needs on Debian / Raspberry Pi OS, by group, and only what is missing
# (a second run is quick). Works as root or through sudo.
#
#   scripts/deps.sh demo      build the binary and run `make demo`: a C compiler, pkg-config,
#                             PortAudio, OpenCV, libjpeg-turbo, speexdsp, ffmpeg (the demo's test picture), Go modules
#   scripts/deps.sh package   what `make package` adds: dpkg-dev, mmdebstrap, the arm64 cross
#                             compilers, qemu-user, lintian
#   scripts/deps.sh test      everything the tests drive: the demo's and the package's groups, plus
#                             Mosquitto, PulseAudio, espeak-ng, sox, systemd-analyze, and
#                             numpy and websockets for `make footprint`'s Python probe
#   scripts/deps.sh [all]     every group (`make deps`)
set -euo pipefail

demo=(pkg-config gcc g++ portaudio19-dev libopencv-dev libjpeg-dev libspeexdsp-dev ffmpeg)
package=(dpkg-dev mmdebstrap gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user-static lintian)
# The packaging tests build and install the packages, so the tests need the package group too.
test=("${demo[@]}" "${package[@]}"
	mosquitto mosquitto-clients
	pulseaudio pulseaudio-utils libasound2-plugins alsa-utils
	espeak-ng sox systemd
	python3-numpy python3-websockets)

group=${1:-all}
case $group in
demo) packages=("${demo[@]}") ;;
package) packages=("${demo[@]}" "${package[@]}") ;;
test | all) packages=("${test[@]}") ;;
*)
	echo "deps: unknown group \"$group\"; want demo, package, test or all" >&2
	exit 2
	;;
esac

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing+=("$p")
	fi
done

if ((${#missing[@]})); then
	if ! command -v apt-get >/dev/null; then
		echo "deps: missing ${missing[*]}, and this is not a Debian-like system: install them by hand" >&2
		exit 1
	fi
	sudo=()
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null || { echo "deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
		sudo=(sudo)
	fi
	echo "deps ($group): installing ${missing[*]}"
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
	echo "deps: no Go toolchain on PATH; install Go $(sed -n 's/^go //p' go.mod) or newer (https://go.dev/dl)" >&2
	exit 1
fi
go mod download
