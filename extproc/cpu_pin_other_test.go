//go:build unix && !linux

package extproc_test

import "errors"

// pinProcess needs Linux's sched_setaffinity.
func pinProcess(string) error {
	return errors.New("pinning a benchmark server to a CPU needs Linux")
}
