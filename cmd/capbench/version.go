package main

import (
	"runtime/debug"
	"strings"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); else the
// module version and VCS revision the binary was built from are reported.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+dirty"
			}
		}
	}
	parts := []string{v}
	if rev != "" && !strings.Contains(v, rev[:min(12, len(rev))]) {
		parts = append(parts, rev[:min(12, len(rev))]+modified)
	}
	return strings.Join(parts, " ") + " " + info.GoVersion
}
