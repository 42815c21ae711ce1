package dockerapi_test

import (
	"archive/tar"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/dockerapi"
)

// fakeEngine is a loopback stand-in for the Docker Engine API: it answers
// the calls the client makes, as the engine shapes them, and records what
// it was sent.
type fakeEngine struct {
	srv *httptest.Server

	mu sync.Mutex
	// buildStream is what POST /build answers, one JSON object a line.
	buildStream []string
	// context is what the last build sent: file name -> contents, mode.
	context map[string]string
	modes   map[string]int64
	query   map[string]string
	// created is the last container create body.
	created map[string]any
	// state is what GET /containers/{id}/json answers.
	state map[string]any
	// logs are the container's output frames: stream number, text.
	logs []frame
	// calls lists "METHOD path" in order.
	calls []string
	// status overrides the answer of one "METHOD path".
	status map[string]int
}

type frame struct {
	stream byte
	text   string
}

const ctrID = "0123456789abcdef0123456789abcdef"

func newFakeEngine() *fakeEngine {
	f := &fakeEngine{status: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	DeferCleanup(f.srv.Close)
	return f
}

// client is a dockerapi client for the fake, as DOCKER_HOST=tcp://... names it.
func (f *fakeEngine) client() *dockerapi.Client {
	c, err := dockerapi.New("tcp://" + strings.TrimPrefix(f.srv.URL, "http://"))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(c.Close)
	return c
}

func (f *fakeEngine) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeEngine) serve(w http.ResponseWriter, r *http.Request) {
	defer GinkgoRecover()
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.Method + " " + r.URL.Path
	f.calls = append(f.calls, key)
	if code := f.status[key]; code != 0 {
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"message":"fake engine refuses `+key+`"}`)
		return
	}
	switch {
	case key == "GET /_ping":
		_, _ = io.WriteString(w, "OK")
	case key == "GET /info":
		_, _ = io.WriteString(w, `{"ServerVersion":"20.10.24","Runtimes":{"runc":{"path":"runc"},"nvidia":{"path":"nvidia-container-runtime"}}}`)
	case key == "POST /build":
		if !f.readContext(r) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"message":"unexpected EOF"}`)
			return
		}
		for _, line := range f.buildStream {
			_, _ = io.WriteString(w, line+"\r\n")
		}
	case key == "POST /containers/create":
		Expect(json.NewDecoder(r.Body).Decode(&f.created)).To(Succeed())
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"Id":"`+ctrID+`","Warnings":[]}`)
	case key == "POST /networks/create":
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"Id":"net1","Warning":""}`)
	case key == "GET /containers/"+ctrID+"/json":
		Expect(json.NewEncoder(w).Encode(f.state)).To(Succeed())
	case key == "GET /containers/"+ctrID+"/logs":
		w.Header().Set("Content-Type", "application/vnd.docker.multiplexed-stream")
		for _, fr := range f.logs {
			var hdr [8]byte
			hdr[0] = fr.stream
			binary.BigEndian.PutUint32(hdr[4:], uint32(len(fr.text)))
			_, _ = w.Write(hdr[:])
			_, _ = io.WriteString(w, fr.text)
		}
	case strings.HasPrefix(key, "GET /images/") && strings.HasSuffix(key, "/json"):
		if strings.Contains(key, "missing") {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"message":"No such image: missing:1"}`)
			return
		}
		_, _ = io.WriteString(w, `{"Id":"sha256:abc"}`)
	case r.Method == http.MethodPost || r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"page not found"}`)
	}
}

// readContext reads the tar stream; false when it was cut short.
func (f *fakeEngine) readContext(r *http.Request) bool {
	f.context, f.modes, f.query = map[string]string{}, map[string]int64{}, map[string]string{}
	for k := range r.URL.Query() {
		f.query[k] = r.URL.Query().Get(k)
	}
	tr := tar.NewReader(r.Body)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return false
		}
		f.context[h.Name], f.modes[h.Name] = string(b), h.Mode
	}
}

// running is an inspect answer for a running container whose port 8000 is
// published at hostPort ("" = exposed but not published).
func running(hostPort string) map[string]any {
	var bindings any
	if hostPort != "" {
		bindings = []map[string]string{{"HostIp": "127.0.0.1", "HostPort": hostPort}}
	}
	return map[string]any{
		"State":           map[string]any{"Status": "running", "Running": true},
		"NetworkSettings": map[string]any{"Ports": map[string]any{"8000/tcp": bindings}},
	}
}

func exitedWith(code int) map[string]any {
	return map[string]any{
		"State":           map[string]any{"Status": "exited", "Running": false, "ExitCode": code},
		"NetworkSettings": map[string]any{"Ports": map[string]any{}},
	}
}
