package consumer

// CloseFileUnderneath closes the writer's file without telling the writer,
// so tests can make a write and its clean-up fail.
func CloseFileUnderneath(w *Writer) error { return w.f.Close() }
