package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
)

// replay answers every request with the recorded response of ex.
func replay(ex fixtures.Exchange) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, vv := range ex.ResponseHeader {
			w.Header()[k] = vv
		}
		w.WriteHeader(ex.Status)
		if ex.Stream {
			writeEvents(w, ex.ResponseBody)
			return
		}
		_, _ = w.Write(ex.ResponseBody)
	}
}

// clientHeader is what an SDK sends; the secret must reach the upstream
// untouched (it is the client's own key).
func clientHeader() http.Header {
	return http.Header{
		"Content-Type":   {"application/json"},
		"Authorization":  {"Bearer sk-test-secret-123"},
		"Accept":         {"text/event-stream, application/json"},
		"User-Agent":     {"OpenAI/Python 1.99.0"},
		"X-Stainless-Os": {"Linux"},
		"X-Custom":       {"a", "b"},
	}
}

// sameExceptDate compares a proxied response head with the direct one,
// ignoring Date, which the server sets, and the call id the proxy adds
// (which must be there).
func sameExceptDate(proxied, direct http.Header) bool {
	a, b := proxied.Clone(), direct.Clone()
	a.Del("Date")
	b.Del("Date")
	if id := a.Get(CallIDHeader); len(id) != 16 || b.Get(CallIDHeader) != "" {
		return false
	}
	a.Del(CallIDHeader)
	return reflect.DeepEqual(a, b)
}

// TestFixturesPassThroughBaseURL sends every recorded exchange directly
// and through the proxy, and requires identical bytes on both sides.
func TestFixturesPassThroughBaseURL(t *testing.T) {
	exs, err := fixtures.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(exs) < 10 {
		t.Fatalf("only %d exchanges loaded", len(exs))
	}
	for _, ex := range exs {
		t.Run(ex.Name, func(t *testing.T) {
			rec := &recorder{}
			up := httptest.NewServer(rec.wrap(replay(ex)))
			defer up.Close()
			obs := &recordingObserver{}
			_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers = []Observer{obs} })
			c := rawClient()

			dresp, dbody := do(t, c, ex.Method, up.URL+ex.Path, ex.RequestBody, clientHeader())
			direct := rec.last(t)
			presp, pbody := do(t, c, ex.Method, px.URL+ex.Path, ex.RequestBody, clientHeader())
			proxied := rec.last(t)

			if !bytes.Equal(proxied.Body, ex.RequestBody) {
				t.Errorf("upstream got a different request body")
			}
			if proxied.Method != direct.Method || proxied.Path != direct.Path || proxied.RawQuery != direct.RawQuery {
				t.Errorf("request line differs: %s %s?%s vs %s %s?%s", proxied.Method, proxied.Path, proxied.RawQuery, direct.Method, direct.Path, direct.RawQuery)
			}
			if !reflect.DeepEqual(proxied.Header, direct.Header) {
				t.Errorf("request headers differ:\n proxied %v\n direct  %v", proxied.Header, direct.Header)
			}
			if presp.StatusCode != dresp.StatusCode || !sameExceptDate(presp.Header, dresp.Header) {
				t.Errorf("response head differs: %d %v vs %d %v", presp.StatusCode, presp.Header, dresp.StatusCode, dresp.Header)
			}
			if !bytes.Equal(pbody, ex.ResponseBody) || !bytes.Equal(dbody, ex.ResponseBody) {
				t.Errorf("response body differs from the recording (proxied %d bytes, direct %d, recorded %d)", len(pbody), len(dbody), len(ex.ResponseBody))
			}
			end := obs.waitEnd(t)
			if end.Outcome != OutcomeComplete {
				t.Errorf("outcome = %s (%s)", end.Outcome, end.Err)
			}
			if ex.Stream && !bytes.Equal(bytes.Join(obs.events, nil), ex.ResponseBody) {
				t.Errorf("observer events do not rebuild the body")
			}
		})
	}
}

// TestFixturesPassThroughHTTPSProxy runs the same exchanges in
// HTTPS_PROXY mode against a real TLS upstream: the client trusts only
// the generated CA, so a success proves the proxy decrypted and served it.
func TestFixturesPassThroughHTTPSProxy(t *testing.T) {
	exs, err := fixtures.All()
	if err != nil {
		t.Fatal(err)
	}
	ca := testCA(t)
	for _, ex := range exs {
		t.Run(ex.Name, func(t *testing.T) {
			rec := &recorder{}
			obs := &recordingObserver{}
			c, upURL := mitmRig(t, rec.wrap(replay(ex)), ca, func(o *Options) { o.Observers = []Observer{obs} })
			resp, body := do(t, c, ex.Method, upURL+ex.Path, ex.RequestBody, clientHeader())
			if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != ca.Leaf.Subject.CommonName {
				t.Fatalf("response was not served under the local CA")
			}
			got := rec.last(t)
			if !bytes.Equal(got.Body, ex.RequestBody) || got.Header.Get("Authorization") != "Bearer sk-test-secret-123" {
				t.Errorf("upstream got a different request")
			}
			if resp.StatusCode != ex.Status || !bytes.Equal(body, ex.ResponseBody) {
				t.Errorf("client got status %d and %d bytes, want %d and %d bytes", resp.StatusCode, len(body), ex.Status, len(ex.ResponseBody))
			}
			if end := obs.waitEnd(t); end.Outcome != OutcomeComplete {
				t.Errorf("outcome = %s (%s)", end.Outcome, end.Err)
			}
		})
	}
}
