//go:build !unix

package proxy

import "syscall"

// idleCheckWorks: no peek here; plain-HTTP upstreams go through the
// http.Transport.
const idleCheckWorks = false

func idleCheck(syscall.RawConn) bool { return false }

func answerWaiting(syscall.RawConn) bool { return false }
