package dockerapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
)

// Logs returns the container's output, stdout and stderr interleaved as
// written; tail > 0 keeps only the last tail lines.
func (ctr *Container) Logs(ctx context.Context, tail int) (string, error) {
	q := url.Values{"stdout": {"1"}, "stderr": {"1"}, "tail": {"all"}}
	if tail > 0 {
		q.Set("tail", strconv.Itoa(tail))
	}
	op := "logs of container " + ctr.String()
	resp, err := ctr.c.request(ctx, op, http.MethodGet, "/containers/"+ctr.ID+"/logs", q, nil, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	// Without a TTY (capbench never asks for one) the engine multiplexes
	// the streams; a raw stream is plain bytes.
	if resp.Header.Get("Content-Type") == "application/vnd.docker.raw-stream" {
		_, err = io.Copy(&out, resp.Body)
	} else {
		err = Demux(resp.Body, &out, &out)
	}
	if err != nil {
		return out.String(), fmt.Errorf("docker: %s: %w", op, err)
	}
	return out.String(), nil
}

// Demux splits the engine's multiplexed stream (stdcopy framing: an 8-byte
// header holding the stream number and a big-endian payload length, then
// the payload) into stdout and stderr. A frame of the engine's own error
// stream ends it with that error.
func Demux(r io.Reader, stdout, stderr io.Writer) error {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read log frame header: %w", err)
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		var w io.Writer
		switch hdr[0] {
		case 0, 1: // stdin is never attached; treat it as stdout
			w = stdout
		case 2:
			w = stderr
		case 3:
			msg, _ := io.ReadAll(io.LimitReader(r, n))
			return fmt.Errorf("engine error in log stream: %s", msg)
		default:
			return fmt.Errorf("log stream: unknown stream %d (not a multiplexed stream?)", hdr[0])
		}
		if _, err := io.CopyN(w, r, n); err != nil {
			return fmt.Errorf("read log frame of %d bytes: %w", n, err)
		}
	}
}
