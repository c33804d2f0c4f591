// Package redact hides secrets in HTTP headers and URLs before they reach a
// log line or a capture file.
//
// A redacted value is replaced by "[REDACTED len=N sha256=PREFIX]", where N
// is the length of the value in bytes and PREFIX the first 8 hex digits of
// its SHA-256: two records made with the same key can still be matched, and
// the key cannot be recovered. Everything else is left exactly as it was.
package redact

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// secretHeaders are redacted whatever the rules below say.
var secretHeaders = map[string]bool{
	"authorization":       true,
	"proxy-authorization": true,
	"x-api-key":           true,
	"api-key":             true,
	"x-goog-api-key":      true,
	"cookie":              true,
	"set-cookie":          true,
}

// secretWords mark a header or query parameter name as key-like when the
// lowercased name contains one of them.
var secretWords = []string{"key", "token", "secret", "auth", "password", "passwd", "credential"}

// secretParams are query parameter names that are secrets without holding
// one of secretWords.
var secretParams = map[string]bool{
	"sig":              true,
	"signature":        true,
	"x-amz-signature":  true,
	"x-goog-signature": true,
}

// redactValue returns the redaction marker for a secret value.
func redactValue(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "[REDACTED len=" + strconv.Itoa(len(v)) + " sha256=" + hex.EncodeToString(sum[:4]) + "]"
}

// isSecretHeader reports whether values of the header name are redacted.
//
// Rate-limit counters such as "x-ratelimit-remaining-tokens" are token
// counts, not tokens, and are kept: they matter when reading a capture.
func isSecretHeader(name string) bool {
	n := strings.ToLower(name)
	if secretHeaders[n] {
		return true
	}
	if strings.Contains(n, "ratelimit") && !strings.Contains(n, "key") &&
		!strings.Contains(n, "secret") && !strings.Contains(n, "auth") {
		return false
	}
	return containsWord(n)
}

// isSecretParam reports whether values of the query parameter name are
// redacted.
func isSecretParam(name string) bool {
	n := strings.ToLower(name)
	return secretParams[n] || containsWord(n)
}

func containsWord(n string) bool {
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Header returns a copy of h in which the values of secret headers (see
// IsSecretHeader) are replaced by their redaction marker. h is not
// modified. Header(nil) is nil.
func Header(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	out := make(http.Header, len(h))
	for name, vals := range h {
		cp := make([]string, len(vals))
		secret := isSecretHeader(name)
		for i, v := range vals {
			if secret {
				v = redactValue(v)
			}
			cp[i] = v
		}
		out[name] = cp
	}
	return out
}

// URL returns u with the values of key-like query parameters (see
// IsSecretParam) and any password in the user info replaced by their
// (query-escaped) redaction marker. The rest of the string, including the
// order and spelling of the other parameters, is unchanged. A string that
// holds no secret is returned as it is.
func URL(u string) string {
	u = redactUserinfo(u)
	q := strings.IndexByte(u, '?')
	if q < 0 {
		return u
	}
	head, query, frag := u[:q+1], u[q+1:], ""
	if f := strings.IndexByte(query, '#'); f >= 0 {
		query, frag = query[:f], query[f:]
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		parts[i] = redactParam(p)
	}
	return head + strings.Join(parts, "&") + frag
}

// redactParam redacts one "name=value" element of a query string.
func redactParam(p string) string {
	name, value, ok := strings.Cut(p, "=")
	if !ok || value == "" {
		return p
	}
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	if !isSecretParam(name) {
		return p
	}
	v, err := url.QueryUnescape(value)
	if err != nil {
		v = value
	}
	return p[:len(p)-len(value)] + url.QueryEscape(redactValue(v))
}

// redactUserinfo replaces the password of "scheme://user:password@host".
func redactUserinfo(u string) string {
	s := strings.Index(u, "://")
	if s < 0 {
		return u
	}
	rest := u[s+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return u
	}
	user, pass, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return u
	}
	if p, err := url.PathUnescape(pass); err == nil {
		pass = p
	}
	return u[:s+3] + user + ":" + url.QueryEscape(redactValue(pass)) + rest[at:]
}
