package testenv

import (
	"bytes"
	"sync"
)

// Buffer collects output written from several goroutines (JSON logs, EMF
// lines, a child process's output) for a test or a benchmark to read.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
