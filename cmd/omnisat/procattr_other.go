//go:build !linux

package main

import "os/exec"

// stopWithParent is Linux-only (Pdeathsig); elsewhere an omnisat that crashes may leave its
// simulator running.
func stopWithParent(cmd *exec.Cmd) {}
