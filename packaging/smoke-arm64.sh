#!/usr/bin/env bash
# Runs the cross-built arm64 omnisat under qemu-user with the sysroot's libraries: it must load
# (OpenCV, PortAudio), print its version, and accept the example configuration.
# usage: packaging/smoke-arm64.sh BINARY SYSROOT
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${1:?usage: smoke-arm64.sh BINARY SYSROOT}"
root=$(realpath "${2:?usage: smoke-arm64.sh BINARY SYSROOT}")
run() { QEMU_LD_PREFIX="$root" qemu-aarch64-static "$bin" "$@"; }

out=$(run version)
echo "smoke arm64: $out"
case "$out" in "omnisat "*) ;; *) echo "smoke arm64: unexpected version output" >&2; exit 1 ;; esac

commands=$(run --help)
if grep -q '^  config ' <<<"$commands"; then
	# The file alone: under qemu on the build host there are none of the satellite's devices.
	run config check --file-only -c configs/omnisat.example.yaml
	echo "smoke arm64: config check passed"
else
	# Until `omnisat config check` exists: the unit the binary renders and the run command's
	# flags, both of which read the binary's own code paths without devices.
	unit=$(run service unit -c /etc/omnisat/omnisat.yaml)
	grep -q '^ExecStart=.* run -c /etc/omnisat/omnisat.yaml$' <<<"$unit"
	help=$(run run -h 2>&1)
	grep -q -- '-log-format' <<<"$help"
	echo "smoke arm64: service unit and run -h passed (no config check command in this build)"
fi
