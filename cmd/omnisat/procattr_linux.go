package main

import (
	"os/exec"
	"syscall"
)

// stopWithParent makes a helper program get SIGTERM if omnisat dies without stopping it (a
// crash, SIGKILL), so that no simulator is left holding its port.
func stopWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
