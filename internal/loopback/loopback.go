// Package loopback hands out what servers started on this machine need: a
// free TCP port on 127.0.0.1, for a child process told its port by flag.
package loopback

import "net"

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
