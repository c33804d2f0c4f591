package main

// Output of the forensic commands (shaperproxy originals stats|list|lookup),
// kept here so it is tested with the table it describes.

import (
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/shaperproxy/shaperproxy/originals"
)

// originalsMissHelp explains why a lookup may find nothing.
const originalsMissHelp = `Originals are kept for the current turn of each conversation only: when a
new user message starts a turn, the originals recorded in that conversation's
earlier turns are cleared, and a conversation idle for longer than the TTL is
removed. The shaped text must match byte for byte (whitespace and trailing
newlines included); use --stdin for text with newlines, or --sha256 HEX.
`

// listSumDigits is how many hex digits of a shaped text's sha256 list
// prints (lookup --sha256 takes a unique prefix).
const listSumDigits = 16

// originalJSON is one recorded original (originals list, and the entries
// of originals lookup).
type originalJSON struct {
	Conversation string   `json:"conversation"`
	Turn         int      `json:"turn"`
	Time         jsonTime `json:"time"`
	SHA256       string   `json:"sha256"` // of the shaped text
	Bytes        int      `json:"bytes"`  // of the original
	Shaped       string   `json:"shaped"`
	Original     string   `json:"original"`
}

func toOriginalJSON(e originals.Entry) originalJSON {
	h := originals.Sum(e.Shaped)
	return originalJSON{e.Conversation, e.Turn, jsonTime(e.Time), hex.EncodeToString(h[:]), len(e.Original), e.Shaped, e.Original}
}

// originalsStatsJSON is the table's statistics (originals stats).
type originalsStatsJSON struct {
	Path          string `json:"path"`
	Proxy         string `json:"proxy"` // the proxy asked, "" when the file was read
	Entries       int    `json:"entries"`
	Bytes         int64  `json:"bytes"`
	Conversations int    `json:"conversations"`
	FanOuts       int    `json:"fan_outs"`
	MaxFanOut     int    `json:"max_fan_out"`
	FileSize      int64  `json:"file_size"`
}

// originalsLookupJSON is the answer of originals lookup.
type originalsLookupJSON struct {
	SHA256    string         `json:"sha256"`
	Originals int            `json:"originals"` // distinct; more than 1 is a fan-out
	Entries   []originalJSON `json:"entries"`
}

// sourceOf returns the table's path and the proxy src reads it through
// ("" for the file).
func sourceOf(src originalsSource) (path, proxy string) {
	if r, ok := src.(*remoteOriginals); ok {
		return r.tablePath, r.base
	}
	return src.Path(), ""
}

// writeOriginalsStats writes the stats of the table at path (read through
// proxy, when not ""), for a person or as one JSON object.
func writeOriginalsStats(w io.Writer, path, proxy string, st originals.Stats, asJSON bool) error {
	if asJSON {
		return newJSONLines(w).write(originalsStatsJSON{path, proxy, st.Entries, st.Bytes, st.Conversations, st.FanOuts, st.MaxFanOut, st.FileSize})
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s\n", path)
	if proxy != "" {
		fmt.Fprintf(tw, "read via\t%s (the running proxy)\n", proxy)
	}
	fmt.Fprintf(tw, "file size\t%s\n", humanBytes(st.FileSize))
	fmt.Fprintf(tw, "conversations\t%d\n", st.Conversations)
	fmt.Fprintf(tw, "entries\t%d (%s of original text)\n", st.Entries, humanBytes(st.Bytes))
	fmt.Fprintf(tw, "fan-out\t%d shaped texts with more than one original (max %d)\n", st.FanOuts, st.MaxFanOut)
	return tw.Flush()
}

// writeOriginalsList writes one line per entry (the originals themselves
// only in JSON, one object per entry).
func writeOriginalsList(w io.Writer, entries []originals.Entry, asJSON bool) error {
	if asJSON {
		out := newJSONLines(w)
		for _, e := range entries {
			if err := out.write(toOriginalJSON(e)); err != nil {
				return err
			}
		}
		return nil
	}
	if len(entries) == 0 {
		_, err := fmt.Fprint(w, "no originals recorded.\n"+originalsMissHelp)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONVERSATION\tTURN\tTIME\tSHA256\tBYTES\tSHAPED")
	for _, e := range entries {
		h := originals.Sum(e.Shaped)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\n", e.Conversation, e.Turn, fmtTime(e.Time),
			hex.EncodeToString(h[:])[:listSumDigits], len(e.Original), preview(e.Shaped, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "shaperproxy originals lookup --sha256 SHA256 prints an original.")
	return err
}

// writeOriginalsLookup writes the originals found for the shaped text whose sha256
// is shaped. Entries with the same original (one per conversation holding
// it) are shown once, with every place it was recorded.
func writeOriginalsLookup(w io.Writer, shaped [32]byte, entries []originals.Entry, asJSON bool) error {
	groups := groupByOriginal(entries)
	if asJSON {
		j := originalsLookupJSON{SHA256: hex.EncodeToString(shaped[:]), Originals: len(groups), Entries: []originalJSON{}}
		for _, e := range entries {
			j.Entries = append(j.Entries, toOriginalJSON(e))
		}
		return newJSONLines(w).write(j)
	}
	fmt.Fprintf(w, "sha256 %x\n", shaped)
	if len(groups) > 1 {
		fmt.Fprintf(w, "fan-out: %d different originals shape to this text; all of them follow.\n", len(groups))
	}
	for i, g := range groups {
		fmt.Fprintf(w, "\n--- original %d of %d (%d bytes)\n", i+1, len(groups), len(g[0].Original))
		for _, e := range g {
			fmt.Fprintf(w, "    conversation %s, turn %d, recorded %s\n", e.Conversation, e.Turn, fmtTime(e.Time))
		}
		if _, err := fmt.Fprintf(w, "%s\n", strings.TrimSuffix(g[0].Original, "\n")); err != nil {
			return err
		}
	}
	return nil
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
