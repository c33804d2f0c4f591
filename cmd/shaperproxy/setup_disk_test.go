package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"

	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/shaperproxy/shaperproxy/originals"
)

// historyBody is a chat request of one conversation (named by conv) in
// the middle of a turn: steps tool-call steps, each with about size bytes
// of reasoning, all but the latest shaped by the proxy (and recorded in
// the originals table).
func historyBody(conv string, steps, size int) []byte {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	msgs := []string{`{"role":"system","content":"You are agent ` + conv + `."}`, `{"role":"user","content":"fix ` + conv + `"}`}
	for i := range steps {
		var r strings.Builder
		for j := 0; r.Len() < size; j++ {
			r.WriteString(reasoning(fmt.Sprintf("%s step %d part %d", conv, i, j)) + " ")
		}
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs, `{"role":"assistant","content":"","reasoning_content":`+q(r.String())+
			`,"tool_calls":[{"id":"`+id+`","type":"function","function":{"name":"read_file","arguments":"{}"}}]}`,
			`{"role":"tool","tool_call_id":"`+id+`","content":"ok"}`)
	}
	return []byte(`{"model":"deepseek-reasoner","messages":[` + strings.Join(msgs, ",") + `]}`)
}

// TestSmallDiskDefaultConfig is issue 10's full disk: the whole stack
// with the default configuration on a 2 MiB tmpfs. Heavy shaping no
// longer lets the originals table take the disk: capture loses nothing.
// When someone else fills the disk, traffic flows, capture and originals
// each warn once per period with counts (before: capture never, the table
// once per failed write); when space is freed both resume by themselves,
// and the capture log holds a drops record with every loss.
func TestSmallDiskDefaultConfig(t *testing.T) {
	const fsSize = 2 << 20
	mnt := testenv.Tmpfs(t, fsSize)
	up := httptest.NewServer(&recordingUpstream{answer: func([]byte) (int, []byte) { return 200, []byte(upstreamOK) }})
	defer up.Close()
	rec := &testenv.Log{}
	url, st, _ := stackTo(t, up.URL, slog.New(rec), func(c *config.Config) { c.DataDir = mnt })
	send := func(conv string) {
		t.Helper()
		if status, _, body := postChat(t, url, historyBody(conv, 4, 8<<10)); status != 200 || string(body) != upstreamOK {
			t.Fatalf("%s: %d %s", conv, status, body)
		}
	}

	// 1. 60 conversations, 1.4 MB of originals: more than the table may take.
	for i := range 60 {
		send(fmt.Sprintf("a%02d", i))
	}
	st.originals.Flush()
	if err := st.capture.Flush(); err != nil {
		t.Fatalf("capture on a disk shared with the originals table: %v", err)
	}
	table := filepath.Join(mnt, originals.FileName)
	if fi, err := os.Stat(table); err != nil || fi.Size() > fsSize*2/5 {
		t.Fatalf("originals.db: %v, %d bytes of a %d-byte disk", err, fi.Size(), fsSize)
	}
	if s := st.capture.Stats(); s.Lost != 0 || s.Written == 0 {
		t.Fatalf("capture beside the table: %+v", s)
	}

	// 2. The disk fills up from elsewhere: traffic flows, losses are told
	// once per period.
	filler := filepath.Join(mnt, "filler")
	fillTmpfs(t, filler)
	start := time.Now()
	for i := range 40 {
		send(fmt.Sprintf("b%02d", i))
		_ = st.capture.Flush()
	}
	st.originals.Flush()
	lost := st.capture.Stats().Lost
	if lost == 0 {
		t.Fatal("capture lost nothing on a full disk: the test proves nothing")
	}
	periods := int(time.Since(start)/capture.ReportEvery) + 1
	if n := rec.Count("capture: records not written"); n == 0 || n > periods {
		t.Errorf("%d capture warnings in %d periods", n, periods)
	}
	// The table keeps working in its own file (making room) or refuses;
	// either way it says so, once a period.
	w := st.originals
	t.Logf("originals on a full disk: refused %d, failed %d, evicted %d", w.Refused(), w.Failed(), w.Evicted())
	if n := rec.Count("originals table:"); n > periods || (n == 0 && w.Refused()+w.Failed()+w.Evicted() > 0) {
		t.Errorf("%d originals warnings in %d periods", n, periods)
	}

	// 3. Space comes back: both resume by themselves.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		send("c00")
		if err := st.capture.Flush(); err == nil && rec.Count("capture: writing again") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture did not resume: %+v", st.capture.Stats())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The originals of a request are queued once its client has the
	// answer (the shaper's booking runs after it), so the table is read
	// until they are there, the request sent again as traffic would.
	for tries := 1; ; tries++ {
		st.originals.Flush()
		got, err := st.store.List("")
		if err != nil {
			t.Fatal(err)
		}
		if hasConversationEntries(got, historyBody("c00", 1, 1)) {
			t.Logf("originals recorded again after %d tries", tries)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no originals recorded after space came back (%d tries)", tries)
		}
		time.Sleep(100 * time.Millisecond)
		send("c00")
	}
	var onRecord int64
	readCapture(t, st, mnt, func(r capture.Record) {
		if r.Kind == capture.KindDrops {
			onRecord += r.DroppedCount
		}
	})
	if s := st.capture.Stats(); onRecord < lost || onRecord != s.Lost+s.Dropped {
		t.Errorf("drops records hold %d; capture lost %d (%d before space came back) and dropped %d", onRecord, s.Lost, lost, s.Dropped)
	}
}

// hasConversationEntries reports whether entries hold one of the
// conversation that body belongs to.
func hasConversationEntries(entries []originals.Entry, body []byte) bool {
	v, err := conv.ParseRequest(body)
	if err != nil {
		return false
	}
	key := conv.ConversationKey(v, "")
	for _, e := range entries {
		if e.Conversation == key {
			return true
		}
	}
	return false
}

// fillTmpfs writes a file at path until the file system is full.
func fillTmpfs(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// readCapture calls fn with every record of the stack's capture log.
func readCapture(t *testing.T, st *stack, dataDir string, fn func(capture.Record)) {
	t.Helper()
	_ = st.capture.Flush()
	rd, err := capture.OpenReader(filepath.Join(dataDir, capture.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := rd.Scan(func(l capture.Located) error {
		if l.Err == nil {
			fn(l.Record)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
