package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"

	"github.com/tidwall/sjson"
)

// CallIDHeader carries the call's id on every response the proxy serves
// or forwards, its own error answers included, so that an error a client
// sees leads to `shaperproxy capture show ID` and to the log line.
const CallIDHeader = "X-Shaper-Call-Id"

// callID returns the call id of a response being written, setting a new
// one when it has none yet (a refusal, which is no call).
func callID(h http.Header) string {
	id := h.Get(CallIDHeader)
	if id == "" {
		id = newCallID()
		h.Set(CallIDHeader, id)
	}
	return id
}

// writeError answers with the OpenAI error shape
// {"error":{"message":…,"type":…,"code":…,"call_id":…}}, the call id also
// in CallIDHeader. message must name no secret.
func writeError(w http.ResponseWriter, status int, code, message string) (int, error) {
	h := w.Header()
	body := errorBody(code, message, callID(h))
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	return w.Write(body)
}

// errorBody is the OpenAI error shape, with a final newline.
func errorBody(code, message, id string) []byte {
	body := []byte(`{"error":{"message":"","type":"shaperproxy_error","code":"","call_id":""}}`)
	body, _ = sjson.SetBytes(body, "error.message", message)
	body, _ = sjson.SetBytes(body, "error.code", code)
	body, _ = sjson.SetBytes(body, "error.call_id", id)
	return append(body, '\n')
}

// errorResponse is writeError's answer as an *http.Response, for the id.
func errorResponse(id string, status int, code, message string) *http.Response {
	body := errorBody(code, message, id)
	return &http.Response{
		StatusCode: status, Status: strconv.Itoa(status) + " " + http.StatusText(status),
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, CallIDHeader: {id}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
	}
}

// describeErr says what went wrong with an upstream call in words that
// carry no URL, header or key: the transport's own error text can include
// the upstream URL and its query.
func describeErr(err error) string {
	var errno syscall.Errno
	var dnsErr *net.DNSError
	var opErr *net.OpError
	if d := describeCertErr(err); d != "" {
		return d
	}
	switch {
	case errors.Is(err, errOwnListener):
		return "refused: that is the proxy's own listener"
	case errors.Is(err, errNotPublic):
		return "refused: a wildcard tunnel entry reaches public addresses only"
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

// describeCertErr says what is wrong with an upstream's certificate, ""
// when err is not about one.
func describeCertErr(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unknown):
		return "certificate not trusted: signed by an unknown authority"
	case errors.As(err, &host):
		return "certificate not valid for the upstream's host name"
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return "certificate expired or not yet valid"
		}
		return "certificate invalid"
	case errors.As(err, &verify):
		return "certificate verification failed"
	}
	return ""
}

func isCertErr(err error) bool { return describeCertErr(err) != "" }

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
