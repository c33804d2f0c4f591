package main

// What every --json output shares: one compact object per line, snake_case
// keys, times in UTC as RFC 3339 with milliseconds, durations as float
// milliseconds in keys ending in _ms. The shapes are documented in the
// README ("JSON output"); TestJSONShapes keeps them to these rules.

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// timeLayout is how every command prints a time, in text and in JSON:
// UTC, RFC 3339 with milliseconds, "2025-03-01T12:00:00.000Z".
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// fmtTime formats t in UTC with timeLayout.
func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// jsonTime is a time in JSON output: a string in timeLayout, or null for
// the zero time.
type jsonTime time.Time

// MarshalJSON implements json.Marshaler.
func (t jsonTime) MarshalJSON() ([]byte, error) {
	if time.Time(t).IsZero() {
		return []byte("null"), nil
	}
	return []byte(`"` + fmtTime(time.Time(t)) + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler (for tests and consumers in
// Go): null or an RFC 3339 string.
func (t *jsonTime) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = jsonTime{}
		return nil
	}
	var v time.Time
	err := v.UnmarshalJSON(b)
	*t = jsonTime(v)
	return err
}

// ms is a duration as float milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// jsonLines writes one compact JSON object per line.
type jsonLines struct{ enc *json.Encoder }

func newJSONLines(w io.Writer) *jsonLines {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &jsonLines{enc: enc}
}

// write writes v on one line.
func (j *jsonLines) write(v any) error { return j.enc.Encode(v) }

// headerJSON is one header field: headers are a list, so that their names
// are values, not keys.
type headerJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// headersJSON lists h sorted by name, one entry per value; never nil.
func headersJSON(h http.Header) []headerJSON {
	out := []headerJSON{}
	for name, vals := range h {
		for _, v := range vals {
			out = append(out, headerJSON{name, v})
		}
	}
	slices.SortStableFunc(out, func(a, b headerJSON) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// rawJSON returns b as raw JSON when it is valid JSON, else null.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 || !json.Valid(b) {
		return nil
	}
	return json.RawMessage(b)
}

// strPtr returns &s, or nil for "" (null in JSON).
func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
