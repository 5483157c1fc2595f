//go:build !linux

package camera

import "os/exec"

// dieWithParent is Linux-only (Pdeathsig); elsewhere an agent that crashes may leave the
// camera program running until its output pipe breaks.
func dieWithParent(cmd *exec.Cmd) {}
