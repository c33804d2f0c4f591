package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
)

// do sends a chat request the proxy makes on its own (a review's child or
// continuation) to the parent call's upstream, path and query, with the
// parent's end-to-end headers (its Authorization included; Accept-Encoding
// dropped, since the proxy reads the answer). Observers see
// it as an internal call whose Parent is parent.ID; transforms and
// finishers do not run. The caller must close the response body; the
// observers' End comes when it is read to the end or closed.
func (p *Proxy) do(ctx context.Context, parent *Call, purpose string, body []byte) (*http.Response, *Call, error) {
	call := &Call{
		ID: newCallID(), Route: parent.Route, Method: http.MethodPost, Path: parent.Path,
		RawQuery: parent.RawQuery, Header: parent.Header, Start: time.Now(),
		Internal: true, Parent: parent.ID, Purpose: purpose, Conversation: parent.Conversation, route: parent.route, p: p,
		ReadsResponse: true, // the proxy reads this answer itself: uncompressed
	}
	if v, err := conv.ParseRequest(body); err == nil {
		call.Chat, call.View, call.Model, call.Stream = true, v, conv.OwnModel(v.Model), v.Stream // a copy, as forward's
	}
	in := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: parent.Path, RawQuery: parent.RawQuery}, Header: parent.Header, ContentLength: int64(len(body))}
	out := p.newUpstreamRequest(ctx, call, in, parent.route, parent.Path, body, nil)
	sinks := p.observe(call, out, body, call.Since())
	resp, err := p.transportFor(parent.route).RoundTrip(out)
	if err != nil {
		end := End{Outcome: OutcomeUpstreamError, Err: describeErr(err), Duration: call.Since()}
		if ctx.Err() != nil {
			end.Outcome = OutcomeClientCancelled
		}
		sinks.End(end)
		p.finish(call, nil, end)
		return nil, call, err
	}
	info := &ResponseInfo{Status: resp.StatusCode, Header: resp.Header, Stream: isEventStream(resp.Header), Encoded: contentEncoding(resp.Header) != ""}
	sinks.Response(info)
	resp.Body = &observedBody{rc: resp.Body, tee: p.newTee(sinks, call, info), sinks: sinks, call: call, info: info, p: p}
	return resp, call, nil
}

// observedBody hands what the caller reads to the observers and ends the
// call when the body is done.
type observedBody struct {
	rc    io.ReadCloser
	tee   *tee
	sinks sinkList
	call  *Call
	info  *ResponseInfo
	p     *Proxy
	bytes int64
	once  sync.Once
}

func (b *observedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.bytes += int64(n)
		b.tee.Write(p[:n])
	}
	if err != nil {
		b.end(err)
	}
	return n, err
}

func (b *observedBody) Close() error {
	b.end(errors.New("closed before the end"))
	return b.rc.Close()
}

func (b *observedBody) end(err error) {
	b.once.Do(func() {
		events := b.tee.Close()
		end := End{Outcome: OutcomeComplete, Status: b.info.Status, Bytes: b.bytes, Events: events, Duration: b.call.Since()}
		if !errors.Is(err, io.EOF) {
			end.Outcome, end.Err = OutcomeUpstreamError, describeReadErr(err)
			if errors.Is(err, context.Canceled) {
				end.Outcome = OutcomeClientCancelled
			}
		}
		b.sinks.End(end)
		b.p.finish(b.call, b.info, end)
	})
}
