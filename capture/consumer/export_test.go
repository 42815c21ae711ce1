package consumer

// CloseFileUnderneath closes the writer's file without telling the writer,
// so tests can make a write and its clean-up fail.
func CloseFileUnderneath(w *Writer) error { return w.f.Close() }

// MarshalNoEscape exposes the consumer's JSON encoder to the specs that hold
// it to encoding/json's bytes.
func MarshalNoEscape(v any) ([]byte, error) { return marshalNoEscape(v) }
