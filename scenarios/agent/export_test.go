package agent

// WithDefaults exposes the CLI-style default merge to the specs.
var WithDefaults = withDefaults
