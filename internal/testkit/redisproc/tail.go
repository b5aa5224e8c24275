package redisproc

import "sync"

// TailBuffer is an io.Writer that keeps the last Limit bytes written, for
// a server's output: enough to say why it failed, never the whole log of a
// long run. It is safe for concurrent use.
type TailBuffer struct {
	// Limit is how many bytes are kept.
	Limit int

	mu  sync.Mutex
	buf []byte
}

// Write appends p, dropping the oldest bytes beyond Limit.
func (b *TailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.Limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

// String returns the bytes kept.
func (b *TailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
