package proxy

// DefaultMaxConnectionsFor is the connection cap chosen for a descriptor
// limit (exported for specs).
var DefaultMaxConnectionsFor = defaultMaxConnections
