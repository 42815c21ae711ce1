package record

// Text is the canonical text t holds; nil for none.
func (t TokenText) Text() []byte { return t.text }
