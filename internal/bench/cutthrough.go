package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The cost section's design experiment (`-only cost:cutthrough`, not part
// of a plain `-only cost`): would the seed's added latency go down if the
// proxy sent a request body upstream while it still reads it, instead of
// reading it whole, working on it and then sending it? The proxy works
// on a body for a while after its last byte (its hold, from its /metrics);
// whatever it sends early, the end of the body waits for that work. So
// the experiment puts the same hold, as CPU work, into three forms of the
// standard library's reverse proxy, all in the same run as the proxy:
//
//   - whole: read the body whole, the hold, then send it (what the proxy
//     does, without the proxy's own work);
//   - cut: send the body as it comes, all but its last cutTail bytes,
//     which wait for the end of the body and the hold (the best case of a
//     proxy that predicts its output: everything but the end known
//     early), the length declared as the client declared it;
//   - chunked: the same, the length not declared (chunked), as a proxy
//     that edits the body must send it when it starts before it knows the
//     edited length.
//
// Beside them, the proxy's own transparent core twice: as it runs, the
// body read whole, and with every body streamed through unread as the
// reverse proxy streams it (max_body_bytes under the body): what sending
// as it comes gains with the proxy's own server and transport, with no
// hold at all.
const (
	roleCutThrough = "cutthrough" // newCutThrough (args: MODE HOLD UPSTREAM)

	cutWhole   = "whole"
	cutKnown   = "cut"
	cutChunked = "chunked"

	cutTail = 64 << 10
)

// cutModes are the experiment's forms, in their column order.
var cutModes = []string{cutWhole, cutKnown, cutChunked}

// newCutThrough is the reverse proxy in one of cutModes with the given
// hold: args MODE HOLD UPSTREAM.
func newCutThrough(args []string) (http.Handler, error) {
	if len(args) != 3 || !slices.Contains(cutModes, args[0]) {
		return nil, fmt.Errorf("bench child %s: want MODE (%s) HOLD UPSTREAM, got %q", roleCutThrough, strings.Join(cutModes, ", "), args)
	}
	mode := args[0]
	hold, err := time.ParseDuration(args[1])
	if err != nil || hold < 0 || hold > time.Second {
		return nil, fmt.Errorf("bench child %s: hold %q: want a duration up to 1s", roleCutThrough, args[1])
	}
	rp, err := newReverseProxy(args[2], mode == cutWhole)
	if err != nil {
		return nil, err
	}
	rewrite := rp.Rewrite
	rp.Rewrite = func(r *httputil.ProxyRequest) {
		rewrite(r) // whole: the body read whole here
		switch {
		case r.Out.Body == nil || r.Out.Body == http.NoBody || r.Out.ContentLength <= 0:
		case mode == cutWhole:
			spin(hold)
		default:
			r.Out.Body = &tailHeld{src: r.Out.Body, left: r.Out.ContentLength, hold: hold}
			if mode == cutChunked {
				r.Out.ContentLength = -1
			}
		}
	}
	return rp, nil
}

// tailHeld passes a body of a known length on as it comes, but its last
// cutTail bytes only once all of it has come and the hold has passed.
type tailHeld struct {
	src  io.ReadCloser
	left int64 // bytes of src not read yet
	hold time.Duration
	tail *bytes.Reader // the last bytes, read whole
}

func (t *tailHeld) Read(p []byte) (int, error) {
	if t.tail != nil {
		return t.tail.Read(p)
	}
	if t.left > cutTail {
		n, err := t.src.Read(p[:min(int64(len(p)), t.left-cutTail)])
		t.left -= int64(n)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // the client ended before its declared length
		}
		return n, err
	}
	rest := make([]byte, t.left)
	if _, err := io.ReadFull(t.src, rest); err != nil {
		return 0, err
	}
	spin(t.hold)
	t.tail = bytes.NewReader(rest)
	return t.tail.Read(p)
}

func (t *tailHeld) Close() error { return t.src.Close() }

// spin keeps a core busy for d, as the proxy's work on a body does.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// benchCutThrough runs the experiment: the proxy's mean hold on the
// seed's request measured first, then the seed's latency workload over
// the direct path, the reverse proxy (streaming, and reading the body
// whole), each of cutModes with that hold, and the proxy.
func benchCutThrough(ctx context.Context, e *env, c *http.Client, targets []costTarget, cs costSizes, large [][]byte) (*wideTable, error) {
	all := targetNamed(targets, costAll)
	holds, err := holdOver(ctx, []costTarget{all}, func() error {
		var f failures
		fireBodies(ctx, c, all.url+chatPath, large, cs.largeN, cs.bigRate, &f)
		return f.down(all.name, 0, 0)
	})
	if err != nil {
		return nil, err
	}
	hold := holds[all.name].mean
	if hold <= 0 {
		return nil, fmt.Errorf("cutthrough: no hold read from %s's /metrics", all.name)
	}
	hold = hold.Round(time.Microsecond)
	names := map[string]string{
		cutWhole:   "read whole, the hold, then sent",
		cutKnown:   fmt.Sprintf("sent as it comes, its last %d KiB after the hold", cutTail>>10),
		cutChunked: "the same, chunked (the length not declared)",
	}
	// Each target by its first process alone, as the forms started here
	// are served.
	run := []costTarget{targets[0]}
	for _, name := range []string{stdlib, readRP} {
		run = append(run, targetNamed(targets, name).first())
	}
	for _, mode := range cutModes {
		u, pid, err := e.start(roleCutThrough, mode, hold.String(), targets[0].url)
		if err != nil {
			return nil, err
		}
		run = append(run, costTarget{name: names[mode], url: u, pid: pid})
	}
	core := targetNamed(targets, bare).first()
	u, pid, err := e.start(streamedCore, targets[0].url, targets[0].url, filepath.Join(e.dir, "cost"))
	if err != nil {
		return nil, err
	}
	run = append(run, core, costTarget{name: "proxy, body streamed through", url: u + "/fake", pid: pid})
	fresh := append(run[3:6:6], run[7]) // the forms just started: their connections and first requests
	run = append(run, all.first())
	w := &wideTable{header: []string{"workload", "metric"}}
	for _, tg := range run {
		w.header = append(w.header, tg.name)
	}
	w.header = append(w.header, costAll+" ÷ "+stdlib)
	w.title = fmt.Sprintf("Would sending a body while it is read help? The seed's request through the standard library's reverse proxy with the proxy's hold (%s, its mean over %d requests, from its /metrics) as CPU work after the body's last byte", fmtDur(hold), cs.largeN)
	title := fmt.Sprintf("the seed's request (%d KB), %d × %d requests at %d/s", len(large[0])>>10, cs.largeRounds, cs.largeN, cs.bigRate)
	if err := cs.largeWarmup(large).send(ctx, c, fresh); err != nil { // the others were warmed with the section
		return nil, err
	}
	if err := costLatency(ctx, c, run, large, cs.largeN, cs.bigRate, cs.largeRounds, true, w, title, nil); err != nil {
		return nil, err
	}
	return w, nil
}
