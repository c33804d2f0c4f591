// Package proxy is shaperproxy's HTTP server: a transparent proxy for
// OpenAI-compatible LLM APIs with hooks for the parts that look into chat
// requests.
//
// One Proxy serves, on one listener, base-URL requests (routes chosen by
// path prefix), proxy-form requests and CONNECT tunnels (HTTPS_PROXY mode:
// hosts listed in Options.Intercept are decrypted with a local CA made by
// InitCA and served through the same pipeline; hosts of Options.Tunnel are
// tunnelled as they are), plus /healthz, /metrics and the program's own endpoints
// under AdminPrefix:
//
//	u, _ := url.Parse("https://api.deepseek.com")
//	p, err := proxy.New(proxy.Options{
//		Routes:     []proxy.Route{{Name: "deepseek", Upstream: u}},
//		Transforms: []proxy.RequestTransform{shaper},  // edit chat request bodies
//		Observers:  []proxy.Observer{capture},         // see every call as it passes
//		Finishers:  []proxy.Finisher{review},          // take over the end of a turn
//	})
//	if err != nil { ... }
//	http.Serve(ln, p)
//
// Everything the proxy does not own goes through unchanged: method, path,
// query, end-to-end headers, body and status. SSE streams are forwarded
// event by event, each flushed before the next is read; compressed bodies
// are copied as sent and decoded on the side for observers. A client that
// leaves cancels the upstream request; an upstream cut is passed on as the
// same cut; a failure to reach the upstream is answered in the OpenAI
// error shape. Nothing is retried unless a Retrier asks, once.
//
// What the proxy serves is checked first: base-URL requests must carry a
// Host the listener is for and no foreign browser Origin; with
// Options.ClientKeys set, a client key; CONNECT and proxy-form requests
// reach only intercepted hosts and the Options.Tunnel list, never the
// proxy's own listeners; the admin endpoints answer direct loopback
// clients only. What it keeps of a response is bounded: at most
// Options.MaxEventBytes of one SSE event (a longer one still reaches the
// client whole, the observers get it marked Truncated). Each read of a
// request body and each write to the client has an idle deadline.
//
// What it does is visible: every response carries the call's id in
// CallIDHeader (the proxy's own error answers also in their body), each
// call is one log line (its path's key-like parameters redacted), each
// CONNECT or proxy-form request one "tunnel" line, and Metrics serves the
// counters and latency histograms (time to first byte and first token
// included) at /metrics. For a clean stop, Drain lets the calls in flight
// finish, Cut ends the rest (each logged, outcome "shutdown") and
// CloseTunnels closes the tunnels left. A server that serves a Proxy
// should set its ConnContext (http.Server.ConnContext): Cut then cancels
// a call through its connection's context, and a call makes no context of
// its own.
//
// The zero value of every Options field but Routes is a working default.
// A Proxy is safe for concurrent use.
package proxy
