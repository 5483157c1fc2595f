#!/usr/bin/env bash
# make package: the omnisat .deb for each architecture in ARCHES (default "amd64 arm64") in
# dist/, each checked by lintian; the arm64 binary is also run under qemu-user. The host's own
# architecture is built natively; arm64 on another host is cross-built against a Debian
# bookworm sysroot (packaging/sysroot-arm64.sh, kept in ~/.cache/omnisat; SYSROOT_ARM64=DIR
# to put it elsewhere).
# Needs what `make deps` installs (cross gcc, mmdebstrap, qemu-user-static, lintian).
set -euo pipefail
cd "$(dirname "$0")/.."

nfpm="github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2" # v2.46+ need a module the proxy lacks
read -r -a arches <<<"${ARCHES:-amd64 arm64}"
# The sysroot lives in the user's cache, not the work tree, so fresh clones (CI) reuse it.
sysroot="${SYSROOT_ARM64:-${XDG_CACHE_HOME:-$HOME/.cache}/omnisat/sysroot-arm64-bookworm}"
version=$(packaging/version.sh)
host=$(go env GOHOSTARCH)
mkdir -p dist

# changelog VERSION: the Debian changelog of this build, one entry dated by the commit.
changelog() {
	cat <<-END
		omnisat ($1-1) unstable; urgency=medium

		  * Built from commit $(git rev-parse --short=12 HEAD); the changes are in git.

		 -- omnisat maintainers <omnisat@users.noreply.github.com>  $(git log -1 --format=%cD)
	END
}

for arch in "${arches[@]}"; do
	bindir="build/$arch"
	cross=()
	if [ "$arch" != "$host" ]; then
		if [ "$arch" != arm64 ]; then
			echo "package: cross-building $arch on $host is not set up" >&2
			exit 1
		fi
		packaging/sysroot-arm64.sh "$sysroot"
		root=$(realpath "$sysroot")
		cross=(GOARCH=arm64 CC="aarch64-linux-gnu-gcc --sysroot=$root" CXX="aarch64-linux-gnu-g++ --sysroot=$root"
			PKG_CONFIG_SYSROOT_DIR="$root"
			PKG_CONFIG_LIBDIR="$root/usr/lib/aarch64-linux-gnu/pkgconfig:$root/usr/share/pkgconfig")
	fi
	echo "package: building omnisat $version for $arch"
	# Stripped, with the package version stamped in (omnisat version prints it); omnisat and the
	# camera program omnisat-camera (the only one that links OpenCV) are PIEs (they link C
	# libraries anyway), omnisat-ctl and the simulator program stay static pure-Go binaries.
	ldflags="-s -w -X main.version=$version"
	# Debian's hardening for the C and C++ parts: fortified libc calls, stack protector,
	# read-only relocations bound at start.
	hardening="-O2 -D_FORTIFY_SOURCE=2 -fstack-protector-strong"
	for prog in omnisat omnisat-camera; do
		env "${cross[@]}" CGO_ENABLED=1 CGO_CFLAGS="$hardening" CGO_CXXFLAGS="$hardening" \
			go build -trimpath -buildmode=pie -ldflags "$ldflags -extldflags '-Wl,-z,relro,-z,now'" -o "$bindir/$prog" "./cmd/$prog"
	done
	env "${cross[@]}" CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bindir/omnisat-ctl" ./cmd/omnisat-ctl
	# The model server simulator (omnisat simulate, omnisat run --simulator), static pure Go too:
	# kept out of omnisat so that a satellite does not map its code.
	env "${cross[@]}" CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bindir/omnisat-simulator" ./cmd/omnisat-simulator
	for page in omnisat omnisat-ctl; do
		gzip -9n <"packaging/man/$page.1" >"$bindir/$page.1.gz"
	done
	changelog "$version" | gzip -9n >"$bindir/changelog.Debian.gz"

	deb="dist/omnisat_${version}-1_${arch}.deb"
	rm -f dist/omnisat_*_"$arch".deb
	ARCH="$arch" VERSION="$version" BINDIR="$bindir" go run "$nfpm" package --packager deb \
		--config packaging/nfpm.yaml --target "$deb" >/dev/null
	echo "package: $deb ($(du -h "$deb" | cut -f1))"
	lintian --fail-on error,warning --info "$deb"
done

for arch in "${arches[@]}"; do
	if [ "$arch" = arm64 ] && [ "$host" != arm64 ]; then
		packaging/smoke-arm64.sh "build/arm64" "$sysroot"
	fi
done
