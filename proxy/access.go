package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
)

// KeyHeader carries a client key in base-URL mode. Like every header
// starting with OwnHeaderPrefix it is never forwarded; the proxy also
// removes it before any hook, observer or log sees the request.
const KeyHeader = "X-Shaper-Key"

// access holds the checks a request passes before the proxy serves it:
// the Host it is addressed to, the browser origin it comes from, and the
// client key it carries.
type access struct {
	hosts   map[string]bool
	origins map[string]bool
	keys    [][sha256.Size]byte // digests, compared in constant time
}

func newAccess(o Options) access {
	a := access{hosts: map[string]bool{}, origins: map[string]bool{}}
	for _, h := range o.AllowedHosts {
		a.hosts[normalizeHost(h)] = true
	}
	for _, origin := range o.AllowedOrigins {
		a.origins[normalizeOrigin(origin)] = true
	}
	for _, k := range o.ClientKeys {
		a.keys = append(a.keys, sha256.Sum256([]byte(k)))
	}
	return a
}

// hostAllowed reports whether a base-URL request's Host is one this
// proxy answers to: an IP address (a page cannot rebind one), localhost
// and its subdomains, or a configured name. Any other name is what DNS
// rebinding sends.
func (a access) hostAllowed(host string) bool {
	h := normalizeHost(host)
	if h == "" || net.ParseIP(h) != nil || h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	return a.hosts[h]
}

// normalizeHost returns the host of a Host header without port, brackets
// and trailing dot, in lower case.
func normalizeHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(host, "]"), "["), ".")
	return strings.ToLower(host)
}

func normalizeOrigin(o string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o), "/"))
}

// browserAllowed reports whether a request is not a browser request from
// another site: no Origin header (SDKs and agent tools send none) or an
// allowed one, and no Sec-Fetch-Site saying the page is another site's.
func (a access) browserAllowed(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		return a.origins["*"] || a.origins[normalizeOrigin(o)]
	}
	switch strings.ToLower(r.Header.Get("Sec-Fetch-Site")) {
	case "cross-site", "same-site":
		return a.origins["*"]
	}
	return true
}

// keyRequired reports whether clients must present a key.
func (a access) keyRequired() bool { return len(a.keys) > 0 }

// validKey compares key with every client key in constant time.
func (a access) validKey(key string) bool {
	if key == "" {
		return false
	}
	sum := sha256.Sum256([]byte(key))
	ok := 0
	for i := range a.keys {
		ok |= subtle.ConstantTimeCompare(sum[:], a.keys[i][:])
	}
	return ok == 1
}

// baseKeyOK checks the client key of a base-URL request: X-Shaper-Key, or
// a bearer Authorization when bearerIsKey (the route replaces the
// client's Authorization with its own API key, or the request is not
// forwarded). The headers that carried a key are removed from r either
// way, so no hook, observer or log line ever sees one.
func (a access) baseKeyOK(r *http.Request, bearerIsKey bool) bool {
	key := r.Header.Get(KeyHeader)
	r.Header.Del(KeyHeader)
	if key == "" && bearerIsKey {
		key = bearer(r.Header.Get("Authorization"))
		if a.keyRequired() {
			r.Header.Del("Authorization") // the route sets its own
		}
	}
	return !a.keyRequired() || a.validKey(key)
}

// proxyKeyOK checks the Proxy-Authorization of a CONNECT or proxy-form
// request (Basic, the key as password: HTTPS_PROXY=http://user:KEY@host;
// or Bearer KEY) and removes it from r.
func (a access) proxyKeyOK(r *http.Request) bool {
	v := r.Header.Get("Proxy-Authorization")
	r.Header.Del("Proxy-Authorization")
	r.Header.Del(KeyHeader)
	if !a.keyRequired() {
		return true
	}
	key := bearer(v)
	if scheme, rest, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") {
		dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
		if err != nil {
			return false
		}
		user, pass, found := strings.Cut(string(dec), ":")
		key = user
		if found {
			key = pass
		}
	}
	return a.validKey(key)
}

// bearer returns the token of an "Authorization: Bearer TOKEN" value.
func bearer(v string) string {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// refusal is why a request was refused; its text is the error code.
type refusal string

const (
	refuseHost      refusal = "host_not_allowed"
	refuseOrigin    refusal = "origin_not_allowed"
	refuseKey       refusal = "client_key_required"
	refuseProxyKey  refusal = "proxy_key_required"
	refuseTarget    refusal = "target_not_allowed"
	refuseLoopback  refusal = "loopback_only"
	refuseOwnListen refusal = "own_listener"
)

var refusalText = map[refusal]string{
	refuseHost:      "shaperproxy: this Host is not one the proxy answers to (add it to allowed_hosts)",
	refuseOrigin:    "shaperproxy: browser requests from this origin are refused (add it to allowed_origins)",
	refuseKey:       "shaperproxy: a client key is required (X-Shaper-Key header, or Authorization: Bearer on a route that adds its own api_key)",
	refuseProxyKey:  "shaperproxy: a client key is required (Proxy-Authorization, e.g. HTTPS_PROXY=http://user:KEY@host:port)",
	refuseTarget:    "shaperproxy: this proxy does not relay to that host (only intercepted hosts and the tunnel list)",
	refuseLoopback:  "shaperproxy: these endpoints answer direct loopback clients only",
	refuseOwnListen: "shaperproxy: the proxy does not relay to its own listeners",
}

var refusalStatus = map[refusal]int{
	refuseKey:      http.StatusUnauthorized,
	refuseProxyKey: http.StatusProxyAuthRequired,
}

// refuse answers a refused request, counts it and logs it with the id
// the answer carries. Nothing of the request but its method and peer
// address is logged.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, why refusal) {
	id := callID(w.Header())
	p.log.Warn("request refused", "call", id, "reason", string(why), "method", methodLabel(r.Method), "remote", r.RemoteAddr)
	p.answerRefusal(w, why)
}

// answerRefusal writes the answer to a refused request and counts it.
func (p *Proxy) answerRefusal(w http.ResponseWriter, why refusal) {
	status, ok := refusalStatus[why]
	if !ok {
		status = http.StatusForbidden
	}
	switch why {
	case refuseKey:
		w.Header().Set("WWW-Authenticate", `Bearer realm="shaperproxy"`)
	case refuseProxyKey:
		w.Header().Set("Proxy-Authenticate", `Basic realm="shaperproxy"`)
	}
	p.metrics.refused.WithLabelValues(string(why)).Inc()
	writeError(w, status, string(why), refusalText[why])
}

// knownMethods are the methods the metrics name; any other is "other", so
// a client cannot make a series per made-up method.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodConnect: true,
	http.MethodOptions: true, http.MethodTrace: true,
}

func methodLabel(m string) string {
	if knownMethods[m] {
		return m
	}
	return "other"
}
