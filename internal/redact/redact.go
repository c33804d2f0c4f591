// Package redact hides secrets in HTTP headers and URLs before they reach a
// log line or a capture file.
//
// A redacted value is replaced by "[REDACTED len=N sha256=PREFIX]", where N
// is the length of the value in bytes and PREFIX the first 8 hex digits of
// its SHA-256: two records made with the same key can still be matched, and
// the key cannot be recovered. Everything else is left exactly as it was.
//
// What is a secret:
//
//   - headers: every value of a secret name (Authorization, Cookie,
//     X-Api-Key, ..., and any name containing key, token, secret, auth,
//     password or credential, rate-limit counters aside); under any other
//     name, a value that looks like a credential (an auth scheme such as
//     "Bearer ", a known API key prefix such as "sk-", a JWT) or holds one
//     (a key inside JSON, a list, quotes: the whole value goes), and a
//     token-like value under a rate-limit name; in a value holding a URL,
//     what URL redacts;
//   - URLs: the password of the user info, and a user name that is a
//     key (holds one, or is an opaque token of 16 characters or more);
//     the values of key-like parameters, and values that are or hold a
//     credential under any name, in the query ("&" or ";" separated), in
//     ";name=value" matrix parameters of the path, and in a "#name=value"
//     fragment.
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
var secretWords = []string{"key", "token", "secret", "auth", "password", "passwd", "pwd", "credential"}

// secretParams are query parameter names that are secrets without holding
// one of secretWords.
var secretParams = map[string]bool{
	"sig":              true,
	"signature":        true,
	"x-amz-signature":  true,
	"x-goog-signature": true,
}

// authSchemes start a credential in any header (lowercased, with the space
// that ends the scheme).
var authSchemes = []string{"bearer ", "basic ", "token ", "digest ", "negotiate ", "ntlm ", "apikey ", "aws4-hmac-sha256 "}

// keyPrefixes start the API keys and tokens of well-known providers
// (OpenAI and most OpenAI-compatible APIs "sk-", Stripe "sk_"/"rk_",
// Google "AIza" and "ya29.", GitHub, GitLab, Slack, Hugging Face, Groq,
// xAI, Replicate, NVIDIA, Perplexity, Cerebras, Fireworks "fw_", AWS
// access key ids "AKIA"/"ASIA").
var keyPrefixes = []string{
	"sk-", "sk_", "rk_", "AIza", "ya29.", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
	"glpat-", "xoxb-", "xoxp-", "xoxa-", "xoxs-", "hf_", "gsk_", "xai-", "r8_", "nvapi-", "pplx-", "csk-",
	"fw_", "AKIA", "ASIA",
}

// redactValue returns the redaction marker for a secret value.
func redactValue(v string) string {
	sum := sha256.Sum256([]byte(v))
	return "[REDACTED len=" + strconv.Itoa(len(v)) + " sha256=" + hex.EncodeToString(sum[:4]) + "]"
}

// isSecretHeader reports whether every value of the header name is
// redacted.
//
// Rate-limit counters such as "x-ratelimit-remaining-tokens" are token
// counts, not tokens, and are kept: they matter when reading a capture
// (a token-like value under such a name is still redacted, see
// headerValue).
func isSecretHeader(name string) bool {
	n := strings.ToLower(name)
	if secretHeaders[n] {
		return true
	}
	if rateLimitName(n) {
		return false
	}
	return containsWord(n)
}

// rateLimitName: a rate-limit header whose secret word is only "token".
func rateLimitName(n string) bool {
	return strings.Contains(n, "ratelimit") && !strings.Contains(n, "key") &&
		!strings.Contains(n, "secret") && !strings.Contains(n, "auth")
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

// looksSecret reports whether a header value is a credential whatever
// the header's name: an auth scheme and its parameter, a known key
// prefix, or a JWT.
func looksSecret(v string) bool {
	v = strings.TrimSpace(v)
	lower := strings.ToLower(v)
	for _, s := range authSchemes {
		if strings.HasPrefix(lower, s) && len(v) > len(s) {
			return true
		}
	}
	return isKey(v) || isJWT(v)
}

// isKey reports whether v is an API key of a known prefix: the prefix
// and at least 8 more letters, digits, "-", "_" or ".", letters and digits
// among them (an AWS access key id: the prefix and 16 capitals or digits).
func isKey(v string) bool {
	for _, p := range keyPrefixes {
		if !strings.HasPrefix(v, p) {
			continue
		}
		if p == "AKIA" || p == "ASIA" {
			if len(v) == 20 && strings.IndexFunc(v, func(r rune) bool { return !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') }) < 0 {
				return true
			}
			continue
		}
		if len(v) >= len(p)+8 && inAlphabet(v, "-_.") && tokenLike(v, 0) { // no "/": "xai-org/grok-1" is a model
			return true
		}
	}
	return false
}

// innerKey reports whether a token inside a longer value is a key: one
// of minInnerKey characters or more, or an AWS access key id (its shape is
// exact).
func innerKey(tok string) bool {
	if strings.HasPrefix(tok, "AKIA") || strings.HasPrefix(tok, "ASIA") {
		return isKey(tok)
	}
	return len(tok) >= minInnerKey && isKey(tok)
}

// minInnerKey is the shortest key looked for inside a longer value: the
// keys of the providers above are 35 characters or more (Fireworks' 27),
// and a shorter token with a key's prefix is more often a word
// ("sk-learn-2024.pdf", "hf_hub/0.24.5").
const minInnerKey = 24

// holdsSecret reports whether v is or holds a credential: looksSecret of
// the whole, or among its tokens (the runs of letters, digits and "-_.",
// so a key inside JSON, a list, quotes, a path or a name=value pair is
// found) a key of minInnerKey characters or more, an AWS access key id or
// a JWT.
func holdsSecret(v string) bool {
	if looksSecret(v) {
		return true
	}
	for v != "" {
		i := strings.IndexFunc(v, isTokenByte)
		if i < 0 {
			return false
		}
		v = v[i:]
		j := strings.IndexFunc(v, func(r rune) bool { return !isTokenByte(r) })
		if j < 0 {
			j = len(v)
		}
		if tok := v[:j]; innerKey(tok) || isJWT(tok) {
			return true
		}
		v = v[j:]
	}
	return false
}

// isTokenByte: a character of the keys of known prefixes and of JWTs.
func isTokenByte(r rune) bool {
	return r >= '0' && r <= '9' || isLetter(r) || r == '-' || r == '_' || r == '.'
}

// tokenLike reports whether v is one run of at least minLen characters
// of the alphabets keys are written in (letters, digits, "-_.~+/="),
// holding both letters and digits: what an opaque credential looks like,
// and a count, a date or a word does not.
func tokenLike(v string, minLen int) bool {
	return len(v) >= minLen && inAlphabet(v, "-_.~+/=") &&
		strings.ContainsAny(v, "0123456789") && strings.IndexFunc(v, isLetter) >= 0
}

// inAlphabet reports whether v holds only letters, digits and extra.
func inAlphabet(v, extra string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= '0' && c <= '9' || isLetter(rune(c)) || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}

func isLetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

// isJWT reports whether v is three base64url parts joined by dots, the
// first an encoded JSON object ("eyJ").
func isJWT(v string) bool {
	if len(v) < 32 || !strings.HasPrefix(v, "eyJ") || strings.Count(v, ".") != 2 {
		return false // before the split: a long value full of dots costs no slice
	}
	parts := strings.Split(v, ".")
	for _, p := range parts {
		if !inAlphabet(p, "-_=") {
			return false
		}
	}
	return parts[1] != ""
}

// minTokenLen is the shortest value taken for a token under a rate-limit
// name.
const minTokenLen = 20

// headerValue returns one value of header name (lowercased) as stored.
func headerValue(name, v string) string {
	switch {
	case holdsSecret(v), rateLimitName(name) && containsWord(name) && tokenLike(v, minTokenLen):
		return redactValue(v)
	case strings.Contains(v, "://"):
		return URL(v)
	}
	return v
}

// Header returns a copy of h in which the values of secret headers, and
// the values of other headers that look like credentials (see the package
// doc), are replaced by their redaction marker. h is not modified.
// Header(nil) is nil.
func Header(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	out := make(http.Header, len(h))
	for name, vals := range h {
		cp := make([]string, len(vals))
		secret := isSecretHeader(name)
		lower := strings.ToLower(name)
		for i, v := range vals {
			if secret {
				cp[i] = redactValue(v)
			} else {
				cp[i] = headerValue(lower, v)
			}
		}
		out[name] = cp
	}
	return out
}

// URL returns u with the values of key-like parameters (see
// isSecretParam) and any password in the user info replaced by their
// (query-escaped) redaction marker. Parameters are the "name=value"
// elements of the query, separated by "&" or ";", the ";name=value"
// matrix parameters of the path, and those of the fragment. The rest of
// the string, including the order, separators and spelling of the other
// parameters, is unchanged. A string that holds no secret is returned as
// it is.
func URL(u string) string {
	u = redactUserinfo(u)
	base, frag, hasFrag := strings.Cut(u, "#")
	path, query, hasQuery := strings.Cut(base, "?")
	out := redactMatrix(path)
	if hasQuery {
		out += "?" + redactParams(query, "&;")
	}
	if hasFrag {
		out += "#" + redactParams(frag, "&;")
	}
	return out
}

// redactMatrix redacts the ";name=value" parameters of a path: the
// elements after a ';', up to the next ';', '/' or the end.
func redactMatrix(path string) string {
	if !strings.Contains(path, ";") {
		return path
	}
	segs := strings.Split(path, "/")
	for i, seg := range segs {
		if name, params, ok := strings.Cut(seg, ";"); ok {
			segs[i] = name + ";" + redactParams(params, ";")
		}
	}
	return strings.Join(segs, "/")
}

// redactParams redacts the "name=value" elements of s, separated by any
// of seps; the separators are kept as they are.
func redactParams(s, seps string) string {
	var b strings.Builder
	for s != "" {
		i := strings.IndexAny(s, seps)
		elem, rest := s, ""
		if i >= 0 {
			elem, rest = s[:i], s[i:]
		}
		b.WriteString(redactParam(elem))
		if i < 0 {
			break
		}
		b.WriteByte(rest[0])
		s = rest[1:]
	}
	return b.String()
}

// redactParam redacts one "name=value" element of a query string (an
// element without "=" that holds a credential goes whole).
func redactParam(p string) string {
	name, value, ok := strings.Cut(p, "=")
	if !ok {
		if v, err := url.QueryUnescape(p); err == nil && holdsSecret(v) {
			return url.QueryEscape(redactValue(v))
		}
		return p
	}
	if value == "" {
		return p
	}
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	v, err := url.QueryUnescape(value)
	if err != nil {
		v = value
	}
	if !isSecretParam(name) && !holdsSecret(v) {
		return p
	}
	return p[:len(p)-len(value)] + url.QueryEscape(redactValue(v))
}

// redactUserinfo replaces the password of "scheme://user:password@host",
// and the user name when it is a key (secretUser).
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
		// A password holding "/" or "#" (base64 keys do) ends the
		// authority early for a parser: take an "@" before the query
		// whose user info has a ":" — unless what a parser takes for the
		// authority is host:port ("https://host:8080/@user" is a path).
		auth := rest[:end]
		if i := strings.LastIndexByte(auth, ':'); i < 0 || allDigits(auth[i+1:]) || strings.HasSuffix(auth, "]") {
			return u
		}
		q := strings.IndexAny(rest, "?")
		if q < 0 {
			q = len(rest)
		}
		if at = strings.LastIndexByte(rest[:q], '@'); at < 0 || !strings.Contains(rest[:at], ":") {
			return u
		}
	}
	user, pass, hasPass := strings.Cut(rest[:at], ":")
	if secretUser(user) {
		n, err := url.PathUnescape(user)
		if err != nil {
			n = user
		}
		user = url.QueryEscape(redactValue(n))
	} else if !hasPass {
		return u
	}
	if !hasPass {
		return u[:s+3] + user + rest[at:]
	}
	if p, err := url.PathUnescape(pass); err == nil {
		pass = p
	}
	return u[:s+3] + user + ":" + url.QueryEscape(redactValue(pass)) + rest[at:]
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// secretUser reports whether the user name of a URL's user info is a key:
// one that holds a credential, or an opaque token of 16 characters or
// more (APIs that take their key as the basic-auth user name).
func secretUser(user string) bool {
	if n, err := url.PathUnescape(user); err == nil {
		user = n
	}
	return holdsSecret(user) || tokenLike(user, 16)
}
