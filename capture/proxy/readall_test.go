package proxy

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzReadAllSized checks readAllSized against io.ReadAll for any declared
// length, exact, short, long or absent, on one-byte and failing readers.
func FuzzReadAllSized(f *testing.F) {
	f.Add([]byte(`{"messages":[]}`), int64(15), false)
	f.Add([]byte(`{"messages":[]}`), int64(3), true)
	f.Add([]byte(`{}`), int64(1<<30), false)
	f.Add([]byte{}, int64(0), false)
	f.Add([]byte("x"), int64(-1), true)
	f.Fuzz(func(t *testing.T, data []byte, hint int64, fail bool) {
		boom := errors.New("boom")
		reader := func() io.Reader {
			var r io.Reader = iotest.OneByteReader(bytes.NewReader(data))
			if fail {
				r = io.MultiReader(r, iotest.ErrReader(boom))
			}
			return r
		}
		want, werr := io.ReadAll(reader())
		got, gerr := readAllSized(reader(), hint, maxReadHint)
		if !errors.Is(gerr, werr) && gerr != werr {
			t.Fatalf("error %v, io.ReadAll %v", gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %q, io.ReadAll %q", got, want)
		}
	})
}
