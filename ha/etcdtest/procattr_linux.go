package etcdtest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the member if the test
// process dies first (a panic, a timeout's SIGQUIT): no etcd outlives its
// test.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
