package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// writeRequest writes req to bw as req.Write does, byte for byte, and
// closes its body. The request the proxy sends (a known length or no
// body, a plain host, no trailer, no client trace) has its head written
// here without req.Write's formatting, transfer writer and header sorter:
// a tenth of the round trip's CPU outside the system calls for a small
// request (issue 15). Any other request goes through req.Write.
// TestWriteRequestAsStdlib holds the two to the same bytes and the same
// error text. One difference is kept on purpose: an error while the body
// is copied comes as it is, where req.Write wraps it in a type of its own
// that hides it from errors.As (http.Transport unwraps it too), so the
// call's end names the connection's error ("connection reset by peer")
// instead of a generic one.
func writeRequest(bw *bufio.Writer, req *http.Request) error {
	host, ruri, ok := plainHead(req)
	if !ok {
		return req.Write(bw)
	}
	writeHead(bw, req, host, ruri)
	if req.ContentLength == 0 {
		closeBody(req)
		return nil
	}
	// The body as transferWriter.writeBody sends a known length: what
	// the length covers, then what is left read and counted, so that a
	// body longer or shorter than it is an error, not a broken request.
	// As there, a body behind io.NopCloser is read unwrapped: a
	// *bytes.Reader goes out in one write (countingConn.ReadFrom).
	body := unwrapNopCloser(req.Body)
	n, err := io.Copy(bw, &io.LimitedReader{R: body, N: req.ContentLength})
	return endBody(req, body, n, err)
}

// endBody ends the write of req's body, n of whose bytes (read from body,
// req.Body unwrapped) went out with err, as Request.Write ends it: what is
// left of the body after its declared length read and counted, the body
// closed, a body of another length an error.
func endBody(req *http.Request, body io.Reader, n int64, err error) error {
	if err == nil {
		var extra int64
		extra, err = io.Copy(io.Discard, body)
		n += extra
	}
	if cerr := req.Body.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != req.ContentLength {
		err = fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, n)
	}
	return err
}

// The types io.NopCloser returns (with and without WriterTo).
var (
	nopCloserType         = reflect.TypeOf(io.NopCloser(nil))
	nopCloserWriterToType = reflect.TypeOf(io.NopCloser(struct {
		io.Reader
		io.WriterTo
	}{}))
)

// unwrapNopCloser returns the reader io.NopCloser wraps in r, or r (as
// net/http's transfer writer does).
func unwrapNopCloser(r io.Reader) io.Reader {
	switch reflect.TypeOf(r) {
	case nopCloserType, nopCloserWriterToType:
		if in, ok := reflect.ValueOf(r).Field(0).Interface().(io.Reader); ok {
			return in
		}
	}
	return r
}

// plainHead returns the host and request URI req.Write would write, and
// whether writeHead writes req's head as it would: no CONNECT, no
// trailer, transfer encoding or Connection: close to add, a body of a
// known length (or none), a host that needs no cleaning and a URI
// without control bytes (req.Write's errors are its own), and no client
// trace to call.
func plainHead(req *http.Request) (host, ruri string, ok bool) {
	if req.URL == nil || req.Method == "" || req.Method == http.MethodConnect || req.Close ||
		req.Trailer != nil || len(req.TransferEncoding) > 0 {
		return "", "", false
	}
	noBody := req.Body == nil || req.Body == http.NoBody
	if noBody != (req.ContentLength == 0) || req.ContentLength < 0 {
		return "", "", false
	}
	host = req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !plainHost(host) || httptrace.ContextClientTrace(req.Context()) != nil {
		return "", "", false
	}
	ruri = req.URL.RequestURI()
	for i := 0; i < len(ruri); i++ {
		if c := ruri[i]; c < ' ' || c == 0x7f {
			return "", "", false
		}
	}
	return host, ruri, true
}

// plainHost reports whether host is a name or an address with an
// optional port, in ASCII letters, digits and ".-_:[]": what req.Write
// sends as it is (no punycode, no zone to remove, a valid Host header).
func plainHost(host string) bool {
	if host == "" {
		return false
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}

// defaultUserAgent is what req.Write sends when the header has no
// User-Agent at all.
const defaultUserAgent = "Go-http-client/1.1"

// headWriteExcluded are the header keys req.Write does not copy from the
// header (it writes its own, or none), compared as they are.
func headWriteExcluded(k string) bool {
	switch k {
	case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
		return true
	}
	return false
}

// maxSortedOnStack is how many header keys are sorted without an
// allocation.
const maxSortedOnStack = 32

// writeHead writes the request line and the header of a request
// plainHead accepted. Writes to bw fail only together with its Flush,
// which the caller checks.
func writeHead(bw *bufio.Writer, req *http.Request, host, ruri string) {
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(ruri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	ua := defaultUserAgent
	if _, ok := req.Header["User-Agent"]; ok {
		ua = req.Header.Get("User-Agent")
	}
	if ua != "" {
		writeField(bw, "User-Agent", ua)
	}
	if req.ContentLength > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(bw.AvailableBuffer(), req.ContentLength, 10)) // the digits in bw's own room: no allocation
		bw.WriteString("\r\n")
	}
	var room [maxSortedOnStack]string
	keys := room[:0]
	for k := range req.Header {
		if !headWriteExcluded(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !httpguts.ValidHeaderFieldName(k) {
			continue // as Header.Write: dropped
		}
		for _, v := range req.Header[k] {
			writeField(bw, k, v)
		}
	}
	bw.WriteString("\r\n")
}

// newlineToSpace is net/http's headerNewlineToSpace.
var newlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// writeField writes "k: v" with v as Header.Write sends a value: line
// breaks turned into spaces, outer blanks trimmed.
func writeField(bw *bufio.Writer, k, v string) {
	if strings.ContainsAny(v, "\r\n") {
		v = newlineToSpace.Replace(v)
	}
	bw.WriteString(k)
	bw.WriteString(": ")
	bw.WriteString(textproto.TrimString(v))
	bw.WriteString("\r\n")
}
