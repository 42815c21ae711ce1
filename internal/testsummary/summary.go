package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is one skipped spec or test.
type skip struct {
	pkg, name, reason string
}

// summary echoes a compact run log and collects the skips.
type summary struct {
	out    io.Writer
	skips  []skip
	failed bool
	// per package: its output, kept until it passes or fails
	output map[string][]string
	// Ginkgo skip blocks are parsed line by line per package.
	state map[string]*blockState
	// lastOutput per test, for the reason of a Go-level t.Skip.
	lastOutput map[string]string
}

type blockState struct {
	step int // 0 none, 1 want name, 2 want location, 3 want reason
	name string
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, output: map[string][]string{}, state: map[string]*blockState{}, lastOutput: map[string]string{}}
}

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			// Not an event (a build error printed as text): pass it on.
			fmt.Fprintln(s.out, sc.Text())
			continue
		}
		s.feed(e)
	}
	return sc.Err()
}

func (s *summary) feed(e event) {
	switch e.Action {
	case "output", "build-output":
		s.output[e.Package] = append(s.output[e.Package], e.Output)
		line := strings.TrimRight(e.Output, "\n")
		s.ginkgoLine(e.Package, line)
		if e.Test != "" && strings.TrimSpace(line) != "" && !strings.HasPrefix(strings.TrimSpace(line), "---") && !strings.HasPrefix(line, "=== ") {
			s.lastOutput[e.Package+" "+e.Test] = strings.TrimSpace(line)
		}
	case "skip":
		if e.Test != "" && !strings.Contains(e.Test, "/") {
			s.skips = append(s.skips, skip{pkg: e.Package, name: e.Test, reason: goSkipReason(s.lastOutput[e.Package+" "+e.Test])})
		}
	case "pass", "fail", "build-fail":
		if e.Test != "" {
			return
		}
		if e.Action == "pass" {
			fmt.Fprintf(s.out, "ok   %s%s\n", e.Package, s.specLine(e.Package))
		} else {
			s.failed = true
			for _, l := range s.output[e.Package] {
				io.WriteString(s.out, l)
			}
			fmt.Fprintf(s.out, "FAIL %s\n", e.Package)
		}
		delete(s.output, e.Package)
	}
}

// specLine is the Ginkgo "Ran N of M Specs" summary of a package, if any.
func (s *summary) specLine(pkg string) string {
	for _, l := range s.output[pkg] {
		if strings.HasPrefix(l, "Ran ") && strings.Contains(l, " Specs in ") {
			return "  (" + strings.TrimSpace(l) + ")"
		}
	}
	return ""
}

// ginkgoLine follows Ginkgo's verbose report of a skipped spec:
//
//	S [SKIPPED] [0.000 seconds]
//	<container texts> [It] <spec text> [labels]
//	<file:line>
//	<blank>
//	  [SKIPPED] <reason>
func (s *summary) ginkgoLine(pkg, line string) {
	st := s.state[pkg]
	if st == nil {
		st = &blockState{}
		s.state[pkg] = st
	}
	switch {
	case strings.HasPrefix(line, "S [SKIPPED]"):
		*st = blockState{step: 1}
	case st.step == 1:
		st.name, st.step = strings.TrimSpace(line), 2
	case st.step == 2:
		st.step = 3
	case st.step == 3:
		t := strings.TrimSpace(line)
		if r, ok := strings.CutPrefix(t, "[SKIPPED] "); ok {
			s.skips = append(s.skips, skip{pkg: pkg, name: st.name, reason: r})
			*st = blockState{}
		} else if strings.HasPrefix(t, "---") || strings.HasPrefix(t, "In [") {
			s.skips = append(s.skips, skip{pkg: pkg, name: st.name, reason: "(no reason given)"})
			*st = blockState{}
		}
	}
}

// goSkipReason strips the "file_test.go:12: " prefix testing puts on t.Skip.
func goSkipReason(l string) string {
	if i := strings.Index(l, ": "); i > 0 && strings.Contains(l[:i], ".go:") {
		return l[i+2:]
	}
	if l == "" {
		return "(no reason given)"
	}
	return l
}

// report prints the skips grouped by package and reason.
func (s *summary) report(w io.Writer) {
	if len(s.skips) == 0 {
		fmt.Fprintln(w, "\nskipped: nothing")
		return
	}
	type key struct{ pkg, reason string }
	groups := map[key][]string{}
	pkgs := map[string]bool{}
	for _, k := range s.skips {
		groups[key{k.pkg, k.reason}] = append(groups[key{k.pkg, k.reason}], k.name)
		pkgs[k.pkg] = true
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].pkg != keys[j].pkg {
			return keys[i].pkg < keys[j].pkg
		}
		return keys[i].reason < keys[j].reason
	})
	fmt.Fprintf(w, "\nskipped: %d specs and tests in %d packages\n", len(s.skips), len(pkgs))
	last := ""
	for _, k := range keys {
		if k.pkg != last {
			fmt.Fprintf(w, "  %s\n", k.pkg)
			last = k.pkg
		}
		names := groups[k]
		fmt.Fprintf(w, "    %3d  %s\n", len(names), k.reason)
		fmt.Fprintf(w, "         e.g. %s\n", names[0])
	}
}
