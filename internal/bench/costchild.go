package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The roles a child process of the cost section plays besides the proxy
// variants (`bench -child ROLE ARGS…`).
const (
	roleUpstream     = "upstream"          // costUpstream
	roleReverseProxy = "reverseproxy"      // newReverseProxy (args: the upstream URL)
	roleReadWhole    = "reverseproxy-read" // newReverseProxy reading the body whole first (args: the upstream URL)
)

// isRole reports whether name is a role of the cost section besides the
// proxy variants.
func isRole(name string) bool {
	return name == roleUpstream || name == roleReverseProxy || name == roleReadWhole || name == roleCutThrough
}

// roleHandler is what a role of the cost section serves, in a child or in
// this process.
func roleHandler(role string, args []string) (http.Handler, error) {
	switch role {
	case roleUpstream:
		return http.HandlerFunc(costUpstream), nil
	case roleCutThrough:
		return newCutThrough(args)
	}
	if len(args) != 1 {
		return nil, fmt.Errorf("bench child %s: want the upstream URL, got %q", role, args)
	}
	rp, err := newReverseProxy(args[0], role == roleReadWhole)
	if err != nil {
		return nil, err // not a nil *ReverseProxy in a non-nil Handler
	}
	return rp, nil
}

// ProfileEnv names the directory where a child (a proxy variant, the
// reverse proxy, the upstream) writes its CPU profile (cpu-NAME.pprof, for
// its whole life) and its allocation profile (allocs-NAME.pprof, at exit):
// `bench -profile DIR`.
const ProfileEnv = "SHAPERPROXY_BENCH_PROFILE"

// spawn runs a child (the command line in e.child with args appended),
// reads the URL it prints and returns it with the child's process id.
// The child ends when its stdin closes (e.close). Only the cost section's
// children are profiled (profiled set): the other sections' proxies carry
// the same variant names, and their profiles would overwrite these.
func (e *env) spawn(args []string, profiled bool) (string, int, error) {
	profile := ""
	if profiled {
		profile = e.profile
	}
	return e.spawnCmd(e.child, profile, args)
}

// spawnCmd is spawn with the child's command line and its profiles'
// directory ("": none) given.
func (e *env) spawnCmd(child []string, profile string, args []string) (string, int, error) {
	cmd := exec.Command(child[0], append(append([]string(nil), child[1:]...), args...)...)
	cmd.Env = os.Environ()
	if profile != "" {
		cmd.Env = append(cmd.Env, ProfileEnv+"="+profile)
	}
	if e.without != "" {
		cmd.Env = append(cmd.Env, WithoutEnv+"="+e.without)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", 0, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", 0, err
	}
	e.closers = append(e.closers, func() { _ = stdin.Close(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return "", 0, fmt.Errorf("child %s: %w", args[0], err)
	}
	return strings.TrimSpace(line), cmd.Process.Pid, nil
}

// serveRole serves a role of the cost section until stdin closes.
func serveRole(role string, args []string) error {
	h, err := roleHandler(role, args)
	if err != nil {
		return err
	}
	name := role
	if role == roleCutThrough {
		name += "-" + args[0] // one profile a form (roleHandler checked args)
	}
	defer startProfile(name)()
	var closers []func()
	u, err := startServer(h, &closers)
	if err != nil {
		return err
	}
	fmt.Println(u)
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range closers {
		c()
	}
	return nil
}

// newReverseProxy is the baseline: the standard library's reverse proxy,
// tuned as a user would tune it and with the proxy's own transport
// settings (connection pool, timeouts, no decompression), a buffer pool
// and no error log. With readWhole it reads each request body whole before
// sending it on, as any proxy that edits a body must (no parsing): the
// floor under the proxy's figures that streaming alone does not explain,
// for a proxy on net/http's transport. That transport copies the body
// once more on its way out (io.LimitReader over it, then a 32 KiB buffer:
// only a file or a connection is spliced), about 8% of this baseline's CPU
// on the seed (session BT's profiles); the proxy's own transport writes a
// body from where it was read.
func newReverseProxy(upstream string, readWhole bool) (*httputil.ReverseProxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 10 * time.Minute,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	rewrite := func(r *httputil.ProxyRequest) { r.SetURL(u) }
	if readWhole {
		rewrite = func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			if r.Out.Body == nil || r.Out.Body == http.NoBody {
				return
			}
			b := wholeBufs.Get().(*bytes.Buffer)
			b.Reset()
			if n := r.Out.ContentLength; n > 0 && n <= 64<<20 {
				b.Grow(int(n) + bytes.MinRead)
			}
			if _, err := b.ReadFrom(r.Out.Body); err != nil {
				r.Out.Body = io.NopCloser(errReader{err}) // the transport fails the request: a 502
				return
			}
			pb := &pooledBody{Reader: bytes.NewReader(b.Bytes())}
			pb.b.Store(b)
			r.Out.Body, r.Out.ContentLength = pb, int64(b.Len())
		}
	}
	return &httputil.ReverseProxy{
		Rewrite:    rewrite,
		Transport:  tr,
		BufferPool: bufPool{},
		ErrorLog:   log.New(io.Discard, "", 0),
	}, nil
}

// bufPool is httputil.BufferPool over a sync.Pool of 32 KiB buffers.
type bufPool struct{}

var rpBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufPool) Get() []byte  { return *(rpBufs.Get().(*[]byte)) }
func (bufPool) Put(b []byte) { rpBufs.Put(&b) }

// costUpstream answers a chat request the way a provider does, at no cost
// worth measuring: with ?n=N&gap=D an SSE stream of N chunks D apart
// (reasoning, then content, then the finish chunk with usage and [DONE]),
// otherwise a short completion.
func costUpstream(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	q := r.URL.Query()
	n, _ := strconv.Atoi(q.Get("n"))
	if n <= 0 {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(completion)
		return
	}
	gap, _ := time.ParseDuration(q.Get("gap"))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for i := 0; i < n; i++ {
		if i > 0 {
			time.Sleep(gap)
		}
		var err error
		switch {
		case i == n-1:
			_, err = io.WriteString(w, "data: "+finishChunk+"\n\ndata: [DONE]\n\n")
		case i < n/2:
			_, err = fmt.Fprintf(w, "data: "+chunk+"\n\n", "reasoning_content", i)
		default:
			_, err = fmt.Fprintf(w, "data: "+chunk+"\n\n", "content", i)
		}
		if err != nil || rc.Flush() != nil {
			return
		}
	}
}

var completion = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!","reasoning_content":"The user wants a greeting."},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":9,"total_tokens":33}}`)

const (
	chunk       = `{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{"%s":"token %d of the answer, "},"finish_reason":null}]}`
	finishChunk = `{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"deepseek-reasoner","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":24,"completion_tokens":300,"total_tokens":324}}`
)

// clockTick is the unit of /proc's CPU times (Linux's USER_HZ, 100).
const clockTick = 10 * time.Millisecond

// procCounts is what /proc/PID/stat counts of a process: its CPU time in
// clock ticks, user and system apart, and its page faults taken without
// reading a disk (a page's first write among them).
type procCounts struct{ user, sys, faults int64 }

// procCountsOf reads process pid's counts (0: this one); ok is false where
// there is none.
func procCountsOf(pid int) (c procCounts, ok bool) {
	f := procStat(pid)
	if len(f) < 13 {
		return c, false
	}
	var e1, e2, e3 error
	c.faults, e1 = strconv.ParseInt(f[7], 10, 64)
	c.user, e2 = strconv.ParseInt(f[11], 10, 64)
	c.sys, e3 = strconv.ParseInt(f[12], 10, 64)
	return c, e1 == nil && e2 == nil && e3 == nil
}

// cpuTime returns the user and system CPU time process pid (0: this one)
// has used, from /proc (to a clock tick).
func cpuTime(pid int) time.Duration {
	c, _ := procCountsOf(pid)
	return time.Duration(c.user+c.sys) * clockTick
}

// minorFaults returns the page faults process pid (0: this one) took
// without reading a disk, from /proc; ok is false where there is none.
func minorFaults(pid int) (n int64, ok bool) {
	c, ok := procCountsOf(pid)
	return c.faults, ok
}

// procStat returns the fields of /proc/PID/stat after the command name
// (which may hold spaces), the process state first; nil where there is
// none.
func procStat(pid int) []string {
	path := "/proc/self/stat"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/stat", pid)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// startProfile starts the CPU profile of a cost child when ProfileEnv is
// set; the returned func stops it and writes the allocation profile.
func startProfile(variant string) func() {
	dir := os.Getenv(ProfileEnv)
	if dir == "" {
		return func() {}
	}
	name := strings.ReplaceAll(variant, "+", "-")
	f, err := os.Create(filepath.Join(dir, "cpu-"+name+".pprof"))
	if err != nil || pprof.StartCPUProfile(f) != nil {
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		if a, err := os.Create(filepath.Join(dir, "allocs-"+name+".pprof")); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(a, 0)
			_ = a.Close()
		}
	}
}

// wholeBufs are the read-whole baseline's body buffers.
var wholeBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// pooledBody is a body read whole; its buffer goes back to wholeBufs when
// the transport closes it having read it all. Here a pool is safe, as it
// is not for the proxy's bodies (internal/bigbuf): the transport is the
// body's one reader, so the baseline is the floor an owner who knows
// could reach. A body closed before its end (a connection going
// down: the transport may close it from another goroutine while its
// writer still reads) is left to the collector, and a second Close finds
// nothing to give back.
type pooledBody struct {
	*bytes.Reader
	b atomic.Pointer[bytes.Buffer]
}

func (p *pooledBody) Close() error {
	if b := p.b.Swap(nil); b != nil && p.Len() == 0 {
		wholeBufs.Put(b)
	}
	return nil
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
