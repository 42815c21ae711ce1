package proxy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// tcpRelay starts the leanest proxy there can be in front of upstream (a
// host:port) and returns its URL: each client connection gets a connection
// of its own to upstream, and each message is relayed whole after reading
// only its framing (the head's lines and its Content-Length), with no HTTP
// semantics and nothing parsed. It is the peer for how much of a proxied
// call's cost is the second hop itself, which any proxy pays. It serves the
// benchmarks' calls (bodies with a Content-Length) and closes a connection
// on anything else. Everything is closed when the benchmark ends.
func tcpRelay(b *testing.B, upstream string) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	b.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c)
			go func() {
				u, err := net.Dial("tcp", upstream)
				if err != nil {
					_ = c.Close()
					return
				}
				track(u)
				relayMessages(c, u)
				_, _ = c.Close(), u.Close()
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// relayMessages relays request after request from c to u, and each reply
// back, until either side fails or sends what it cannot frame.
func relayMessages(c, u net.Conn) {
	cr, ur := bufio.NewReader(c), bufio.NewReader(u)
	var req, reply bytes.Buffer
	for {
		if readMessage(cr, &req) != nil {
			return
		}
		if _, err := u.Write(req.Bytes()); err != nil {
			return
		}
		if readMessage(ur, &reply) != nil {
			return
		}
		if _, err := c.Write(reply.Bytes()); err != nil {
			return
		}
	}
}

var errUnframed = errors.New("relay: message without a Content-Length")

// readMessage reads one HTTP/1.1 message, head and Content-Length body, into
// buf as it came.
func readMessage(r *bufio.Reader, buf *bytes.Buffer) error {
	buf.Reset()
	length := -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		buf.Write(line)
		if len(line) <= 2 { // the blank line ending the head
			break
		}
		name, value, ok := strings.Cut(string(line), ":")
		if ok && strings.EqualFold(name, "Content-Length") {
			if length, err = strconv.Atoi(strings.TrimSpace(value)); err != nil {
				return err
			}
		}
	}
	if length < 0 {
		return errUnframed
	}
	_, err := io.CopyN(buf, r, int64(length))
	return err
}
