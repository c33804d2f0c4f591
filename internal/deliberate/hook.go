package deliberate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/tidwall/gjson"
)

// Deliberator serves the deliberate tool: a request transform that puts
// back what earlier deliberations hid and adds the tool, and a finisher
// that takes a deliberate call out of the response, runs its branches and
// lets the model go on (see the package doc).
type Deliberator struct {
	cfg     Config
	tool    []byte
	sepTool []byte // "," and tool: what addTool inserts
	store   store
	log     *slog.Logger
	m       *metrics

	bg      context.Context // background deliberations (beside the client's calls)
	stop    context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	pending map[string]*pending // conversation → its deliberation in flight
	running int                 // background deliberations (at most maxBackground)
}

// maxBackground bounds the deliberations run beside the clients' calls at
// once: each holds its request's body and view, and spends the user's key
// on its branches, for up to BranchTimeout after the client's call ended.
// One more is refused with a tool result saying so.
const maxBackground = 32

// errBusy is the tool result of a deliberation refused past maxBackground.
var errBusy = errors.New("deliberate is busy with other conversations; decide with what you have")

var (
	_ proxy.RequestTransform = (*Deliberator)(nil)
	_ proxy.Finisher         = (*Deliberator)(nil)
)

// injectedKey marks a call whose request got the tool.
var injectedKey = proxy.NewKey[bool]()

// maxChildAnswer bounds the child answer the proxy reads.
const maxChildAnswer = 4 << 20

// New returns the Deliberator for c (valid); st keeps what deliberations
// hid. Close stops the deliberations still running in the background.
func New(c Config, st *ledger.Store, log *slog.Logger) *Deliberator {
	ctx, cancel := context.WithCancel(context.Background())
	tool := toolJSON(c.StrongModel != "")
	return &Deliberator{
		cfg: c, tool: tool, sepTool: append([]byte{','}, tool...), store: store{st}, log: log, m: newMetrics(),
		bg: ctx, stop: cancel, pending: map[string]*pending{},
	}
}

// Collectors are the tool's metrics.
func (d *Deliberator) Collectors() []prometheus.Collector { return d.m.collectors() }

// Close cancels the background deliberations and waits for them.
func (d *Deliberator) Close() error {
	d.stop()
	d.wg.Wait()
	return nil
}

// TransformRequest waits for a deliberation still running beside the
// client's calls, puts back the calls and results deliberations hid, and
// adds the tool to a request that declares tools.
func (d *Deliberator) TransformRequest(ctx context.Context, call *proxy.Call, body []byte) ([]byte, error) {
	if call.Internal || call.View == nil || !d.cfg.enabled(call.Route) {
		return body, nil
	}
	d.await(ctx, call.Conversation)
	view := call.View
	restored, n, err := d.store.restore(view, call.Conversation)
	if err != nil {
		d.log.Warn("deliberation not restored", "call", call.ID, "err", err)
	}
	if n > 0 {
		if view, err = conv.ParseRequest(restored); err != nil {
			return body, fmt.Errorf("deliberate: restored request: %w", err)
		}
	}
	out, ok := d.addTool(view)
	injectedKey.Set(call, ok)
	if ok {
		call.ReadsResponse = true // a compressed answer would skip the finisher and show the call
	}
	if out != call.View {
		call.SetView(out) // the next transforms read it without parsing the body again
	}
	return out.Body, nil
}

// addTool appends the tool to a non-empty "tools" array (not when the
// client declares a function named deliberate) as an edit of the view, so
// the view of the result is derived from req's: a history of a megabyte
// is not parsed again because a tool was added to it. The tests check its
// bytes against a plain splice (injectTool). It returns req itself
// when the tool is not added.
func (d *Deliberator) addTool(req *conv.Request) (*conv.Request, bool) {
	f, ok := req.Field("tools")
	if !ok {
		return req, false
	}
	raw := req.Body[f.Start:f.End]
	tools := gjson.ParseBytes(raw)
	if !tools.IsArray() || len(tools.Array()) == 0 || declares(tools) {
		return req, false
	}
	end := f.Start + bytes.LastIndexByte(raw, ']')
	v, err := req.Apply([]conv.Edit{{Start: end, End: end, Repl: d.sepTool}})
	if err != nil {
		return req, false
	}
	return v, true
}

// Start follows the responses of requests that got the tool.
func (d *Deliberator) Start(call *proxy.Call, _ *proxy.ResponseInfo) proxy.FinishSession {
	if ok, _ := injectedKey.Get(call); !ok || call.Conversation == "" {
		return nil
	}
	return &session{d: d, call: call, asm: conv.NewBoundedAssembler(maxDraft)}
}

// pending is a deliberation running beside the client's own calls: the
// conversation's next request waits for it.
type pending struct{ done chan struct{} }

// await waits (within the branch timeout and the request's life) for the
// conversation's deliberation still running, so that its result can be
// spliced into this request.
func (d *Deliberator) await(ctx context.Context, conversation string) {
	d.mu.Lock()
	p := d.pending[conversation]
	d.mu.Unlock()
	if p == nil {
		return
	}
	t := time.NewTimer(d.cfg.BranchTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-ctx.Done():
	case <-t.C:
	}
}

// background runs fn beside the client's calls; the conversation's next
// request waits for it.
// It reports false, running nothing, when maxBackground already run.
func (d *Deliberator) background(conversation string, fn func(ctx context.Context)) bool {
	p := &pending{done: make(chan struct{})}
	d.mu.Lock()
	if d.running >= maxBackground {
		d.mu.Unlock()
		return false
	}
	d.running++
	d.pending[conversation] = p
	d.mu.Unlock()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() {
			d.mu.Lock()
			d.running--
			if d.pending[conversation] == p {
				delete(d.pending, conversation)
			}
			d.mu.Unlock()
			close(p.done)
		}()
		fn(d.bg)
	}()
	return true
}

// sendVia returns the sender of a call's children (purpose
// "deliberate-branch") or continuations: through the proxy, as internal
// calls linked to it (captured).
func sendVia(call *proxy.Call, purpose string) sender {
	return func(ctx context.Context, body []byte) ([]byte, string, error) {
		out, child, err := call.DoRead(ctx, purpose, body, maxChildAnswer)
		id := ""
		if child != nil {
			id = child.ID
		}
		return out, id, err
	}
}

// note writes a deliberation's record to the capture log: the branches
// with their outcome, timing, child call and packet.
func (d *Deliberator) note(call *proxy.Call, callID, mode string, outs []outcome, argErr error) {
	type branchNote struct {
		Role      Role            `json:"role"`
		Child     string          `json:"child_call,omitempty"`
		MS        int64           `json:"ms"`
		Status    string          `json:"status,omitempty"`
		Err       string          `json:"err,omitempty"`
		Requested int             `json:"requested_steps,omitempty"`
		Projected int             `json:"projected_steps,omitempty"`
		Packet    json.RawMessage `json:"packet,omitempty"`
	}
	n := struct {
		Deliberate string       `json:"deliberate"` // alone, mixed, invalid or busy
		ToolCall   string       `json:"tool_call"`
		Err        string       `json:"err,omitempty"`
		Branches   []branchNote `json:"branches,omitempty"`
	}{Deliberate: mode, ToolCall: callID}
	if argErr != nil {
		n.Err = argErr.Error()
	}
	for _, o := range outs {
		b := branchNote{Role: o.Branch.Role, Child: o.Child, MS: o.Took.Milliseconds(), Err: o.Err, Requested: o.Requested, Projected: o.Projected}
		if o.Packet != nil {
			b.Status = o.Packet.Status
			b.Packet, _ = json.Marshal(o.Packet)
		}
		n.Branches = append(n.Branches, b)
		d.m.branch(o)
	}
	d.m.calls.WithLabelValues(mode).Inc()
	data, _ := json.Marshal(n)
	call.Annotate("deliberate", data)
}
