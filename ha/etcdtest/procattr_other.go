//go:build !linux

package etcdtest

import "os/exec"

// setParentDeathSignal does nothing where the kernel has no parent death
// signal: the test's cleanup stops the members.
func setParentDeathSignal(*exec.Cmd) {}
