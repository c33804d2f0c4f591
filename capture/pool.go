package capture

import (
	"net/http"

	"github.com/shaperproxy/shaperproxy/internal/redact"
)

// The buffers of EnqueueCopy come from free lists by size class: a
// stream's events (a few hundred bytes each) reuse the buffers the writer
// goroutine has encoded, and the per-event path allocates nothing once the
// lists hold as many buffers as wait in the queue at once. The lists are
// bounded (bufKeep buffers of each class, 8 MiB in all; the small class holds as many as the default queue) and, unlike a
// sync.Pool, not emptied by every garbage collection. Data larger than
// maxPooled is copied as before.
var (
	bufClasses = [...]int{512, 2 << 10, 8 << 10, 32 << 10, 128 << 10}
	bufKeep    = [...]int{DefaultQueue, 1024, 256, 32, 8}
	freeBufs   = func() (f [len(bufClasses)]chan *[]byte) {
		for i := range f {
			f[i] = make(chan *[]byte, bufKeep[i])
		}
		return f
	}()
)

// maxPooled is the largest Data EnqueueCopy takes from a free list.
const maxPooled = 128 << 10

// getBuf returns a buffer of capacity n or more, from a free list when it
// can.
func getBuf(n int) *[]byte {
	c := classOf(n)
	select {
	case b := <-freeBufs[c]:
		return b
	default:
		b := make([]byte, 0, bufClasses[c])
		return &b
	}
}

// putBuf gives a buffer of getBuf back (nil: nothing to give back).
func putBuf(b *[]byte) {
	if b == nil {
		return
	}
	c := classOf(cap(*b))
	if bufClasses[c] != cap(*b) {
		return // not one of the classes' buffers: let it go
	}
	*b = (*b)[:0]
	select {
	case freeBufs[c] <- b:
	default: // the list is full: let it go
	}
}

func classOf(n int) int {
	for i, c := range bufClasses {
		if n <= c {
			return i
		}
	}
	return len(bufClasses) - 1
}

// redactMemo remembers the redacted form of header values, by name and
// value: the same headers come with every request and response, and
// redact.Header lowercases and examines each again. It belongs to the
// writer goroutine (no lock). redact judges each value of a header by the
// header's name and the value alone, so a value's redacted form is the one
// redact.Header gives it in any header.
type redactMemo struct {
	m map[[2]string]string
}

// maxRedactMemo bounds the values remembered (the memo starts again when
// full: headers such as Date or a request id change every time), and
// maxRedactMemoValue the length of one: a longer value (a client or an
// upstream may send a header of a megabyte) is redacted each time, not
// kept, so the memo holds at most maxRedactMemo × maxRedactMemoValue.
const (
	maxRedactMemo      = 4096
	maxRedactMemoValue = 512
)

// value returns the value of header name as redact.Header writes it.
func (r *redactMemo) value(name, v string) string {
	if len(name)+len(v) > maxRedactMemoValue {
		return redact.Header(http.Header{name: {v}})[name][0]
	}
	if r.m == nil || len(r.m) >= maxRedactMemo {
		r.m = make(map[[2]string]string, 256)
	}
	k := [2]string{name, v}
	red, ok := r.m[k]
	if !ok {
		red = redact.Header(http.Header{name: {v}})[name][0]
		r.m[k] = red
	}
	return red
}
