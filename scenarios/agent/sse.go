package agent

import (
	"bufio"
	"io"
	"strings"
)

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	Event string
	Data  string
}

// readSSE calls fn for every event in r until EOF or fn returns false. Lines
// may be long (log-probs, tool arguments), so the scanner buffer is raised.
func readSSE(r io.Reader, fn func(sseEvent) (bool, error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 32<<20)
	var ev sseEvent
	var data []string
	flush := func() (bool, error) {
		if ev.Event == "" && len(data) == 0 {
			return true, nil
		}
		ev.Data = strings.Join(data, "\n")
		more, err := fn(ev)
		ev, data = sseEvent{}, nil
		return more, err
	}
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		switch {
		case line == "":
			more, err := flush()
			if err != nil || !more {
				return err
			}
		case strings.HasPrefix(line, ":"):
			// comment / keep-alive
		case strings.HasPrefix(line, "event:"):
			ev.Event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	_, err := flush()
	return err
}
