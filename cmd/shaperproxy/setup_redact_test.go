package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/testenv"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/internal/config"
)

// seenRequest is what an upstream received.
type seenRequest struct {
	auth, uri string
	body      []byte
}

// TestNoSecretsInCapture: credentials under header names of the client's
// choosing (whole values, and keys inside a JSON value), in the
// upstream's response headers (a key in a Location's user name, in a
// JSON value), key parameters after ";" (in the query, and as matrix
// parameters of the path) and a key as the value of a parameter whose
// name says nothing are redacted in the capture log and never logged; the
// route's own key goes upstream in Authorization and nowhere else: not
// into the body, the capture or the log.
func TestNoSecretsInCapture(t *testing.T) {
	const routeKey = "sk-route-ROUTESECRET0001"
	secrets := []string{routeKey, "CLIENTAUTHSECRET2", "CUSTOMBEARERSECRET3", "PROVIDERKEYSECRET4", "QUERYSECRET5", "MATRIXSECRET6",
		"JSONHEADERSECRET7", "QUERYVALUESECRET8", "LOCATIONSECRET9", "RESPONSEJSONSECRET10"}
	var mu sync.Mutex
	var seen []seenRequest
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, seenRequest{r.Header.Get("Authorization"), r.RequestURI, body})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Location", "https://ghp_LOCATIONSECRET9abc@github.com/o/r")
		w.Header().Set("X-Echo", `{"api_key":"sk-proj-RESPONSEJSONSECRET10"}`)
		_, _ = w.Write([]byte(upstreamOK))
	}))
	defer up.Close()
	rec := &testenv.Log{}
	url, st, dataDir := stackTo(t, up.URL, slog.New(rec), func(c *config.Config) {
		c.Routes[0].APIKey = routeKey
		c.Capture.ClientRequests = true
	})

	chat := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	send := func(method, path string, body []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-client-CLIENTAUTHSECRET2")
		req.Header.Set("X-Upstream-Route", "Bearer CUSTOMBEARERSECRET3")
		req.Header.Set("X-Provider", "sk-proj-PROVIDERKEYSECRET4")
		req.Header.Set("X-Gateway-Config", `{"api_key":"sk-proj-JSONHEADERSECRET7"}`)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d", method, path, resp.StatusCode)
		}
	}
	send("POST", "/chat/completions?alt=sse;key=QUERYSECRET5&k=AIzaSyQUERYVALUESECRET8", chat)
	send("GET", "/models;key=MATRIXSECRET6/list?x=1", nil)

	mu.Lock()
	for _, s := range seen {
		if s.auth != "Bearer "+routeKey || bytes.Contains(s.body, []byte("SECRET")) {
			t.Errorf("upstream got Authorization %q and a body with a key: %v", s.auth, bytes.Contains(s.body, []byte("SECRET")))
		}
	}
	if len(seen) != 2 || !bytes.Equal(seen[0].body, chat) || !strings.Contains(seen[0].uri, ";key=QUERYSECRET5") {
		t.Errorf("upstream requests changed: %+v", seen)
	}
	mu.Unlock()

	var stored strings.Builder
	redacted := 0
	readCapture(t, st, dataDir, func(r capture.Record) {
		fmt.Fprintf(&stored, "%s %v %s\n", r.URL, r.Header, r.Data)
		redacted += strings.Count(r.URL+fmt.Sprint(r.Header), "REDACTED")
	})
	if redacted == 0 {
		t.Fatal("no redaction marker in the capture: the check would prove nothing")
	}
	raw := stored.String()
	for _, f := range segmentFiles(t, filepath.Join(dataDir, capture.Dir)) {
		b, _ := os.ReadFile(f)
		raw += string(b)
	}
	for _, s := range secrets {
		if strings.Contains(raw, s) {
			t.Errorf("%s reached the capture", s)
		}
	}
	// The log: no secret in any line (the call line's path is redacted as
	// the capture's URL is).
	logged := strings.Join(rec.Rendered(), "\n")
	for _, s := range secrets {
		if strings.Contains(logged, s) {
			t.Errorf("%s reached the log", s)
		}
	}
}

// segmentFiles lists the files of a capture directory.
func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, filepath.Join(dir, e.Name()))
	}
	return out
}
