package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/originals"
)

// Timeouts of the requests to a running proxy: a proxy on loopback
// answers in milliseconds, so a slow first answer means no proxy.
const (
	remoteProbeTimeout = 2 * time.Second
	remoteReadTimeout  = 30 * time.Second
)

// remoteOriginals reads the originals table through the running proxy's
// admin endpoints (see originals.Handler), which answer loopback clients
// only. Its client is a plain, direct HTTP client: no HTTP(S)_PROXY from
// the environment, no redirects followed.
type remoteOriginals struct {
	base      string // the proxy's URL
	tablePath string // the table's path, as the proxy reports it
	client    *http.Client
}

// dialOriginals asks the proxy at base for the table's stats, to learn
// its path and that it answers.
func dialOriginals(base string) (*remoteOriginals, error) {
	u, err := url.Parse(strings.TrimSuffix(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("proxy URL %q: want http://HOST:PORT", base)
	}
	r := &remoteOriginals{base: u.String(), client: directClient()}
	var st struct {
		Path string `json:"path"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), remoteProbeTimeout)
	defer cancel()
	if err := r.get(ctx, "stats", nil, &st); err != nil {
		return nil, err
	}
	r.tablePath = st.Path
	return r, nil
}

// directClient is an HTTP client that connects straight to the address
// it is given.
func directClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: remoteProbeTimeout}).DialContext,
			MaxIdleConnsPerHost: 1,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       remoteReadTimeout,
	}
}

func (r *remoteOriginals) get(ctx context.Context, op string, q url.Values, v any) error {
	u := r.base + originals.AdminPath + op
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s: not the originals table's answer: %w", u, err)
	}
	return nil
}

// Stats returns the table's statistics.
func (r *remoteOriginals) Stats() (originals.Stats, error) {
	var st struct {
		Stats originals.Stats `json:"stats"`
	}
	err := r.get(context.Background(), "stats", nil, &st)
	return st.Stats, err
}

// List returns the entries of one conversation ("" for all).
func (r *remoteOriginals) List(conv string) ([]originals.Entry, error) {
	var es []originals.Entry
	err := r.get(context.Background(), "list", url.Values{"conversation": {conv}}, &es)
	return es, err
}

// LookupHash returns the entries of a shaped text's hash.
func (r *remoteOriginals) LookupHash(sum [32]byte) ([]originals.Entry, error) {
	var es []originals.Entry
	err := r.get(context.Background(), "lookup", url.Values{"sha256": {hex.EncodeToString(sum[:])}}, &es)
	return es, err
}

// Path is the table's path and the proxy read through.
func (r *remoteOriginals) Path() string { return r.tablePath + " (via " + r.base + ")" }

// Close releases the client's connections.
func (r *remoteOriginals) Close() error {
	r.client.CloseIdleConnections()
	return nil
}
