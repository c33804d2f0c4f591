//go:build !unix

package proxy

import "net"

// idleCheckWorks: no peek here; plain-HTTP upstreams go through the
// http.Transport.
const idleCheckWorks = false

func idleCheck(net.Conn) bool { return false }
