//go:build !linux

package testaudio

import "os/exec"

// dieWithParent is Linux-only (Pdeathsig); elsewhere a crashed test may leave the daemon.
func dieWithParent(cmd *exec.Cmd) {}
