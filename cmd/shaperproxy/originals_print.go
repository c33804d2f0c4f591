package main

// Output of the forensic commands (shaperproxy originals stats|list|lookup),
// kept here so it is tested with the table it describes.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/shaperproxy/shaperproxy/originals"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// originalsMissHelp explains why a lookup may find nothing.
const originalsMissHelp = `Originals are kept for the current turn of each conversation only: when a
new user message starts a turn, the originals recorded in that conversation's
earlier turns are cleared, and a conversation idle for longer than the TTL is
removed. The shaped text must match byte for byte (whitespace and trailing
newlines included); use --stdin for text with newlines, or --sha256 HEX.
`

// originalJSON is the JSON form of an originals.Entry.
type originalJSON struct {
	Conversation string    `json:"conversation"`
	Turn         int       `json:"turn"`
	Time         time.Time `json:"time"`
	SHA256       string    `json:"sha256"` // of the shaped text
	Shaped       string    `json:"shaped"`
	Original     string    `json:"original"`
}

func entriesJSON(entries []originals.Entry) []originalJSON {
	out := make([]originalJSON, 0, len(entries))
	for _, e := range entries {
		h := originals.Sum(e.Shaped)
		out = append(out, originalJSON{e.Conversation, e.Turn, e.Time.UTC(), hex.EncodeToString(h[:]), e.Shaped, e.Original})
	}
	return out
}

func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeOriginalsStats writes the stats of the table at path for a person, or as one
// JSON object.
func writeOriginalsStats(w io.Writer, path string, st originals.Stats, asJSON bool) error {
	if asJSON {
		return writeIndentedJSON(w, struct {
			Path string `json:"path"`
			originals.Stats
		}{path, st})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s\n", path)
	fmt.Fprintf(tw, "file size\t%s\n", humanBytes(st.FileSize))
	fmt.Fprintf(tw, "conversations\t%d\n", st.Conversations)
	fmt.Fprintf(tw, "entries\t%d (%s of original text)\n", st.Entries, humanBytes(st.Bytes))
	fmt.Fprintf(tw, "fan-out\t%d shaped texts with more than one original (max %d)\n", st.FanOuts, st.MaxFanOut)
	return tw.Flush()
}

// writeOriginalsList writes one line per entry (the originals themselves only in
// JSON, where they are all included).
func writeOriginalsList(w io.Writer, entries []originals.Entry, asJSON bool) error {
	if asJSON {
		return writeIndentedJSON(w, entriesJSON(entries))
	}
	if len(entries) == 0 {
		_, err := fmt.Fprint(w, "no originals recorded.\n"+originalsMissHelp)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONVERSATION\tTURN\tTIME\tSHA256\tBYTES\tSHAPED")
	for _, e := range entries {
		h := originals.Sum(e.Shaped)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%x\t%d\t%s\n", e.Conversation, e.Turn, formatTime(e.Time),
			h[:6], len(e.Original), preview(e.Shaped, 60))
	}
	return tw.Flush()
}

// writeOriginalsLookup writes the originals found for the shaped text whose sha256
// is shaped. Entries with the same original (one per conversation holding
// it) are shown once, with every place it was recorded.
func writeOriginalsLookup(w io.Writer, shaped [32]byte, entries []originals.Entry, asJSON bool) error {
	groups := groupByOriginal(entries)
	if asJSON {
		return writeIndentedJSON(w, struct {
			SHA256    string         `json:"sha256"`
			Originals int            `json:"originals"` // distinct; more than 1 is a fan-out
			Entries   []originalJSON `json:"entries"`
		}{hex.EncodeToString(shaped[:]), len(groups), entriesJSON(entries)})
	}
	fmt.Fprintf(w, "sha256 %x\n", shaped)
	if len(groups) > 1 {
		fmt.Fprintf(w, "fan-out: %d different originals shape to this text; all of them follow.\n", len(groups))
	}
	for i, g := range groups {
		fmt.Fprintf(w, "\n--- original %d of %d (%d bytes)\n", i+1, len(groups), len(g[0].Original))
		for _, e := range g {
			fmt.Fprintf(w, "    conversation %s, turn %d, recorded %s\n", e.Conversation, e.Turn, formatTime(e.Time))
		}
		if _, err := fmt.Fprintf(w, "%s\n", strings.TrimSuffix(g[0].Original, "\n")); err != nil {
			return err
		}
	}
	return nil
}

// writeOriginalsMiss explains a lookup that found nothing.
func writeOriginalsMiss(w io.Writer, shaped [32]byte) error {
	_, err := fmt.Fprintf(w, "no original is recorded for sha256 %x.\n%s", shaped, originalsMissHelp)
	return err
}

func groupByOriginal(entries []originals.Entry) [][]originals.Entry {
	var groups [][]originals.Entry
	index := make(map[string]int)
	for _, e := range entries {
		i, ok := index[e.Original]
		if !ok {
			i = len(groups)
			index[e.Original] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], e)
	}
	return groups
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// preview returns s on one line, cut to n runes.
func preview(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n-1]) + "…"
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
