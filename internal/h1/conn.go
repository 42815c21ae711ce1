package h1

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"
)

// conn is one keep-alive connection with its buffers.
type conn struct {
	addr     string
	nc       net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	idleFrom time.Time
}

// pool keeps the idle connections to one address, newest last.
type pool struct {
	addr    string
	max     int
	idleFor time.Duration

	mu   sync.Mutex
	idle []*conn
}

// get returns a kept connection (reused) or dials a new one. A connection
// idle longer than idleFor is closed rather than risked.
func (p *pool) get(ctx context.Context, t *Transport) (c *conn, reused bool, err error) {
	now := time.Now()
	p.mu.Lock()
	for len(p.idle) > 0 {
		c = p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if p.idleFor <= 0 || now.Sub(c.idleFrom) < p.idleFor {
			p.mu.Unlock()
			return c, true, nil
		}
		_ = c.nc.Close()
	}
	p.mu.Unlock()
	nc, err := t.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	return &conn{addr: p.addr, nc: nc, br: bufio.NewReaderSize(nc, 32<<10), bw: bufio.NewWriterSize(nc, 32<<10)}, false, nil
}

// put keeps c for reuse, or closes it when the pool is full.
func (p *pool) put(c *conn) {
	c.idleFrom = time.Now()
	p.mu.Lock()
	if len(p.idle) < p.max {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = c.nc.Close()
}

func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.nc.Close()
	}
}
