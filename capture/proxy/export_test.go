package proxy

// DefaultMaxConnectionsFor is the connection cap chosen for a descriptor
// limit (exported for specs).
var DefaultMaxConnectionsFor = defaultMaxConnections

// HeldEntries is how many parsed entries the followers of the tracked
// rollouts hold between calls (specs: none should).
func (p *Proxy) HeldEntries() int {
	n := 0
	p.rollouts.Range(func(_, v any) bool {
		rl := v.(*rolloutLineage)
		rl.mu.Lock()
		if rl.follow != nil {
			n += rl.follow.Holding()
		}
		rl.mu.Unlock()
		return true
	})
	return n
}
