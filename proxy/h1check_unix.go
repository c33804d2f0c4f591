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
	alive := false
	var b [1]byte
	err := raw.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK // not n == 0 (closed) nor data
		return true
	})
	return err == nil && alive
}

// answerWaiting reports whether the peer sent something that waits to be
// read (one non-blocking peek): an answer, while a request is still
// being written.
func answerWaiting(raw syscall.RawConn) bool {
	waiting := false
	var b [1]byte
	_ = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		waiting = err == nil && n > 0
		return true
	})
	return waiting
}
