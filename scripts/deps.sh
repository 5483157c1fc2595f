#!/usr/bin/env bash
# Installs what omnisat needs to build, test and run its demo on Debian / Raspberry Pi OS:
# the C libraries (PortAudio, OpenCV, speexdsp), the real parts the tests drive (Mosquitto,
# PulseAudio, espeak-ng, sox, ffmpeg, systemd-analyze), what `make package` needs (mmdebstrap,
# the arm64 cross compilers, qemu-user, lintian, dpkg-dev) and the Go modules. Installs only
# what is missing, so a second run is quick. Works as root or through sudo.
set -euo pipefail

packages=(
	pkg-config gcc g++
	portaudio19-dev libopencv-dev libspeexdsp-dev
	mosquitto mosquitto-clients
	pulseaudio pulseaudio-utils libasound2-plugins alsa-utils
	espeak-ng sox ffmpeg
	systemd dpkg-dev
	mmdebstrap gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user-static lintian
)

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
	echo "deps: installing ${missing[*]}"
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null; then
	echo "deps: no Go toolchain on PATH; install Go $(sed -n 's/^go //p' go.mod) or newer (https://go.dev/dl)" >&2
	exit 1
fi
go mod download
