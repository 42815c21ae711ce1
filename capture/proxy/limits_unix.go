//go:build unix

package proxy

import "syscall"

// openFileLimit is the process's descriptor limit (RLIMIT_NOFILE), or 0.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return 0
	}
	return uint64(l.Cur)
}
