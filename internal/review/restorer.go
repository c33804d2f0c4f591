package review

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// Restorer is the request transform that puts back, in every request,
// what the model actually saw of a revised turn: draft, notice and
// continuation, where the client sends the merged message. It runs before
// shaping, whether the review is on or not (a turn revised while it was on
// must stay consistent after it is turned off).
type Restorer struct {
	ledger   *ledger.Store
	restored prometheus.Counter
	touches  chan string // conversations whose last-seen time to refresh
	done     chan struct{}

	mu      sync.Mutex
	touched map[string]time.Time // conversation → last refresh queued; reset past maxTouched
	clean   map[string]cleanRuns // conversation → the messages of its last requests holding no merged turn; reset past maxTouched
	closed  bool

	scanned *resolved.Cache[conv.RawKey, bool] // whether a message holds a merged turn
}

var _ proxy.RequestTransform = (*Restorer)(nil)

const (
	maxTouched   = 1 << 16
	touchBacklog = 256
	minClean     = 32 // clean messages worth a record (setClean)
)

// NewRestorer returns the transform reading st. It starts one goroutine
// (the last-seen refresher); Close stops it.
func NewRestorer(st *ledger.Store) *Restorer {
	r := &Restorer{
		ledger: st, touches: make(chan string, touchBacklog), done: make(chan struct{}),
		scanned: resolved.New[conv.RawKey, bool](maxScanned),
		restored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "shaperproxy_review_restored_total", Help: "Revised turns put back into requests as draft, notice and continuation.",
		}),
	}
	go r.refresh()
	return r
}

// Collectors are the transform's metrics.
func (r *Restorer) Collectors() []prometheus.Collector { return []prometheus.Collector{r.restored} }

// Close stops the refresher once the refreshes already queued are done.
func (r *Restorer) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.touches)
	}
	r.mu.Unlock()
	<-r.done
	return nil
}

func (r *Restorer) refresh() {
	defer close(r.done)
	for c := range r.touches {
		_ = r.ledger.Touch(c) // a missed refresh only lets Purge forget the conversation sooner
	}
}

// touch keeps the conversation's last-seen time in the ledger fresh (so
// Purge spares it) without a disk access on the request path: at most
// once per ledger.TouchEvery per conversation, in the background, and
// never blocking (a full backlog skips the refresh).
func (r *Restorer) touch(conversation string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.touched[conversation]; r.closed || ok && now.Sub(t) < ledger.TouchEvery {
		return
	}
	if r.touched == nil || len(r.touched) >= maxTouched {
		r.touched = map[string]time.Time{} // forgetting only costs a refresh more
	}
	select {
	case r.touches <- conversation:
		r.touched[conversation] = now
	default:
	}
}

// cleanRun says that the first n messages of the view numbered view
// (conv.Request.ID) hold no merged turn.
type cleanRun struct {
	view uint64
	n    int
}

// cleanRuns are a conversation's records of its last requests, the
// newest first.
//
// More than one: the Reparser reads a request against one of the kept
// views its beginning has, and two requests of one history parsed at once
// are both kept. It then takes the older of two alike, and every later
// request is read against the one two before it (which, under load, has
// let go of its edited body for the next to be written over). With the
// last request's record alone, the restorer found none that matched and
// searched the seed's 631 messages on every request (20 µs of the hold in
// situ against 5; internal/bench/HISTORY.md, Session BH).
type cleanRuns [4]cleanRun

// cleanFrom returns how many first messages of v are known to hold no
// merged turn: those of one of the conversation's last requests that v
// repeats (conv.Request.Repeats: the one v was read against), a history's
// all but the newest. Their content was searched then, and the same bytes
// hold the same content.
func (r *Restorer) cleanFrom(conversation string, v *conv.Request) int {
	if len(v.Messages) < minClean {
		return 0 // no record can say more (setClean)
	}
	r.mu.Lock()
	cs := r.clean[conversation]
	r.mu.Unlock()
	for _, c := range cs {
		if c.view != 0 && v.Repeats(c.view, c.n) {
			return c.n
		}
	}
	return 0
}

// setClean records the first n messages of v as holding no merged turn,
// before the conversation's records of earlier views, the oldest of which
// goes (a request parsed before v that ends after it leaves the records
// as they are). A clean run under minClean messages is not recorded
// (searching it again costs less than the record), and the earlier
// records stay: a record is a fact about its view's bytes, never wrong,
// only less often of use.
func (r *Restorer) setClean(conversation string, v *conv.Request, n int) {
	if v.ID() == 0 || n < minClean {
		return // no later request can be read against it, or not worth it
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clean == nil || len(r.clean) >= maxTouched {
		r.clean = map[string]cleanRuns{} // forgetting only costs a search more
	}
	cs := r.clean[conversation]
	if cs[0].view >= v.ID() {
		return // this view is recorded, or a later one: the records stay newest first
	}
	copy(cs[1:], cs[:len(cs)-1])
	cs[0] = cleanRun{view: v.ID(), n: n}
	r.clean[conversation] = cs
}

// TransformRequest replaces each merged message of a revised turn with
// the draft, notice and continuation the model saw. The messages the
// conversation's last request held without one, which this one repeats,
// are not searched again.
func (r *Restorer) TransformRequest(_ context.Context, call *proxy.Call, body []byte) ([]byte, error) {
	if call.Conversation == "" || call.Internal {
		return body, nil
	}
	r.touch(call.Conversation)
	out, n, clean, err := restoreFrom(call.View, r.cleanFrom(call.Conversation, call.View), func(key [32]byte) (Insertion, bool) {
		ins, ok, err := r.ledger.Insertion(call.Conversation, key)
		return Insertion(ins), ok && err == nil
	}, r.scanned)
	r.setClean(call.Conversation, call.View, clean)
	if err != nil || n == 0 {
		return body, err
	}
	r.restored.Add(float64(n))
	return out, nil
}
