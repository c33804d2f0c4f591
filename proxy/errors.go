package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"

	"github.com/tidwall/sjson"
)

// writeError answers with the OpenAI error shape
// {"error":{"message":…,"type":…,"code":…}}. message must name no secret.
func writeError(w http.ResponseWriter, status int, code, message string) {
	body := []byte(`{"error":{"message":"","type":"shaperproxy_error","code":""}}`)
	body, _ = sjson.SetBytes(body, "error.message", message)
	body, _ = sjson.SetBytes(body, "error.code", code)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// describeErr says what went wrong with an upstream call in words that
// carry no URL, header or key: the transport's own error text can include
// the upstream URL and its query.
func describeErr(err error) string {
	var errno syscall.Errno
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.As(err, &dnsErr):
		return "host name not found"
	case errors.As(err, &errno):
		return errno.Error()
	case errors.As(err, &opErr):
		return opErr.Op + " failed"
	case errors.Is(err, errIdle):
		return errIdle.Error()
	}
	return "connection failed"
}

// describeReadErr describes a failed read of an upstream body.
func describeReadErr(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "upstream closed the body early"
	}
	return describeErr(err)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func quote(s string) string { return strconv.Quote(s) }

type panicError struct{ v any }

func (e panicError) Error() string { return "panic: " + fmt.Sprint(e.v) }

func errPanic(v any) error { return panicError{v} }
