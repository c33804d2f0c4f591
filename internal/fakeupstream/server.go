package fakeupstream

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
)

// maxBody caps the request bodies a Server reads.
const maxBody = 64 << 20

// Server is a scripted upstream; it is an http.Handler and is safe for
// concurrent use. The zero value is not usable: call New.
type Server struct {
	mu       sync.Mutex
	queue    []Response
	handler  func(Recorded) (Response, bool)
	requests []Recorded
	seq      int64        // replies rendered so far
	cache    *PromptCache // nil: usage estimated from the request's bytes
}

// New returns a Server with an empty queue.
func New() *Server {
	return &Server{}
}

// Push queues scripted responses; model calls consume them in order.
func (s *Server) Push(rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, rs...)
}

// Handle sets a dynamic responder, asked about every request before the
// queue (and before the static answers). It returns ok=false to fall
// through. fn runs on the request's goroutine, outside the Server's lock,
// so it may call Push. A nil fn removes the responder.
func (s *Server) Handle(fn func(req Recorded) (Response, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = fn
}

// SetPromptCache makes rendered replies report prompt-cache usage from c
// (see PromptCache); nil restores the byte estimate. A Reply with its own
// Usage keeps it.
func (s *Server) SetPromptCache(c *PromptCache) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache = c
}

// Requests returns every request received so far (all paths), in order.
// The Recorded values share their Body and Header with the Server; do not
// modify them.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.requests...)
}

// Reset drops the queue, the responder and the recorded requests, and
// restarts the id counter, leaving the Server as New made it.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue, s.handler, s.requests, s.seq = nil, nil, nil, 0
}

// Start serves s on addr ("" means 127.0.0.1:0, a free loopback port). It
// returns the base URL ("http://127.0.0.1:PORT") and a func that closes the
// listener and every connection and waits for the serving goroutine; it
// may be called more than once.
func (s *Server) Start(addr string) (baseURL string, closeFn func(), err error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // always http.ErrServerClosed after Close
	}()
	var once sync.Once
	closeFn = func() {
		once.Do(func() { _ = srv.Close() })
		<-done
	}
	return "http://" + ln.Addr().String(), closeFn, nil
}

// ServeHTTP records the request and answers it: with the Handle
// responder's answer, a static answer (GET …/models, …/embeddings, 404 for
// other non-POST requests), or, for a model call, the next queued Response
// (the default Reply when the queue is empty). A model call whose body is
// not JSON gets a DeepSeek-style 400 and consumes nothing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		writePlan(w, r, Response{}, rawPlan(ErrorResponse(http.StatusBadRequest, "failed to read the request body")))
		return
	}
	rec := Recorded{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body, At: time.Now(),
	}
	s.record(rec)
	resp := s.answer(rec)
	writePlan(w, r, resp, s.plan(rec, resp))
}

func (s *Server) record(rec Recorded) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, rec)
}

// answer picks the Response for a request.
func (s *Server) answer(rec Recorded) Response {
	s.mu.Lock()
	h := s.handler
	s.mu.Unlock()
	if h != nil {
		if resp, ok := h(rec); ok {
			return resp
		}
	}
	if resp, ok := staticAnswer(rec); ok {
		return resp
	}
	if !gjson.ValidBytes(rec.Body) {
		return ErrorResponse(http.StatusBadRequest, "Failed to deserialize the JSON body into the target type: invalid JSON")
	}
	return s.pop()
}

// pop takes the next queued Response, or returns the zero Response (the
// default Reply).
func (s *Server) pop() Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return Response{}
	}
	resp := s.queue[0]
	s.queue = s.queue[1:]
	return resp
}

// nextSeq returns the sequence number of a new rendered reply.
func (s *Server) nextSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

// plan turns a Response into what to write.
func (s *Server) plan(rec Recorded, resp Response) plan {
	switch {
	case resp.Exchange != nil:
		return exchangePlan(resp.Exchange)
	case resp.Reply != nil:
		return s.reply(rec.Body, *resp.Reply)
	case resp.Status != 0 || resp.Body != nil:
		return rawPlan(resp)
	}
	return s.reply(rec.Body, defaultReply())
}

// reply renders rp, billed by the prompt cache when there is one.
func (s *Server) reply(req []byte, rp Reply) plan {
	seq := s.nextSeq()
	s.mu.Lock()
	c := s.cache
	s.mu.Unlock()
	if c != nil && rp.Usage == nil {
		rp.ToolCalls = withIDs(rp.ToolCalls, seq)
		u := c.bill(req, rp)
		rp.Usage = &u
	}
	return replyPlan(req, rp, seq)
}

// staticAnswer answers the non-model endpoints.
func staticAnswer(rec Recorded) (Response, bool) {
	switch {
	case strings.HasSuffix(rec.Path, "/models") && rec.Method == http.MethodGet:
		return Response{Body: []byte(modelsJSON)}, true
	case strings.HasSuffix(rec.Path, "/embeddings"):
		return Response{Body: embeddingJSON(rec.Body)}, true
	case rec.Method != http.MethodPost:
		return ErrorResponse(http.StatusNotFound, "Not Found"), true
	}
	return Response{}, false
}

const modelsJSON = `{"object":"list","data":[` +
	`{"id":"deepseek-chat","object":"model","owned_by":"deepseek"},` +
	`{"id":"deepseek-reasoner","object":"model","owned_by":"deepseek"}]}`

// embeddingJSON is a small fixed embedding with usage estimated from body.
func embeddingJSON(body []byte) []byte {
	n := max(1, len(body)/4)
	b := []byte(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0123,-0.0456,0.0789,-0.0012]}],"model":"fake-embedding",`)
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, `,"total_tokens":`...)
	return append(strconv.AppendInt(b, int64(n), 10), "}}"...)
}
