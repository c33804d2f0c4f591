package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/originals"
)

var when = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func timed(e originals.Entry) originals.Entry { e.Time = when; return e }

func TestWriteOriginalsLookup(t *testing.T) {
	shaped := "decided: read the config"
	sum := originals.Sum(shaped)
	tests := []struct {
		name    string
		entries []originals.Entry
		want    []string
		notWant []string
	}{{
		name:    "one original",
		entries: []originals.Entry{timed(entry("conv-a", 3, shaped, "I think the config is in /etc.\n"))},
		want: []string{
			"sha256 1c0dda7c91ea7f7be52105772d58d3fe3d8281136e2f1c92060494fb347ce55c\n", "--- original 1 of 1 (31 bytes)",
			"conversation conv-a, turn 3, recorded 2026-03-01T12:00:00.000Z",
			"I think the config is in /etc.\n",
		},
		notWant: []string{"fan-out"},
	}, {
		name: "fan-out",
		entries: []originals.Entry{
			timed(entry("conv-a", 3, shaped, "first")),
			timed(entry("conv-a", 3, shaped, "second")),
			timed(entry("conv-b", 1, shaped, "first")),
		},
		want: []string{
			"fan-out: 2 different originals shape to this text; all of them follow.",
			"--- original 1 of 2", "--- original 2 of 2",
			"    conversation conv-a, turn 3, recorded 2026-03-01T12:00:00.000Z\n    conversation conv-b, turn 1,",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeOriginalsLookup(&b, sum, tt.entries, false); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tt.notWant {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, got)
				}
			}
		})
	}
}

func TestWriteOriginalsLookupJSON(t *testing.T) {
	shaped := "s"
	entries := []originals.Entry{timed(entry("a", 1, shaped, "o1")), timed(entry("a", 1, shaped, "o2"))}
	var b bytes.Buffer
	if err := writeOriginalsLookup(&b, originals.Sum(shaped), entries, true); err != nil {
		t.Fatal(err)
	}
	var got struct {
		SHA256    string         `json:"sha256"`
		Originals int            `json:"originals"`
		Entries   []originalJSON `json:"entries"`
	}
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, b.String())
	}
	if got.SHA256 != "043a718774c572bd8a25adbeb1bfcd5c0256ae11cecf9f9c3f925d0e52beaf89" || got.Originals != 2 || len(got.Entries) != 2 {
		t.Errorf("got %+v", got)
	}
	if e := got.Entries[1]; e.Original != "o2" || e.Conversation != "a" || e.Turn != 1 || !time.Time(e.Time).Equal(when) || e.SHA256 != got.SHA256 {
		t.Errorf("entry: got %+v", e)
	}
}

func TestWriteOriginalsList(t *testing.T) {
	var b bytes.Buffer
	entries := []originals.Entry{timed(entry("conv-a", 2, "line one\nline two\tand a very long tail that goes on and on past sixty runes", "orig"))}
	if err := writeOriginalsList(&b, entries, false); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "CONVERSATION") || !strings.Contains(lines[2], "lookup --sha256") {
		t.Fatalf("got %q", lines)
	}
	for _, w := range []string{"conv-a", " 2 ", "2026-03-01T12:00:00.000Z", " 4 ", "line one line two and a very long tail that goes on and on …"} {
		if !strings.Contains(lines[1], w) {
			t.Errorf("row lacks %q: %q", w, lines[1])
		}
	}

	b.Reset()
	if err := writeOriginalsList(&b, nil, false); err != nil || !strings.Contains(b.String(), "no originals recorded") {
		t.Errorf("empty list: %v %q", err, b.String())
	}
	b.Reset()
	if err := writeOriginalsList(&b, nil, true); err != nil || b.Len() != 0 {
		t.Errorf("empty JSON list: %v %q, want no line", err, b.String())
	}
	b.Reset()
	entries = append(entries, timed(entry("conv-b", 1, "s", "o")))
	if err := writeOriginalsList(&b, entries, true); err != nil || strings.Count(b.String(), "\n") != 2 || !strings.Contains(b.String(), `"conversation":"conv-b"`) {
		t.Errorf("JSON list, one object per line: %v\n%s", err, b.String())
	}
}

func TestWriteOriginalsStats(t *testing.T) {
	st := originals.Stats{Entries: 25, Bytes: 150 << 10, Conversations: 2, FanOuts: 1, MaxFanOut: 2, FileSize: 3 << 20}
	var b bytes.Buffer
	if err := writeOriginalsStats(&b, "/d/originals.db", "", st, false); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"/d/originals.db", "3.0 MiB", "25 (150.0 KiB of original text)", "1 shaped texts with more than one original (max 2)"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("stats lack %q:\n%s", w, b.String())
		}
	}
	b.Reset()
	if err := writeOriginalsStats(&b, "/d/originals.db", "http://127.0.0.1:1", st, true); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["path"] != "/d/originals.db" || got["proxy"] != "http://127.0.0.1:1" || got["entries"] != 25.0 || got["file_size"] != float64(3<<20) {
		t.Errorf("JSON stats: got %v", got)
	}
}

func entry(conv string, turn int, shaped, original string) originals.Entry {
	return originals.Entry{Shaped: shaped, Original: original, Conversation: conv, Turn: turn}
}
