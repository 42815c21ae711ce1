package main

import (
	"fmt"
	"slices"

	"github.com/capbench/capbench/scenarios"
)

// checkScenarioNames rejects names that are not in the catalog, suggesting
// the closest name, before anything starts.
func checkScenarioNames(names []string) error {
	if len(names) == 1 && (names[0] == "all" || names[0] == "") {
		return nil
	}
	known := scenarios.Names()
	for _, n := range names {
		if slices.Contains(known, n) {
			continue
		}
		hint := ""
		if s := closest(n, known); s != "" {
			hint = fmt.Sprintf("; did you mean %q?", s)
		}
		return fmt.Errorf("--scenario: no scenario named %q%s (`capbench run --list` lists all %d)", n, hint, len(known))
	}
	return nil
}

// closest returns the known name nearest to s by edit distance, or "" when
// none is near enough to be a likely typo.
func closest(s string, known []string) string {
	best, bestD := "", len(s)/2+2
	for _, k := range known {
		if d := editDistance(s, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
