// Package natstest runs a JetStream-enabled NATS server for tests: in
// process (the server is a Go module) or as a separate process built from
// the same module with `go build`, never a downloaded binary. Both listen on
// 127.0.0.1 and can be stopped and restarted on the same port and storage
// directory, which is how the fault specs simulate restarts and partitions.
package natstest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/capbench/capbench/internal/loopback"
)

// MaxPayload is the server's max_payload: 8 MiB, room for the record of a
// 32k-token call (0.29 MB of JSON for 30k prompt + 2.8k generated tokens,
// 1.24 MB for 32k + 32k) with a wide margin; NATS's default is 1 MiB.
// docs/nats-store.md explains the choice.
const MaxPayload = 8 << 20

// Server is an in-process NATS server with JetStream.
type Server struct {
	mu         sync.Mutex
	dir        string
	port       int
	syncAlways bool
	srv        *server.Server
	// Cluster members only.
	name, routes string
	clusterPort  int
}

// Option configures a Server.
type Option func(*Server)

// SyncAlways makes JetStream fsync every write before acknowledging it
// (sync_interval: always), as the file store fsyncs every put. Without it
// JetStream syncs every two minutes and relies on replicas for durability.
func SyncAlways() Option { return func(s *Server) { s.syncAlways = true } }

// Start runs a server with JetStream storage under dir on a free port.
func Start(dir string, opts ...Option) (*Server, error) {
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, port: port}
	for _, o := range opts {
		o(s)
	}
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

// URL is the client URL, stable across restarts.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Restart starts the server again (after Stop) on the same port and storage.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("natstest: server already running")
	}
	name := s.name
	if name == "" {
		name = "capbench-test"
	}
	opts := &server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		Port:       s.port,
		JetStream:  true,
		StoreDir:   s.dir,
		MaxPayload: MaxPayload,
		SyncAlways: s.syncAlways,
		NoLog:      true,
		NoSigs:     true,
	}
	if s.routes != "" {
		opts.Cluster = server.ClusterOpts{Name: "capbench-test", Host: "127.0.0.1", Port: s.clusterPort}
		opts.Routes = server.RoutesFromStr(s.routes)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("natstest: new server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("natstest: server not ready within 10s")
	}
	s.srv = srv
	return nil
}

// Stop shuts the server down; clients see a disconnect until Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
}

// BuildBinary compiles the nats-server main package of the required module
// version into dir and returns the binary's path.
func BuildBinary(dir string) (string, error) {
	bin := filepath.Join(dir, "nats-server")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("natstest: go build nats-server: %w\n%s", err, out)
	}
	return bin, nil
}

// Process is a nats-server running as a separate OS process.
type Process struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
	done     chan struct{}
}

// StartProcess runs bin with JetStream storage under dir on a free port.
func StartProcess(bin, dir string) (*Process, error) {
	port, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	p := &Process{bin: bin, dir: dir, port: port}
	return p, p.Restart()
}

// URL is the client URL, stable across restarts.
func (p *Process) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

// Restart starts the process again after Kill.
func (p *Process) Restart() error {
	if p.cmd != nil {
		return errors.New("natstest: process already running")
	}
	conf := filepath.Join(p.dir, "nats.conf")
	body := fmt.Sprintf("host: 127.0.0.1\nport: %d\nmax_payload: %d\njetstream {\n  store_dir: %q\n}\n",
		p.port, MaxPayload, filepath.Join(p.dir, "js"))
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return fmt.Errorf("natstest: write config: %w", err)
	}
	cmd := exec.Command(p.bin, "-c", conf)
	log, err := os.OpenFile(filepath.Join(p.dir, "nats-server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("natstest: open log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("natstest: start nats-server: %w", err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	return p.waitReady(10 * time.Second)
}

func (p *Process) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.done:
			return errors.New("natstest: nats-server exited during start; see nats-server.log in " + p.dir)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("natstest: nats-server not listening within %s", d)
}

// Dir is the process's working directory (config, storage, log).
func (p *Process) Dir() string { return p.dir }

// Running reports whether the process is up.
func (p *Process) Running() bool { return p.cmd != nil }

// Kill stops the process with SIGKILL (no graceful shutdown) and waits.
func (p *Process) Kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// Cluster is an in-process cluster of JetStream servers routed to each
// other on 127.0.0.1, as deploy/k8s runs three.
type Cluster struct {
	Nodes []*Server
}

// StartCluster runs n routed servers with storage under dir/n<i>.
func StartCluster(dir string, n int) (*Cluster, error) {
	c := &Cluster{}
	clusterPorts := make([]int, n)
	var routes []string
	for i := range n {
		p, err := loopback.FreePort()
		if err != nil {
			return nil, err
		}
		clusterPorts[i] = p
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := range n {
		port, err := loopback.FreePort()
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, &Server{
			dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), port: port,
			name: fmt.Sprintf("n%d", i), clusterPort: clusterPorts[i], routes: strings.Join(routes, ","),
		})
	}
	// Start all before waiting: JetStream needs a quorum to be ready.
	errs := make(chan error, n)
	for _, s := range c.Nodes {
		go func() { errs <- s.Restart() }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.Stop()
		return nil, first
	}
	return c, nil
}

// URL lists every node as a store URL does: nats://host:port,host:port,...
func (c *Cluster) URL() string {
	var hosts []string
	for _, s := range c.Nodes {
		hosts = append(hosts, strings.TrimPrefix(s.URL(), "nats://"))
	}
	return "nats://" + strings.Join(hosts, ",")
}

// Stop shuts every node down.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}
