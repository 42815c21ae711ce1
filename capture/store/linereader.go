package store

import (
	"bytes"
	"errors"
	"io"
)

// lineChunk is how much a lineReader asks the kernel for at once: enough
// for most lines of a 32k-token rollout, and small, because in a short-lived
// process every fresh buffer page is a page fault (docs/store.md).
const lineChunk = 1 << 18

// lineReader yields the lines of a file in order while holding about two
// lines and one chunk of it in memory, however large the file. A whole-file
// buffer is not just memory: in a short-lived process a 20 MB allocation is
// what starts the garbage collector, whose preemption signals then land on
// the page faults of zeroing and filling that buffer (most of a cold
// `capbench verdict` was that kernel time).
//
// A returned line stays unchanged until the second next after it, which is
// what record.LineParser needs (it compares each line with the one before).
// Lines live in two buffers: unread bytes are only ever moved into the buffer
// that holds no returned line.
type lineReader struct {
	r     io.Reader
	chunk int // bytes asked for at once
	bufs  [2][]byte
	cur   int // the buffer holding the unread bytes bufs[cur][pos:end]
	pos   int
	end   int
	off   int64 // file offset of bufs[cur][pos]
	eof   bool
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: r, chunk: lineChunk}
}

// next returns the next line without its newline, the file offset of its
// first byte, and whether it is an unterminated last line. After the last
// line it returns io.EOF.
func (lr *lineReader) next() (line []byte, start int64, unterminated bool, err error) {
	for {
		b := lr.bufs[lr.cur]
		if i := bytes.IndexByte(b[lr.pos:lr.end], '\n'); i >= 0 {
			return lr.take(i, i+1), lr.off - int64(i+1), false, nil
		}
		if lr.eof {
			if lr.pos == lr.end {
				return nil, 0, false, io.EOF
			}
			n := lr.end - lr.pos
			return lr.take(n, n), lr.off - int64(n), true, nil
		}
		if err := lr.fill(); err != nil {
			return nil, 0, false, err
		}
	}
}

// take returns the first n unread bytes as a line and consumes skip bytes.
func (lr *lineReader) take(n, skip int) []byte {
	b := lr.bufs[lr.cur]
	line := b[lr.pos : lr.pos+n : lr.pos+n]
	lr.pos += skip
	lr.off += int64(skip)
	return line
}

// fill reads more of the file after the unread bytes. When a line was
// returned from the current buffer (pos > 0), the unread bytes first move to
// the front of the other buffer, which holds no line still in use; a buffer
// too full to read a chunk into is replaced by a larger one, so a line that
// lives in the old array stays intact.
func (lr *lineReader) fill() error {
	unread := lr.bufs[lr.cur][lr.pos:lr.end]
	switch {
	case lr.pos > 0:
		lr.cur = 1 - lr.cur
		dst := lr.bufs[lr.cur][:0]
		if need := len(unread) + lr.chunk; cap(dst) < need {
			dst = make([]byte, 0, need+lr.chunk)
		}
		lr.bufs[lr.cur] = append(dst, unread...)
		lr.pos, lr.end = 0, len(unread)
	case cap(lr.bufs[lr.cur])-lr.end < lr.chunk/2:
		grown := make([]byte, 0, 2*cap(unread)+lr.chunk)
		lr.bufs[lr.cur] = append(grown, unread...)
		lr.end = len(unread)
	}
	b := lr.bufs[lr.cur]
	n, err := lr.r.Read(b[lr.end:cap(b)])
	lr.bufs[lr.cur] = b[:cap(b)]
	lr.end += n
	if errors.Is(err, io.EOF) {
		lr.eof = true
		return nil
	}
	return err
}
