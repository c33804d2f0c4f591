//go:build unix

package proxy

import "syscall"

// idleCheckWorks: idleCheck can tell a live idle connection here.
const idleCheckWorks = true

// idleCheck reports whether an idle connection (raw, taken once when it
// was dialled) can carry a request: the peer has not closed it and sent
// nothing unasked (one non-blocking peek, what http.Transport's reading
// goroutine would have seen). No raw connection: false.
func idleCheck(raw syscall.RawConn) bool {
	if raw == nil {
		return false
	}
	_, err, ok := peek(raw)
	return ok && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK) // not n == 0 (closed) nor data
}

// answerWaiting reports whether the peer sent something that waits to be
// read (one non-blocking peek): an answer, while a request is still
// being written.
func answerWaiting(raw syscall.RawConn) bool {
	n, err, ok := peek(raw)
	return ok && err == nil && n > 0
}

// peek looks at the connection's next byte without taking it or waiting
// for it: n and err are the peek's (recv with MSG_PEEK|MSG_DONTWAIT), ok
// false when the connection could not be looked at (closed, or a read
// deadline that passed).
func peek(raw syscall.RawConn) (n int, err error, ok bool) {
	var b [1]byte
	rerr := raw.Read(func(fd uintptr) bool {
		n, _, err = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	return n, err, rerr == nil
}
