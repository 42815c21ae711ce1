package record_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"sort"

	"github.com/capbench/capbench/internal/fixtures"
)

// fixturesDir is the shared fixtures folder next to the repository, or "".
func fixturesDir() string {
	dir, _ := fixtures.Dir()
	return dir
}

// fixtureLine is one JSONL line of a fixture file.
type fixtureLine struct {
	file string // path relative to the fixtures dir
	num  int    // 1-based line number
	data []byte // without the newline
}

// jsonlLines returns every line of every JSONL file matched by the globs
// (relative to the fixtures dir), in a stable order.
func jsonlLines(root string, globs ...string) ([]fixtureLine, error) {
	var files []string
	for _, g := range globs {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	var out []fixtureLine
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, f)
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<28)
		for n := 1; sc.Scan(); n++ {
			out = append(out, fixtureLine{file: rel, num: n, data: bytes.Clone(sc.Bytes())})
		}
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
