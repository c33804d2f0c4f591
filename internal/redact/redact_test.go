package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func marker(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "[REDACTED len=" + itoa(len(v)) + " sha256=" + hex.EncodeToString(sum[:])[:8] + "]"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestHeader(t *testing.T) {
	in := http.Header{
		"Authorization":                {"Bearer sk-secret-1"},
		"Proxy-Authorization":          {"Basic dXNlcjpwYXNz"},
		"X-Api-Key":                    {"k1", "k2"},
		"Api-Key":                      {"azure"},
		"X-Goog-Api-Key":               {"goog"},
		"Cookie":                       {"session=abc"},
		"Set-Cookie":                   {"a=b; HttpOnly"},
		"X-Session-Token":              {"tok"},
		"X-Client-Secret":              {"shh"},
		"Openai-Organization":          {"org-1"},
		"Content-Type":                 {"application/json"},
		"X-Ratelimit-Remaining-Tokens": {"12345"},
		"Accept":                       {"text/event-stream"},
	}
	orig := in.Clone()
	got := Header(in)
	secret := []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key",
		"X-Goog-Api-Key", "Cookie", "Set-Cookie", "X-Session-Token", "X-Client-Secret"}
	for _, name := range secret {
		for i, v := range orig[name] {
			if want := marker(v); got[name][i] != want {
				t.Errorf("%s[%d] = %q, want %q", name, i, got[name][i], want)
			}
		}
	}
	for _, name := range []string{"Openai-Organization", "Content-Type", "X-Ratelimit-Remaining-Tokens", "Accept"} {
		if got.Get(name) != orig.Get(name) {
			t.Errorf("%s changed: %q", name, got.Get(name))
		}
	}
	if len(got) != len(orig) {
		t.Errorf("got %d headers, want %d", len(got), len(orig))
	}
	if in.Get("Authorization") != "Bearer sk-secret-1" {
		t.Error("input header was modified")
	}
	if Header(nil) != nil {
		t.Error("Header(nil) != nil")
	}
}

func TestHeaderSameKeySameMarker(t *testing.T) {
	a := Header(http.Header{"Authorization": {"Bearer X"}}).Get("Authorization")
	b := Header(http.Header{"Authorization": {"Bearer X"}}).Get("Authorization")
	c := Header(http.Header{"Authorization": {"Bearer Y"}}).Get("Authorization")
	if a != b || a == c {
		t.Errorf("markers: %q %q %q", a, b, c)
	}
	if !strings.HasPrefix(a, "[REDACTED len=8 sha256=") {
		t.Errorf("marker %q", a)
	}
}

func TestURL(t *testing.T) {
	esc := func(v string) string { return url.QueryEscape(marker(v)) }
	tests := []struct{ in, want string }{
		{"https://api.example.com/v1/chat/completions", "https://api.example.com/v1/chat/completions"},
		{"https://h/p?model=x&stream=true", "https://h/p?model=x&stream=true"},
		{"https://h/p?key=AIza123&alt=sse", "https://h/p?key=" + esc("AIza123") + "&alt=sse"},
		{"https://h/p?b=1&api_key=s3&a=2", "https://h/p?b=1&api_key=" + esc("s3") + "&a=2"},
		{"https://h/p?access_token=t%2Fx#frag", "https://h/p?access_token=" + esc("t/x") + "#frag"},
		{"https://h/p?sig=abc&se=2026", "https://h/p?sig=" + esc("abc") + "&se=2026"},
		{"https://h/p?Signature=abc&apikey=1&token=2", "https://h/p?Signature=" + esc("abc") + "&apikey=" + esc("1") + "&token=" + esc("2")},
		{"https://h/p?key=&flag", "https://h/p?key=&flag"},
		{"https://user:pw@h/p", "https://user:" + esc("pw") + "@h/p"},
		{"https://user@h/p", "https://user@h/p"},
		{"/v1/models?x=1", "/v1/models?x=1"},
		// An "@" in the path after a host:port is no user info.
		{"https://host:8080/@user/post", "https://host:8080/@user/post"},
		{"https://api.example.com:8443/@me/items?page=2", "https://api.example.com:8443/@me/items?page=2"},
		{"http://[::1]:8080/@u", "http://[::1]:8080/@u"},
		{"http://[::1]/@u", "http://[::1]/@u"},
	}
	for _, tt := range tests {
		if got := URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestURLNoSecretBytes(t *testing.T) {
	for _, in := range []string{
		"https://h/p?key=SECRETVALUE",
		"https://h/p?x=1&client_secret=SECRETVALUE",
		"https://u:SECRETVALUE@h/",
		"https://h/p?X-Amz-Signature=SECRETVALUE",
	} {
		if got := URL(in); strings.Contains(got, "SECRETVALUE") {
			t.Errorf("URL(%q) = %q leaks the secret", in, got)
		}
		if _, err := url.Parse(URL(in)); err != nil {
			t.Errorf("URL(%q) is not a valid URL: %v", in, err)
		}
	}
}

// TestHeaderValueSecrets: a credential under a header name of the
// client's choosing is redacted by its look; ordinary values, counts and
// ids under ordinary names are kept.
func TestHeaderValueSecrets(t *testing.T) {
	const jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	secret := http.Header{
		"X-Upstream":        {"Bearer sk-live-0123456789abcdef"},
		"X-Forward-Auth-To": {"https://api.example.com"},
		"X-Provider":        {"sk-proj-AbCdEf0123456789"},
		"X-Gemini":          {"AIzaSyA-0123456789abcdefGHIJKLMNOPQRS"},
		"X-Basic":           {"basic dXNlcjpwYXNzd29yZA=="},
		"X-Session":         {jwt},
		"X-Ratelimit-Token": {"tok0123456789abcdefXYZ"},
		"X-Groq":            {"gsk_0123456789abcdefABCDEF"},
	}
	kept := http.Header{
		"X-Ratelimit-Remaining-Tokens": {"12345"},
		"X-Ratelimit-Reset-Tokens":     {"6m0s"},
		"Openai-Organization":          {"org-abc123"},
		"X-Request-Id":                 {"req_0123456789abcdef0123"},
		"User-Agent":                   {"OpenAI/Python 1.40.0"},
		"Content-Type":                 {"text/plain; charset=utf-8"},
		"X-Mode":                       {"basic"},
		"X-Short":                      {"sk-1"},
		"Openai-Processing-Ms":         {"412"},
	}
	checkHeaders(t, secret, kept)
}

// TestHeaderURLValues: a header holding a URL gets the URL's redaction.
func TestHeaderURLValues(t *testing.T) {
	h := Header(http.Header{"Referer": {"https://h/p?alt=sse;key=SECRETVALUE1"}, "Location": {"https://u:SECRETVALUE2@h/"}})
	for _, v := range []string{h.Get("Referer"), h.Get("Location")} {
		if strings.Contains(v, "SECRETVALUE") || !strings.Contains(v, "REDACTED") {
			t.Errorf("URL header kept its secret: %q", v)
		}
	}
	if !strings.HasPrefix(h.Get("Referer"), "https://h/p?alt=sse;key=") {
		t.Errorf("Referer: %q", h.Get("Referer"))
	}
}

// TestURLSemicolonAndMatrixParams: "&" and ";" both separate query
// parameters, ";name=value" path parameters and fragment parameters are
// read too; separators and other bytes are kept.
func TestURLSemicolonAndMatrixParams(t *testing.T) {
	esc := func(v string) string { return url.QueryEscape(marker(v)) }
	tests := []struct{ in, want string }{
		{"https://h/p?alt=sse;key=S1", "https://h/p?alt=sse;key=" + esc("S1")},
		{"https://h/p?key=S1;alt=sse&x=1", "https://h/p?key=" + esc("S1") + ";alt=sse&x=1"},
		{"https://h/v1/models;key=S2/generate?x=1", "https://h/v1/models;key=" + esc("S2") + "/generate?x=1"},
		{"https://h/p;version=2;api_key=S3", "https://h/p;version=2;api_key=" + esc("S3")},
		{"/v1/chat;jsessionid=1;token=S4?stream=true", "/v1/chat;jsessionid=1;token=" + esc("S4") + "?stream=true"},
		{"https://h/cb#access_token=S5&state=x", "https://h/cb#access_token=" + esc("S5") + "&state=x"},
		{"https://h/a;b/c?d=e", "https://h/a;b/c?d=e"},
	}
	for _, tt := range tests {
		if got := URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestSecretsInsideValues: a key inside a header value (JSON, a list,
// quotes), a key of a prefix added later (Fireworks, AWS), and a key or
// token as a query value or a URL's user name under names that say
// nothing are redacted; the values around them that hold none are kept.
func TestSecretsInsideValues(t *testing.T) {
	const jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	secret := http.Header{
		"X-Gateway-Config": {`{"api_key":"sk-proj-JSONSECRET0123456789"}`},
		"X-Forward-List":   {"sk-proj-LISTSECRET0123456789, sk-proj-LISTSECRET4567890123"},
		"X-Quoted":         {`"sk-proj-QUOTEDSECRET0123456"`},
		"X-Path":           {"a/sk-proj-PATHSECRET01234567890"},
		"X-Fireworks":      {"fw_FIREWORKSSECRET0123456789"},
		"X-Aws":            {"AKIAIOSFODNN7EXAMPLE"},
		"X-Echo":           {"token=" + jwt + "; Path=/"},
	}
	kept := http.Header{
		"Traceparent":         {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"X-Model":             {"deepseek-reasoner, task-force-2024abc, xai-org/grok-1"},
		"X-Json":              {`{"mode":"fast","id":"req_0123456789abcdef"}`},
		"Date":                {"Wed, 02 Dec 2026 14:00:00 GMT"},
		"User-Agent":          {"unknown/None; hf_hub/0.24.5; python/3.11.4"},
		"X-Region":            {"ASIA-PACIFIC-1, ASIA_EAST_12345"},
		"Content-Disposition": {`attachment; filename="sk-learn-2024.pdf"`},
	}
	checkHeaders(t, secret, kept)

	esc := func(v string) string { return url.QueryEscape(marker(v)) }
	urls := []struct{ in, want string }{
		{"https://h/p?k=AIzaSyA-0123456789abcdefGHIJ&alt=sse", "https://h/p?k=" + esc("AIzaSyA-0123456789abcdefGHIJ") + "&alt=sse"},
		{"https://h/p?jwt=" + jwt, "https://h/p?jwt=" + esc(jwt)},
		{"https://h/p?pwd=hunter2&x=1", "https://h/p?pwd=" + esc("hunter2") + "&x=1"},
		{"https://h/p?model=deepseek-reasoner&n=2", "https://h/p?model=deepseek-reasoner&n=2"},
		{"https://h/p?model=xai-org/grok-1&after=ASIA_EAST_12345", "https://h/p?model=xai-org/grok-1&after=ASIA_EAST_12345"},
		{"https://h/p?sk-proj-BAREELEMENT0123456789&x=1", "https://h/p?" + esc("sk-proj-BAREELEMENT0123456789") + "&x=1"},
		{"https://user:wJalrXUtnFEMI/K7MDENG#bPxRfiCY@h/p", "https://user:" + esc("wJalrXUtnFEMI/K7MDENG#bPxRfiCY") + "@h/p"},
		{"https://sk-proj-BADESCAPE0123456789%@h/", "https://" + esc("sk-proj-BADESCAPE0123456789%") + "@h/"},
		{"http://sk-proj-USERINFOSECRET1@127.0.0.1:8080/v1", "http://" + esc("sk-proj-USERINFOSECRET1") + "@127.0.0.1:8080/v1"},
		{"https://ghp_0123456789abcdefABCDEF@github.com/o/r", "https://" + esc("ghp_0123456789abcdefABCDEF") + "@github.com/o/r"},
		{"https://0a1b2c3d4e5f6a7b8c9d@api.example.com/", "https://" + esc("0a1b2c3d4e5f6a7b8c9d") + "@api.example.com/"},
		{"https://sk-proj-USERSECRET0123:pw@h/", "https://" + esc("sk-proj-USERSECRET0123") + ":" + esc("pw") + "@h/"},
		{"https://deploy@h/p", "https://deploy@h/p"},
	}
	for _, tt := range urls {
		got := URL(tt.in)
		if got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if _, err := url.Parse(got); err != nil {
			t.Errorf("URL(%q) = %q is not a valid URL: %v", tt.in, got, err)
		}
	}
	// A header holding such a URL gets the same.
	if h := Header(http.Header{"Location": {"https://ghp_LOCSECRET90123456789ab@github.com/o/r"}}); strings.Contains(h.Get("Location"), "LOCSECRET") {
		t.Errorf("Location kept its key: %q", h.Get("Location"))
	}
}

// checkHeaders checks that Header redacts every value of secret whole and
// keeps every value of kept as it is.
func checkHeaders(t *testing.T, secret, kept http.Header) {
	t.Helper()
	got := Header(secret)
	for name, vals := range secret {
		if want := marker(vals[0]); got.Get(name) != want {
			t.Errorf("%s: %q kept as %q, want %q", name, vals[0], got.Get(name), want)
		}
	}
	for name, vals := range Header(kept) {
		if vals[0] != kept.Get(name) {
			t.Errorf("%s: %q changed to %q", name, kept.Get(name), vals[0])
		}
	}
}
