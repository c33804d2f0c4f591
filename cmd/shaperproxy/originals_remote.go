package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/originals"
)

// remoteOriginals reads the originals table through the running proxy's
// loopback-only admin endpoints (see originals.Handler).
type remoteOriginals struct {
	base   string
	client *http.Client
	path   string
}

func dialOriginals(base string) (*remoteOriginals, error) {
	r := &remoteOriginals{base: strings.TrimSuffix(base, "/"), client: &http.Client{Timeout: 10 * time.Second}}
	var st struct {
		Path string `json:"path"`
	}
	if err := r.get("stats", nil, &st); err != nil {
		return nil, err
	}
	r.path = st.Path + " (via " + r.base + ")"
	return r, nil
}

func (r *remoteOriginals) get(op string, q url.Values, v any) error {
	u := r.base + originals.AdminPath + op
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	resp, err := r.client.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func (r *remoteOriginals) Stats() (originals.Stats, error) {
	var st struct {
		Stats originals.Stats `json:"stats"`
	}
	err := r.get("stats", nil, &st)
	return st.Stats, err
}

func (r *remoteOriginals) List(conv string) ([]originals.Entry, error) {
	var es []originals.Entry
	err := r.get("list", url.Values{"conversation": {conv}}, &es)
	return es, err
}

func (r *remoteOriginals) LookupHash(sum [32]byte) ([]originals.Entry, error) {
	var es []originals.Entry
	err := r.get("lookup", url.Values{"sha256": {hex.EncodeToString(sum[:])}}, &es)
	return es, err
}

func (r *remoteOriginals) Path() string { return r.path }
func (r *remoteOriginals) Close() error { return nil }
