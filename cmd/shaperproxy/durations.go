package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// durationHelp says what a duration (parseDuration) may be.
const durationHelp = "a duration: Go's units (ns, us, ms, s, m, h) plus d (24h) and w (7d), e.g. 90s, 15m, 36h, 2d, 1w2d"

// timeHelp says what every time flag accepts.
const timeHelp = "a time: a duration ago (" + "15m, 24h, 2d, 1w), or RFC 3339 (2025-03-01T12:00:00Z, 2025-03-01T13:00:00+01:00), or 2025-03-01[ 12:00[:00]] in UTC"

// parseDuration parses a Go duration extended with the units d (24 hours)
// and w (7 days): "2d", "1w", "1d12h", "1.5d". Days are 24 hours (no
// calendar or daylight saving arithmetic).
func parseDuration(s string) (time.Duration, error) {
	var b strings.Builder
	rest := strings.TrimSpace(s)
	if r, ok := strings.CutPrefix(rest, "-"); ok {
		b.WriteByte('-')
		rest = r
	}
	if rest == "" {
		return 0, badDuration(s)
	}
	for rest != "" {
		num := numberPrefix(rest)
		unit := unitPrefix(rest[len(num):])
		if num == "" || unit == "" {
			return 0, badDuration(s)
		}
		rest = rest[len(num)+len(unit):]
		hours := map[string]float64{"d": 24, "w": 7 * 24}[unit]
		if hours == 0 {
			b.WriteString(num + unit)
			continue
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, badDuration(s)
		}
		b.WriteString(strconv.FormatFloat(v*hours, 'f', -1, 64) + "h")
	}
	d, err := time.ParseDuration(b.String())
	if err != nil {
		return 0, badDuration(s)
	}
	return d, nil
}

func badDuration(s string) error {
	return fmt.Errorf("invalid duration %q: want %s", s, durationHelp)
}

// numberPrefix returns the leading decimal number of s ("1.5" of "1.5d").
func numberPrefix(s string) string {
	i := 0
	for i < len(s) && (s[i] == '.' || s[i] >= '0' && s[i] <= '9') {
		i++
	}
	return s[:i]
}

// unitPrefix returns the leading unit of s (letters, µ included).
func unitPrefix(s string) string {
	i := 0
	for i < len(s) && !(s[i] == '.' || s[i] >= '0' && s[i] <= '9') {
		i++
	}
	return s[:i]
}

// timeValue is a flag.Value for a point in time: a duration ago, or a
// timestamp (timeHelp). now is the clock for "ago" (time.Now when nil).
type timeValue struct {
	t   *time.Time
	now func() time.Time
}

func (v timeValue) String() string {
	if v.t == nil || v.t.IsZero() {
		return ""
	}
	return fmtTime(*v.t)
}

func (v timeValue) Set(s string) error {
	t, err := parseTime(s, v.now)
	if err != nil {
		return err
	}
	*v.t = t
	return nil
}

// timeLayouts are the timestamps a time flag accepts; those without a
// zone are UTC (the zone every command prints).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"}

// parseTime parses a duration ago or a timestamp.
func parseTime(s string, now func() time.Time) (time.Time, error) {
	if d, err := parseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("invalid time %q: a duration ago must not be negative", s)
		}
		if now == nil {
			now = time.Now
		}
		return now().Add(-d), nil
	}
	for _, layout := range timeLayouts {
		if t, err := time.ParseInLocation(layout, strings.TrimSpace(s), time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("invalid time " + strconv.Quote(s) + ": want " + timeHelp)
}
