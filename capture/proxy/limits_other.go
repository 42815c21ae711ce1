//go:build !unix

package proxy

// openFileLimit is unknown off unix.
func openFileLimit() uint64 { return 0 }
