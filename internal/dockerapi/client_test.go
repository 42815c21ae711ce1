package dockerapi_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"

	"github.com/capbench/capbench/internal/dockerapi"
)

var _ = Describe("the engine address", func() {
	DescribeTable("accepts a local engine and refuses others, saying what to set",
		func(host, wantErr string) {
			c, err := dockerapi.New(host)
			if wantErr == "" {
				Expect(err).NotTo(HaveOccurred())
				Expect(c.PublishIP()).To(Equal("127.0.0.1"))
				return
			}
			Expect(err).To(MatchError(dockerapi.ErrUnsupportedHost))
			Expect(err).To(MatchError(ContainSubstring(wantErr)))
		},
		Entry("unset: the default socket", "", ""),
		Entry("a unix socket", "unix:///run/user/1000/docker.sock", ""),
		Entry("loopback TCP", "tcp://127.0.0.1:2375", ""),
		Entry("localhost", "tcp://localhost:2375", ""),
		Entry("IPv6 loopback", "tcp://[::1]:2375", ""),
		Entry("a remote engine", "tcp://10.1.2.3:2375", "is not on this machine"),
		Entry("TCP without a port", "tcp://127.0.0.1", "names no port"),
		Entry("unix without a path", "unix://", "names no socket path"),
		Entry("ssh", "ssh://me@build-host", `scheme "ssh" is not supported`),
		Entry("a Windows pipe", "npipe:////./pipe/docker_engine", `scheme "npipe" is not supported`),
	)

	It("refuses DOCKER_TLS_VERIFY instead of talking plain HTTP to a TLS port", func() {
		GinkgoT().Setenv("DOCKER_TLS_VERIFY", "1")
		GinkgoT().Setenv("DOCKER_HOST", "tcp://127.0.0.1:2376")
		_, err := dockerapi.FromEnv()
		Expect(err).To(MatchError(dockerapi.ErrUnsupportedHost))
		Expect(err).To(MatchError(ContainSubstring("DOCKER_TLS_VERIFY")))
	})

	It("reaches an engine on a unix socket", func(ctx SpecContext) {
		dir, err := os.MkdirTemp("", "dk") // short: socket paths are limited to 108 bytes
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(os.RemoveAll, dir)
		sock := filepath.Join(dir, "docker.sock")
		ln, err := net.Listen("unix", sock)
		Expect(err).NotTo(HaveOccurred())
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/_ping" {
				_, _ = w.Write([]byte("OK"))
				return
			}
			w.WriteHeader(http.StatusNotFound)
		}))
		srv.Listener = ln
		srv.Start()
		DeferCleanup(srv.Close)
		c, err := dockerapi.New("unix://" + sock)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(c.Close)
		Expect(c.Ping(ctx)).To(Succeed())
	})
})

var _ = Describe("an engine that does not answer", func() {
	DescribeTable("says where it looked and what to do",
		func(ctx SpecContext, host func() string, cause string) {
			h := host()
			c, err := dockerapi.New(h)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(c.Close)
			err = c.Ping(ctx)
			Expect(err).To(MatchError(dockerapi.ErrUnreachable))
			Expect(err.Error()).To(And(
				ContainSubstring("not reachable at "+h),
				ContainSubstring("start it"), ContainSubstring("DOCKER_HOST"), ContainSubstring(cause)))
		},
		Entry("no socket file", func() string { return "unix://" + filepath.Join(GinkgoT().TempDir(), "docker.sock") }, "no such file"),
		Entry("a TCP port nobody listens on", func() string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			Expect(err).NotTo(HaveOccurred())
			addr := ln.Addr().String()
			Expect(ln.Close()).To(Succeed())
			return "tcp://" + addr
		}, "connection refused"),
	)

	It("passes the engine's own words on with the HTTP status", func(ctx SpecContext) {
		f := newFakeEngine()
		f.status["GET /info"] = http.StatusInternalServerError
		_, err := f.client().Info(ctx)
		var api *dockerapi.APIError
		Expect(errors.As(err, &api)).To(BeTrue())
		Expect(api.Status).To(Equal(http.StatusInternalServerError))
		Expect(err).To(MatchError(ContainSubstring("docker: info: fake engine refuses GET /info (HTTP 500)")))
	})
})

var _ = Describe("building an image", func() {
	files := []dockerapi.ContextFile{
		{Name: "Dockerfile", Mode: 0o644, Data: []byte("FROM scratch\nCOPY app /app\n")},
	}

	It("sends the context as a tar stream, file modes kept, and returns the image ID", func(ctx SpecContext) {
		bin := filepath.Join(GinkgoT().TempDir(), "app")
		Expect(os.WriteFile(bin, []byte("\x7fELF static"), 0o600)).To(Succeed())
		f := newFakeEngine()
		f.buildStream = []string{`{"stream":"Step 1/2 : FROM scratch\n"}`, `{"stream":" ---\u003e \n"}`,
			`{"aux":{"ID":"sha256:feed"}}`, `{"stream":"Successfully built feed\n"}`}
		var log bytes.Buffer
		id, err := f.client().Build(ctx, "capbench-e2e:1", append(files, dockerapi.ContextFile{Name: "app", Mode: 0o755, Path: bin}), &log)
		Expect(err).NotTo(HaveOccurred())
		Expect(id).To(Equal("sha256:feed"))
		Expect(f.context).To(Equal(map[string]string{"Dockerfile": "FROM scratch\nCOPY app /app\n", "app": "\x7fELF static"}))
		Expect(f.modes).To(HaveKeyWithValue("app", int64(0o755)))
		Expect(f.query).To(HaveKeyWithValue("t", "capbench-e2e:1"))
		Expect(f.query).To(HaveKeyWithValue("labels", `{"org.capbench":"true"}`))
		Expect(log.String()).To(ContainSubstring("Successfully built feed"))
	})

	It("fails on an error in the progress stream, with the build's last lines", func(ctx SpecContext) {
		f := newFakeEngine()
		f.buildStream = []string{`{"stream":"Step 1/2 : FROM scratch\n"}`, `{"stream":"Step 2/2 : COPY app /app\n"}`,
			`{"errorDetail":{"message":"COPY failed: file not found in build context: stat app: file does not exist"},"error":"COPY failed: file not found in build context: stat app: file does not exist"}`}
		_, err := f.client().Build(ctx, "capbench-e2e:2", files, nil)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(
			ContainSubstring("build image capbench-e2e:2 failed: COPY failed: file not found in build context"),
			ContainSubstring("Step 2/2 : COPY app /app")))
	})

	It("fails on a progress stream cut short", func(ctx SpecContext) {
		f := newFakeEngine()
		f.buildStream = []string{`{"stream":"Step 1/2 : FROM scratch\n"}`, `{"stream":"Ste`}
		_, err := f.client().Build(ctx, "capbench-e2e:3", files, nil)
		Expect(err).To(MatchError(ContainSubstring("read build output")))
	})

	It("names a context file that cannot be read", func(ctx SpecContext) {
		f := newFakeEngine()
		missing := filepath.Join(GinkgoT().TempDir(), "gone")
		_, err := f.client().Build(ctx, "capbench-e2e:4", []dockerapi.ContextFile{{Name: "app", Mode: 0o755, Path: missing}}, nil)
		Expect(err).To(MatchError(ContainSubstring("build context file app")))
		Expect(err).To(MatchError(ContainSubstring(missing)))
	})

	It("knows a missing image from a present one, and removing a missing one is no error", func(ctx SpecContext) {
		f := newFakeEngine()
		c := f.client()
		Expect(c.ImagePresent(ctx, "vllm/vllm-openai:v0.29.0")).To(BeTrue())
		Expect(c.ImagePresent(ctx, "missing:1")).To(BeFalse())
		f.status["DELETE /images/gone:1"] = http.StatusNotFound
		Expect(c.RemoveImage(ctx, "gone:1")).To(Succeed())
		Expect(f.called()).To(ContainElement("GET /images/vllm/vllm-openai:v0.29.0/json"))
	})
})

var _ = Describe("running a container", func() {
	var (
		f      *fakeEngine
		health *httptest.Server
		// healthCode is what the container's /health answers.
		healthCode int
		// hangAfter, when positive, is how many probes are answered before
		// every later one hangs until its client gives up.
		hangAfter int
		probes    atomic.Int32
	)
	BeforeEach(func() {
		f = newFakeEngine()
		healthCode, hangAfter = http.StatusOK, 0
		probes.Store(0)
		health = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/health" {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			if n := probes.Add(1); hangAfter > 0 && int(n) > hangAfter {
				<-r.Context().Done()
				return
			}
			w.WriteHeader(healthCode)
		}))
		DeferCleanup(health.Close)
		f.logs = []frame{{1, "INFO serving on 0.0.0.0:8000\n"}, {2, "ERROR upstream http://vllm:8000 unreachable\n"}}
	})
	healthPort := func() string { return health.URL[strings.LastIndex(health.URL, ":")+1:] }
	spec := dockerapi.ContainerSpec{Image: "capbench-e2e:1", Cmd: []string{"proxy", "--port", "8000"}, Port: "8000/tcp",
		Binds: []string{"/tmp/cap:/capture"}, Network: "capbench-n1", Aliases: []string{"proxy"}}
	wait := dockerapi.Wait{Path: "/health", Timeout: 2 * time.Second, Interval: 10 * time.Millisecond}

	It("creates it as `docker run` would, waits for /health, and stops then removes it", func(ctx SpecContext) {
		f.state = running(healthPort())
		gpu := spec
		gpu.GPUs, gpu.IpcMode = true, "host"
		ctr, err := f.client().Run(ctx, gpu)
		Expect(err).NotTo(HaveOccurred())
		Expect(ctr.ShortID()).To(Equal(ctrID[:12]))
		u, err := ctr.WaitHTTP(ctx, wait)
		Expect(err).NotTo(HaveOccurred())
		Expect(u).To(Equal("http://127.0.0.1:" + healthPort()))

		Expect(f.created).To(MatchKeys(IgnoreExtras, Keys{
			"Image":        Equal("capbench-e2e:1"),
			"Cmd":          Equal([]any{"proxy", "--port", "8000"}),
			"ExposedPorts": Equal(map[string]any{"8000/tcp": map[string]any{}}),
			"Labels":       Equal(map[string]any{"org.capbench": "true"}),
			"HostConfig": Equal(map[string]any{
				"PortBindings":   map[string]any{"8000/tcp": []any{map[string]any{"HostIp": "127.0.0.1", "HostPort": ""}}},
				"Binds":          []any{"/tmp/cap:/capture"},
				"NetworkMode":    "capbench-n1",
				"IpcMode":        "host",
				"DeviceRequests": []any{map[string]any{"Driver": "nvidia", "Count": float64(-1), "Capabilities": []any{[]any{"gpu"}}}},
			}),
			"NetworkingConfig": Equal(map[string]any{"EndpointsConfig": map[string]any{"capbench-n1": map[string]any{"Aliases": []any{"proxy"}}}}),
		}))

		Expect(ctr.Remove(ctx)).To(Succeed())
		calls := f.called()
		Expect(calls[len(calls)-2:]).To(Equal([]string{"POST /containers/" + ctrID + "/stop", "DELETE /containers/" + ctrID}))
	})

	It("fails when the container exits before it is healthy, with its output", func(ctx SpecContext) {
		f.state = exitedWith(3)
		ctr, err := f.client().Run(ctx, spec)
		Expect(err).NotTo(HaveOccurred())
		_, err = ctr.WaitHTTP(ctx, wait)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(And(
			ContainSubstring("container "+ctrID[:12]+" (capbench-e2e:1) exited with code 3 before GET /health answered"),
			ContainSubstring("INFO serving on 0.0.0.0:8000"),
			ContainSubstring("ERROR upstream http://vllm:8000 unreachable")))
	})

	It("fails at once when the port is not published on the host", func(ctx SpecContext) {
		f.state = running("")
		ctr, err := f.client().Run(ctx, spec)
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		_, err = ctr.WaitHTTP(ctx, dockerapi.Wait{Path: "/health", Timeout: time.Minute})
		Expect(err).To(MatchError(ContainSubstring("does not publish port 8000/tcp on the host")))
		Expect(err).To(MatchError(ContainSubstring("INFO serving on")))
		Expect(time.Since(start)).To(BeNumerically("<", 30*time.Second), "it must not wait out the startup timeout")
	})

	It("times out when /health never answers 200, naming the last answer", func(ctx SpecContext) {
		f.state = running(healthPort())
		healthCode = http.StatusServiceUnavailable
		ctr, err := f.client().Run(ctx, spec)
		Expect(err).NotTo(HaveOccurred())
		// Long enough that a loaded machine still gets a probe answered
		// before the deadline (at 300 ms one run saw every probe time out).
		_, err = ctr.WaitHTTP(ctx, dockerapi.Wait{Path: "/health", Timeout: 2 * time.Second, Interval: 10 * time.Millisecond})
		Expect(err).To(MatchError(ContainSubstring("did not answer GET /health with 200 within 2s (last probe: HTTP 503)")))
		Expect(err).To(MatchError(ContainSubstring("ERROR upstream")))
	})

	It("names the last answer, not the probe the deadline cut short", func(ctx SpecContext) {
		f.state = running(healthPort())
		healthCode, hangAfter = http.StatusServiceUnavailable, 1
		ctr, err := f.client().Run(ctx, spec)
		Expect(err).NotTo(HaveOccurred())
		_, err = ctr.WaitHTTP(ctx, dockerapi.Wait{Path: "/health", Timeout: 300 * time.Millisecond, Interval: 10 * time.Millisecond})
		Expect(err).To(MatchError(ContainSubstring("within 300ms (last probe: HTTP 503)")))
	})

	It("stops waiting when the caller gives up", func(ctx SpecContext) {
		f.state = running(healthPort())
		healthCode = http.StatusServiceUnavailable
		ctr, err := f.client().Run(ctx, spec)
		Expect(err).NotTo(HaveOccurred())
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err = ctr.WaitHTTP(cctx, dockerapi.Wait{Path: "/health", Timeout: time.Minute, Interval: 10 * time.Millisecond})
		Expect(err).To(MatchError(context.DeadlineExceeded))
	})

	It("removes a container that was created but would not start", func(ctx SpecContext) {
		f.status["POST /containers/"+ctrID+"/start"] = http.StatusInternalServerError
		_, err := f.client().Run(ctx, spec)
		Expect(err).To(MatchError(ContainSubstring("start container " + ctrID[:12] + " (capbench-e2e:1): fake engine refuses")))
		Expect(f.called()).To(ContainElement("DELETE /containers/" + ctrID))
	})

	It("treats a container or network already gone as removed, and reports other failures", func(ctx SpecContext) {
		f.state = running(healthPort())
		c := f.client()
		ctr, err := c.Run(ctx, spec)
		Expect(err).NotTo(HaveOccurred())
		f.status["POST /containers/"+ctrID+"/stop"] = http.StatusNotModified
		f.status["DELETE /containers/"+ctrID] = http.StatusNotFound
		Expect(ctr.Remove(ctx)).To(Succeed())
		f.status["DELETE /containers/"+ctrID] = http.StatusConflict
		Expect(ctr.Remove(ctx)).To(MatchError(ContainSubstring("remove container " + ctrID[:12])))

		nw, err := c.CreateNetwork(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(nw.Name).To(MatchRegexp(`^capbench-[0-9a-f]{12}$`))
		f.status["DELETE /networks/net1"] = http.StatusNotFound
		Expect(nw.Remove(ctx)).To(Succeed())
	})

	It("reads the engine's runtimes", func(ctx SpecContext) {
		info, err := f.client().Info(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(info.Runtimes).To(HaveKey("nvidia"))
	})
})

var _ = Describe("demultiplexing a log stream", func() {
	frameOf := func(stream byte, s string) []byte {
		hdr := make([]byte, 8, 8+len(s))
		hdr[0] = stream
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(s)))
		return append(hdr, s...)
	}
	DescribeTable("splits stdout from stderr and refuses what is not a stream",
		func(in []byte, wantOut, wantErr, wantFail string) {
			var out, errs bytes.Buffer
			err := dockerapi.Demux(bytes.NewReader(in), &out, &errs)
			if wantFail == "" {
				Expect(err).NotTo(HaveOccurred())
			} else {
				Expect(err).To(MatchError(ContainSubstring(wantFail)))
			}
			Expect(out.String()).To(Equal(wantOut))
			Expect(errs.String()).To(Equal(wantErr))
		},
		Entry("empty", []byte{}, "", "", ""),
		Entry("both streams", bytes.Join([][]byte{frameOf(1, "a\n"), frameOf(2, "b\n"), frameOf(1, "c")}, nil), "a\nc", "b\n", ""),
		Entry("an empty frame", frameOf(1, ""), "", "", ""),
		Entry("a cut header", frameOf(1, "a")[:5], "", "", "read log frame header"),
		Entry("a cut payload", frameOf(2, "hello")[:10], "", "he", "read log frame of 5 bytes"),
		Entry("the engine's error stream", frameOf(3, "container gone"), "", "", "engine error in log stream: container gone"),
		Entry("plain text (a TTY stream)", []byte("hello world\n"), "", "", "unknown stream 104"),
	)
})
