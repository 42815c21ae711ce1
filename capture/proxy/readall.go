package proxy

import "io"

// maxReadHint bounds the buffer an upstream's declared length may reserve
// up front: a server that declares more than it sends must not make the
// proxy allocate it. Request bodies may reserve up to --max-body-bytes: the
// guard has already charged their declared length to the in-flight budget.
const maxReadHint = 1 << 20

// readAllSized is io.ReadAll with the first buffer sized from a declared
// length (Content-Length), so that a body is read into one allocation
// instead of a chain of doubling copies. A wrong or absent hint only costs
// the growth io.ReadAll would have done. A hint above maxHint is not
// trusted.
func readAllSized(r io.Reader, hint, maxHint int64) ([]byte, error) {
	if hint <= 0 || hint > maxHint {
		return io.ReadAll(r)
	}
	// One spare byte lets the read that reports EOF land without growing.
	b := make([]byte, 0, hint+1)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			// Exactly io.ReadAll's test: a wrapped EOF stays an error.
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}
