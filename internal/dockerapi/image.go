package dockerapi

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// ContextFile is one file of a build context: Data, or the file at Path.
type ContextFile struct {
	Name string // path inside the context, e.g. "Dockerfile"
	Mode int64  // permission bits, e.g. 0o755
	Data []byte
	Path string
}

// buildTail is how many lines of build output a failed build's error keeps.
const buildTail = 20

// Build builds an image from files (one of them named Dockerfile), tags it
// tag and returns the image ID the engine reports (possibly empty on old
// engines). The engine's build output is copied to log (nil discards it).
// No registry is needed as long as the Dockerfile starts FROM scratch or a
// local image.
func (c *Client) Build(ctx context.Context, tag string, files []ContextFile, log io.Writer) (string, error) {
	op := "build image " + tag
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeContext(pw, files)) }()
	defer pr.Close() // stops the writer if the engine stops reading
	labels, _ := json.Marshal(map[string]string{Label: "true"})
	q := url.Values{"t": {tag}, "rm": {"1"}, "forcerm": {"1"}, "labels": {string(labels)}}
	resp, err := c.request(ctx, op, http.MethodPost, "/build", q, pr, "application/x-tar")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	return readBuildStream(op, resp.Body, log)
}

// writeContext writes the build context as a tar stream.
func writeContext(w io.Writer, files []ContextFile) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		if err := writeContextFile(tw, f); err != nil {
			return fmt.Errorf("build context file %s: %w", f.Name, err)
		}
	}
	return tw.Close()
}

func writeContextFile(tw *tar.Writer, f ContextFile) error {
	var src io.Reader = bytes.NewReader(f.Data)
	size := int64(len(f.Data))
	if f.Path != "" {
		file, err := os.Open(f.Path)
		if err != nil {
			return err
		}
		defer file.Close()
		fi, err := file.Stat()
		if err != nil {
			return err
		}
		src, size = file, fi.Size()
	}
	if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: f.Mode, Size: size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := io.CopyN(tw, src, size)
	return err
}

// buildMessage is one JSON object of the build progress stream.
type buildMessage struct {
	Stream      string `json:"stream"`
	Error       string `json:"error"`
	ErrorDetail struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	Aux struct {
		ID string `json:"ID"`
	} `json:"aux"`
}

// readBuildStream follows the progress stream to its end; an error object
// in it fails the build, with the last lines of output for context.
func readBuildStream(op string, r io.Reader, log io.Writer) (string, error) {
	if log == nil {
		log = io.Discard
	}
	var id string
	var tail []string
	dec := json.NewDecoder(r)
	for {
		var m buildMessage
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return id, nil
		}
		if err != nil {
			return "", fmt.Errorf("docker: %s: read build output: %w", op, err)
		}
		if m.Stream != "" {
			_, _ = io.WriteString(log, m.Stream)
			tail = append(tail, strings.Split(strings.TrimRight(m.Stream, "\n"), "\n")...)
			if len(tail) > buildTail {
				tail = tail[len(tail)-buildTail:]
			}
		}
		if m.Aux.ID != "" {
			id = m.Aux.ID
		}
		if msg := m.Error; msg != "" || m.ErrorDetail.Message != "" {
			if msg == "" {
				msg = m.ErrorDetail.Message
			}
			out := ""
			if len(tail) > 0 {
				out = "\nbuild output (last lines):\n" + strings.Join(tail, "\n")
			}
			return "", fmt.Errorf("docker: %s failed: %s%s", op, strings.TrimSpace(msg), out)
		}
	}
}

// RemoveImage deletes an image by tag or ID, untagging it first if needed.
// A missing image is not an error.
func (c *Client) RemoveImage(ctx context.Context, name string) error {
	err := c.call(ctx, "remove image "+name, http.MethodDelete, "/images/"+pathName(name), url.Values{"force": {"1"}}, nil, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// ImagePresent reports whether the engine has the image locally.
func (c *Client) ImagePresent(ctx context.Context, name string) (bool, error) {
	err := c.call(ctx, "inspect image "+name, http.MethodGet, "/images/"+pathName(name)+"/json", nil, nil, nil)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// pathName escapes an image or container name for a URL path, keeping the
// slashes of repository names (the engine's routes expect them raw).
func pathName(name string) string {
	return strings.ReplaceAll(url.PathEscape(name), "%2F", "/")
}
