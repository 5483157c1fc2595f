// Package packaging holds the recipes of the omnisat .deb packages (nfpm.yaml, the maintainer
// scripts, the systemd unit, the build scripts) and, in its tests, the checks of the packages
// `make package` built: their files, conffile, dependencies and maintainer scripts, and the
// arm64 binary run under qemu-user. See README.md.
package packaging
