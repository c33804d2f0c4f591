package capture

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/klauspost/compress/zstd"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/proxy"

	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/internal/redact"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
)

// Options configure a Writer. A zero field selects its default.
type Options struct {
	// Dir holds the segment files; it is created with mode 0700.
	Dir string
	// QueueSize is the number of records waiting for the disk before
	// Enqueue drops (default 4096).
	QueueSize int
	// QueueBytes bounds the Data bytes waiting in the queue (default
	// 64 MiB), so memory stays bounded when requests are large.
	QueueBytes int64
	// SegmentBytes is the size after which a segment is closed and the
	// next one started (default 64 MiB).
	SegmentBytes int64
	// RetainBytes is the total size of segments kept; the oldest are
	// removed beyond it (default 10 GiB, negative: no limit).
	RetainBytes int64
	// RetainAge removes segments last written longer ago (default 14 days,
	// negative: no limit).
	RetainAge time.Duration
	// Level is the zstd speed (default zstd.SpeedFastest: on agent
	// traffic it writes 1.2-1.4× faster than SpeedDefault for 4-7% more
	// bytes on disk, BenchmarkWriter; the writer's CPU is the proxy's).
	Level zstd.EncoderLevel
	// FrameBytes is the raw size at which a frame is compressed and
	// written (default 1 MiB). Larger frames compress better; a reader
	// decompresses a whole frame to reach one record.
	FrameBytes int
	// FlushInterval is the longest a record waits in memory before its
	// frame is written (default 100 ms), counted from when it was queued
	// (and the writer's short batching delay): what a kill can lose.
	FlushInterval time.Duration
	// FS is the file system (default OSFS).
	FS FS
	// Logger receives a warning, at most once per ReportEvery, when
	// records were lost to write errors (a full or failing disk) or
	// dropped (a full queue), with the counts since the previous warning
	// and the last error; and a note when writing works again after one.
	// The losses are also written to the log itself, as a KindDrops
	// record, once the disk takes writes again. Nil logs nothing.
	Logger *slog.Logger
}

// ReportEvery is the shortest time between two warnings about lost
// records: a full disk gives one line per period with the counts, not
// one per failed write.
const ReportEvery = 10 * time.Second

func (o *Options) setDefaults() {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueue
	}
	def(&o.QueueBytes, DefaultQueueBytes)
	def(&o.SegmentBytes, DefaultSegmentBytes)
	def(&o.RetainBytes, DefaultRetainBytes)
	if o.RetainAge == 0 {
		o.RetainAge = DefaultRetainAge
	}
	if o.Level == 0 {
		o.Level = zstd.SpeedFastest
	}
	if o.FrameBytes <= 0 {
		o.FrameBytes = 1 << 20
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 100 * time.Millisecond
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// maxRecordData is the largest Data a Writer accepts.
const maxRecordData = 128 << 20

// maxSegmentBlobs bounds the blob index of a segment; past it the Writer
// starts a new segment.
const maxSegmentBlobs = 4 << 20

// ErrClosed is returned by Flush and Close on a closed Writer.
var ErrClosed = errors.New("capture: writer closed")

// WriterStats are the counters of a Writer since Open.
type WriterStats struct {
	Enqueued    int64 // records accepted by Enqueue
	Written     int64 // accepted records now on disk
	Dropped     int64 // records refused by Enqueue: queue full, too large, closed
	Lost        int64 // accepted records lost to write errors
	WriteErrors int64 // failed writes, syncs and file creations
	BytesRaw    int64 // Data bytes of the written records (requests whole)
	BytesOnDisk int64 // bytes appended to segment files
	Segments    int64 // segment files created
}

// Writer appends records to segment files in one goroutine. Enqueue may be
// called from any number of goroutines; it never blocks and never touches
// the disk. Close must be called to write what is queued and stop the
// goroutine.
type Writer struct {
	opts     Options
	unlock   func() // releases the directory's lock (lockDir)
	q        chan queued
	flushReq chan flushReq
	stop     chan struct{}
	kick     chan struct{} // wakes the writer: records wait in q
	// quietKick wakes the writer FlushInterval after the first quiet
	// record that found it unset (quietArmed: it is set), so no record
	// waits in the queue longer than that.
	quietKick  *time.Timer
	quietArmed atomic.Bool
	done       chan struct{}

	mu     sync.RWMutex // guards closed against Enqueue
	closed bool

	queued       atomic.Int64 // Data bytes waiting in q
	pendingDrops atomic.Int64 // drops not yet written as a KindDrops record
	enqueued     atomic.Int64
	written      atomic.Int64
	dropped      atomic.Int64
	lost         atomic.Int64
	writeErrors  atomic.Int64
	bytesRaw     atomic.Int64
	bytesOnDisk  atomic.Int64
	segments     atomic.Int64

	// Owned by the writer goroutine.
	enc      *zstd.Encoder
	consumed int64
	seg      segState
	nextNum  uint64
	fr       frameBuf
	out      []byte
	scratch  []byte
	spans    []span // spansOf's scratch, up to maxScratchSpans
	// carriedSpans counts the spans requests took from a carry (their
	// messages not read again: spanCarry).
	carriedSpans atomic.Int64
	pendingLost  int64
	flushErr     error // first error since the last Flush
	retryAt      time.Time
	backoff      time.Duration
	maxBackoff   time.Duration
	closeErr     error
	report       lossReport
	redact       redactMemo
	head         []byte // encodeRecord's buffer
	hdr          headerScratch
}

// segState is the segment being written. Its file is created with the
// first frame.
type segState struct {
	num  uint64
	f    File
	path string
	size int64
	// A blob the segment already holds is found by its conv.RawKey: 128
	// bits under seeds of this process, as unlikely to collide as the
	// SHA-256 the blob is stored under, a tenth of its cost (only new
	// blobs get a SHA-256), and not predictable from outside the process.
	// A message's key comes with the proxy's view (computed once when the
	// message was first parsed), so a history is not hashed again per
	// request.
	blobs map[conv.RawKey]uint32
	// last are the blobs of the requests encoded, by place (the last
	// key seen at each), tried before blobs.
	last     resolved.Places[conv.RawKey, uint32]
	nextBlob uint32
	// carries are the spans and blobs of the latest requests' bodies.
	carries spanCarries
}

// frameBuf collects encoded records until they are written as one frame.
type frameBuf struct {
	raw       []byte
	records   uint32 // records in raw, blobs included
	user      int64  // records that came through Enqueue
	rawBytes  int64  // their Data bytes
	blobFirst uint32
	blobs     uint32
	maxTime   int64
	since     time.Time // when the frame's oldest record was queued
	drops     bool      // raw holds a KindDrops record
	dropQueue int64     // counts carried by that record
	dropLost  int64
	ords      []uint32
}

type flushReq struct {
	target int64
	reply  chan error
}

// Open creates the directory if needed and starts a Writer. It never
// appends to an existing segment: the first frame goes to a new one.
func Open(opts Options) (*Writer, error) {
	opts.setDefaults()
	if opts.Dir == "" {
		return nil, errors.New("capture: Options.Dir is empty")
	}
	if err := opts.FS.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	unlock := func() {}
	if _, real := opts.FS.(OSFS); real { // a test's file system is its own
		var err error
		if unlock, err = lockDir(opts.Dir); err != nil {
			return nil, err
		}
	}
	entries, err := opts.FS.ReadDir(opts.Dir)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(opts.Level), zstd.WithEncoderConcurrency(1))
	if err != nil {
		unlock()
		return nil, fmt.Errorf("capture: %w", err)
	}
	w := &Writer{
		opts:       opts,
		q:          make(chan queued, opts.QueueSize),
		flushReq:   make(chan flushReq),
		stop:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
		done:       make(chan struct{}),
		enc:        enc,
		nextNum:    1,
		maxBackoff: 5 * time.Second,
		report:     lossReport{every: ReportEvery},
		unlock:     unlock,
	}
	for _, e := range entries {
		if n, ok := parseSegName(e.Name()); ok && n >= w.nextNum {
			w.nextNum = n + 1
		}
	}
	w.resetSegment()
	w.quietKick = time.AfterFunc(time.Hour, func() {
		w.quietArmed.Store(false)
		w.rekick()
	})
	w.quietKick.Stop()
	go w.run()
	return w, nil
}

// Enqueue hands r to the writer goroutine and reports whether it was
// accepted. It never blocks: when the queue is full (or r.Data is too
// large, or the Writer is closed) it drops r, counts it and returns false.
// The Writer takes ownership of r.Data and r.Header: neither may change
// afterwards (the header is read, and redacted, on the writer goroutine;
// the proxy never changes the headers it hands its observers, so the
// Observer passes them on without a copy).
func (w *Writer) Enqueue(r Record) bool { return w.enqueueQ(queued{Record: r}) }

// EnqueueCopy is Enqueue for a record whose Data the caller keeps (an SSE
// event, a piece of a body): the Writer copies data into a buffer of its
// own, from a pool it returns the buffer to once the record is encoded, so
// that a stream's events cost no allocation. r.Data is ignored.
func (w *Writer) EnqueueCopy(r Record, data []byte) bool { return w.enqueueQ(copied(r, data)) }

// requestQ is the queued request record, with view when it is the view of
// r.Data (the very slice): the proxy's view of the body tells the writer
// where the messages are, so that it does not read the body again to
// store them as blobs. The view must not change afterwards (views do not).
// hold, on the call's bodies, is released once the record is encoded or
// dropped.
func requestQ(r Record, view *conv.Request, hold proxy.Hold) queued {
	if view == nil || !sameBytes(view.Body, r.Data) {
		return queued{Record: r, hold: hold}
	}
	return queued{Record: r, view: view, viewBytes: int64(view.ViewBytes()), hold: hold}
}

// queued is a record waiting for the writer goroutine; buf, when set, is
// the pooled buffer holding its Data, and view the view of a request's
// Data.
//
// rest, when set, are records that follow this one in a single hand-over
// (a non-stream answer's response, body and end: one channel send
// instead of three); they carry no rest of their own.
type queued struct {
	Record
	buf  *[]byte
	view *conv.Request
	rest []queued
	room *heldRecords // where rest lies, put back once rest is taken
	// hold is the hold on the call's bodies Data and view belong to
	// (zero for other records): released once the record is encoded or
	// dropped.
	hold proxy.Hold
	// viewBytes is what view holds besides the body it shares with Data
	// (message structs, decoded strings): a body of many small messages
	// holds several times its bytes there.
	viewBytes int64
	// fields is 1 + fieldBytes(&Record) once held has counted it (a
	// header is counted once, not at each look).
	fields int64
}

// fieldBytes is what r holds besides its Data: its header (a client's
// may be a megabyte) and its strings.
func fieldBytes(r *Record) int64 {
	n := len(r.Call) + len(r.Parent) + len(r.Purpose) + len(r.Conversation) + len(r.Where) +
		len(r.Route) + len(r.Model) + len(r.Method) + len(r.URL) + len(r.Usage) + len(r.Outcome) + len(r.Err)
	for k, vs := range r.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return int64(n)
}

// held is the memory a queued record holds: its pooled buffer's
// capacity (the size classes are 4× apart), else its data's capacity or
// a large body's bigbuf class, with its view's share, its header and
// strings, and the same for the records of rest and the room they lie in.
// The queue's bound counts this.
func (q *queued) held() int64 {
	n := int64(max(cap(q.Data), bigbuf.SizeOf(len(q.Data))))
	if q.buf != nil {
		n = int64(cap(*q.buf))
	}
	if q.fields == 0 {
		q.fields = 1 + fieldBytes(&q.Record)
	}
	n += q.viewBytes + q.fields - 1
	for i := range q.rest {
		n += q.rest[i].held()
	}
	if q.room != nil {
		n += roomBytes
	}
	return n
}

// roomBytes is the memory of a room of held records.
const roomBytes = int64(unsafe.Sizeof(heldRecords{}))

// done gives back what q's record held (the pooled buffer of its Data,
// the hold on a call's bodies), once it is encoded or dropped.
func (q *queued) done() {
	putBuf(q.buf)
	q.hold.Release()
}

// records is how many records q hands over.
func (q *queued) records() int64 { return 1 + int64(len(q.rest)) }

// copied returns the record r with a pooled copy of data as its Data,
// as EnqueueCopy enqueues it.
func copied(r Record, data []byte) queued {
	if len(data) > maxPooled {
		r.Data = bytes.Clone(data)
		return queued{Record: r}
	}
	buf := getBuf(len(data))
	*buf = append((*buf)[:0], data...)
	r.Data = *buf
	return queued{Record: r, buf: buf}
}

// enqueueBatch hands qs over at once (qs[0] first); their Time must be
// set; qs is not empty. The writer owns qs, their buffers and room (the
// array qs lies in) from here, and puts room back to heldPool once it has
// taken or dropped them.
func (w *Writer) enqueueBatch(qs []queued, room *heldRecords) bool {
	q := qs[0]
	q.rest, q.room = qs[1:], room
	return w.enqueueQuiet(q)
}

func (w *Writer) enqueueQ(q queued) bool { return w.send(q, false) }

// enqueueQuiet queues q without waking the writer: it takes it, in its
// place in the queue, when something else wakes it (the next record that
// does, the frame timer of a frame under way, a Flush or Close, a record
// dropped for want of room), when quiet records pile up (batchMin of
// them, half the queue's room or half its bytes), and at the latest
// FlushInterval later (one timer, set by the first quiet record that
// finds it unset).
// The Observer's records go this way (see the package doc).
func (w *Writer) enqueueQuiet(q queued) bool { return w.send(q, true) }

func (w *Writer) send(q queued, quiet bool) bool {
	if q.Time.IsZero() {
		q.Time = time.Now()
	}
	n := q.held()
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed || n > maxRecordData {
		w.drop(&q)
		return false
	}
	if total := w.queued.Add(n); total > w.opts.QueueBytes && total > n {
		w.queued.Add(-n)
		w.drop(&q)
		w.rekick() // what fills the queue may be quiet records: the writer must take them
		return false
	}
	select {
	case w.q <- q:
		w.enqueued.Add(q.records())
		// A quiet record wakes the writer only when quiet ones pile up:
		// batchMin of them (or half the queue's room), or half its bytes.
		switch {
		case !quiet || len(w.q) >= min(batchMin, cap(w.q)/2) || w.queued.Load() > w.opts.QueueBytes/2:
			w.rekick()
		case !w.quietArmed.Load() && w.quietArmed.CompareAndSwap(false, true): // a read first: set once per interval
			w.quietKick.Reset(w.opts.FlushInterval)
		}
		return true
	default:
		w.queued.Add(-n)
		w.drop(&q)
		w.rekick()
		return false
	}
}

// drop counts q's records as dropped and gives their buffers back, and
// the room they were held in.
func (w *Writer) drop(q *queued) {
	q.done()
	for i := range q.rest {
		q.rest[i].done()
	}
	w.dropped.Add(q.records())
	w.pendingDrops.Add(q.records())
	putHeld(q.room)
}

// Stats returns the Writer's counters. It is safe to call at any time.
func (w *Writer) Stats() WriterStats {
	return WriterStats{
		Enqueued:    w.enqueued.Load(),
		Written:     w.written.Load(),
		Dropped:     w.dropped.Load(),
		Lost:        w.lost.Load(),
		WriteErrors: w.writeErrors.Load(),
		BytesRaw:    w.bytesRaw.Load(),
		BytesOnDisk: w.bytesOnDisk.Load(),
		Segments:    w.segments.Load(),
	}
}

// Flush waits until every record accepted so far is written and synced,
// and returns the first write error since the previous Flush (records
// were lost), if any.
func (w *Writer) Flush() error {
	req := flushReq{target: w.enqueued.Load(), reply: make(chan error, 1)}
	select {
	case w.flushReq <- req:
		return <-req.reply
	case <-w.done:
		return ErrClosed
	}
}

// Close writes what is queued, closes the segment and stops the writer
// goroutine. Later Enqueue calls return false. It returns the error of the
// final write or sync, or ErrClosed when called again.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	w.mu.Unlock()
	w.quietKick.Stop()
	close(w.stop)
	<-w.done
	w.enc.Close()
	w.unlock()
	return w.closeErr
}

// ErrDirInUse is Open's error when another Writer holds the directory.
var ErrDirInUse = errors.New("capture: the directory is in use by another writer (another shaperproxy serving with the same data directory?)")

// lockName is the lock file a Writer holds in its directory.
const lockName = "LOCK"

// run is the writer goroutine.
// batchDelay is how long the writer waits after a record wakes it while
// fewer than batchMin records wait, so the records enqueued meanwhile are
// taken in the same pass. It adds at most batchDelay to what a kill can
// lose (FlushInterval is 100 ms).
const (
	batchDelay = 5 * time.Millisecond
	batchMin   = 64
)

func (w *Writer) run() {
	defer close(w.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	retention := time.NewTicker(time.Minute)
	defer retention.Stop()
	w.enforceRetention()
	for {
		select {
		case <-w.kick:
			if len(w.q) == 0 {
				break // the kick of records an earlier pass took
			}
			// At a low rate, let the rest of the call's records arrive before
			// taking them: one wake-up for a burst instead of one per record,
			// which on a small machine is CPU taken from the traffic. Under
			// load the queue is never short and the writer does not wait.
			if len(w.q) < batchMin {
				time.Sleep(batchDelay)
			}
			if w.drain(1024) {
				w.rekick() // more wait: take them after a look at the other cases
			}
		case <-timer.C:
			armed = false
			if w.drain(1024) { // the quiet records that came meanwhile go in this frame
				w.rekick()
			}
			w.writeFrame()
		case req := <-w.flushReq:
			for w.consumed < req.target {
				w.take(<-w.q)
			}
			w.addDrops()
			w.writeFrame()
			req.reply <- w.syncAndReport()
		case <-retention.C:
			w.enforceRetention()
		case <-w.stop:
			w.drain(-1)
			w.addDrops()
			w.writeFrame()
			w.closeErr = w.syncAndReport()
			w.closeSegment()
			w.reportLosses(true)
			return
		}
		w.addDrops()
		w.reportLosses(false)
		switch {
		case w.fr.records > 0 && !armed:
			timer.Reset(max(0, w.opts.FlushInterval-time.Since(w.fr.since)))
			armed = true
		case w.fr.records == 0 && armed:
			timer.Stop()
			armed = false
		}
	}
}

// drain takes up to n queued records without waiting (all when n < 0);
// more reports whether it stopped with records left.
func (w *Writer) drain(n int) (more bool) {
	for ; n != 0; n-- {
		select {
		case r := <-w.q:
			w.take(r)
		default:
			return false
		}
	}
	return len(w.q) > 0
}

// rekick has the writer come back to the queue on its next turn.
func (w *Writer) rekick() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// take encodes one record, writing the frame before it when the record
// would make it too large and after it when it is full.
func (w *Writer) take(q queued) {
	rest, room := q.rest, q.room
	q.rest, q.room = nil, nil // held() of the head alone from here
	w.takeOne(q)
	for _, r := range rest {
		w.takeOne(r)
	}
	if room != nil {
		w.queued.Add(-roomBytes)
	}
	putHeld(room) // rest was taken: its room goes back
}

func (w *Writer) takeOne(q queued) {
	r := q.Record
	defer q.done() // encoded: the frame holds a copy
	w.consumed++
	w.queued.Add(-q.held())
	// A request is mostly stored as blobs the segment already holds: its
	// size says little about what it adds to the frame.
	isReq := r.Kind == KindRequest || r.Kind == KindClientRequest
	if !isReq && len(w.fr.raw) > 0 && len(w.fr.raw)+len(r.Data) > w.opts.FrameBytes {
		w.writeFrame()
	}
	if w.fr.since.IsZero() {
		// The frame is written FlushInterval after its oldest record was
		// queued, not after the writer took it: a record queued quietly
		// waits in the queue up to that interval already.
		w.fr.since = time.Now()
		if !r.Time.IsZero() && r.Time.Before(w.fr.since) {
			w.fr.since = r.Time
		}
	}
	r.URL = redact.URL(r.URL)
	w.encode(&r, q.view)
	if len(w.fr.raw) >= w.opts.FrameBytes {
		w.writeFrame()
	}
}

// addDrops puts a KindDrops record with the pending counts in the current
// frame (at most one per frame).
func (w *Writer) addDrops() {
	if w.fr.drops || (w.pendingDrops.Load() == 0 && w.pendingLost == 0) {
		return
	}
	q := w.pendingDrops.Swap(0)
	lost := w.pendingLost
	w.pendingLost = 0
	note := fmt.Appendf(nil, `{"queue_full":%d,"write_error":%d}`, q, lost)
	r := Record{Kind: KindDrops, Time: time.Now(), DroppedCount: q + lost, Data: note}
	w.encodeRecord(&r, fData, r.Data)
	w.fr.drops, w.fr.dropQueue, w.fr.dropLost = true, q, lost
}

// maxScratchSpans bounds the spans the writer keeps for the next request
// (a history of 16k messages; a longer one's are made for it alone).
const maxScratchSpans = 1 << 14

// encode appends r, and for a request the blobs it introduces, to the
// frame.
func (w *Writer) encode(r *Record, view *conv.Request) {
	w.fr.user++
	w.fr.rawBytes += int64(len(r.Data))
	if r.Kind == KindRequest || r.Kind == KindClientRequest {
		spans, carried := w.requestSpans(view)
		if spans == nil {
			spans = splitBody(r.Data)
		}
		if spans != nil {
			w.encodeRequest(r, spans, carried)
			if carried >= 0 {
				w.carry(view, spans)
			}
			return
		}
	}
	w.encodeRecord(r, fData, r.Data)
}

// requestSpans returns the spans of view's body (spansOf, into the
// writer's scratch) and how many of them, first, a carry gave with their
// blobs (in w.fr.ords); -1 when view gave none.
func (w *Writer) requestSpans(view *conv.Request) ([]span, int) {
	if view == nil {
		return nil, -1
	}
	if _, base, same := view.Lineage(); base != 0 && same > 0 {
		if c := w.seg.carries.find(base); c != nil {
			n := sort.Search(len(c.spans), func(i int) bool { return c.spans[i].end > same })
			if n > 0 {
				if spans := spansOf(view, append(w.spans[:0], c.spans[:n]...), c.spans[n-1].end); spans != nil {
					w.fr.ords = append(w.fr.ords[:0], c.ords[:n]...)
					if checkCarries {
						w.checkCarried(view, spans, n)
					}
					w.carriedSpans.Add(int64(n))
					return spans, n
				}
			}
		}
	}
	spans := spansOf(view, w.spans[:0], 0)
	if spans == nil {
		return nil, -1
	}
	return spans, 0
}

// checkCarries is set by this package's tests: every carry taken is
// checked against the spans read from the whole view, and the blobs the
// segment holds for them (checkCarried). Other packages' tests and
// benchmarks leave it off, as a production binary does.
var checkCarries = false

// checkCarried panics unless spans, of which the first n a carry gave
// with their blobs (w.fr.ords), are those spansOf reads from the whole
// view, and each carried blob the segment's for its span's key.
func (w *Writer) checkCarried(view *conv.Request, spans []span, n int) {
	if whole := spansOf(view, nil, 0); !slices.Equal(whole, spans) {
		panic(fmt.Sprintf("capture: %d spans with %d carried differ from the %d of the whole view", len(spans), n, len(whole)))
	}
	for i, s := range spans[:n] {
		k := s.key
		if k == (conv.RawKey{}) {
			k = conv.RawKeyOf(view.Body[s.start:s.end])
		}
		if ord, ok := w.seg.blobs[k]; !ok || ord != w.fr.ords[i] {
			panic(fmt.Sprintf("capture: carried span %d is blob %d, the segment has %d (%v) for its bytes", i, w.fr.ords[i], ord, ok))
		}
	}
}

// carry keeps spans, view's body's, and the blobs encodeRequest found for
// them, for the bodies that repeat it (a body numbered, of spans within
// maxScratchSpans); the carry it replaces gives its array to the
// writer's scratch.
func (w *Writer) carry(view *conv.Request, spans []span) {
	switch body, _, _ := view.Lineage(); {
	case cap(spans) > maxScratchSpans:
	case body == 0:
		w.spans = spans[:0] // the next request's scratch (spans hold no pointers)
	default:
		w.spans = w.seg.carries.keep(body, spans, w.fr.ords)
	}
}

// encodeRequest encodes r's body as blobs and a skeleton; the first
// carried spans' blobs are already in w.fr.ords.
func (w *Writer) encodeRequest(r *Record, spans []span, carried int) {
	carried = max(carried, 0)
	ords := w.fr.ords[:carried]
	w.seg.last.Begin(len(spans))
	for i := carried; i < len(spans); i++ {
		s := spans[i]
		elem := r.Data[s.start:s.end]
		k := s.key
		if k == (conv.RawKey{}) {
			k = conv.RawKeyOf(elem)
		}
		ord, ok := w.seg.last.Get(i, k)
		if !ok {
			if ord, ok = w.seg.blobs[k]; !ok {
				ord = w.addBlob(k, elem)
			}
			w.seg.last.Set(i, k, ord) // a place the last request had the same keeps its pair
		}
		ords = append(ords, ord)
	}
	w.fr.ords = ords
	sk := appendSkeleton(w.scratch[:0], r.Data, spans, ords)
	w.encodeRecord(r, fSkeleton, sk)
	w.scratch = sk[:0]
}

func (w *Writer) addBlob(k conv.RawKey, data []byte) uint32 {
	ord := w.seg.nextBlob
	w.seg.nextBlob++
	w.seg.blobs[k] = ord
	h := sha256.Sum256(data) // the stored name of a blob: only new blobs pay for it
	if w.fr.blobs == 0 {
		w.fr.blobFirst = ord
	}
	w.fr.blobs++
	b := Record{Kind: kindBlob}
	body := appendRecordBody(make([]byte, 0, 48), &b)
	body = appendBytesField(body, fHash, h[:])
	w.appendFramed(body, fData, data)
	return ord
}

// encodeRecord appends r with payload under the given tag.
func (w *Writer) encodeRecord(r *Record, tag uint64, payload []byte) {
	// The header is redacted as it is encoded (each value through the
	// memo): no redacted copy of it is built.
	head := appendRecordBody(w.head[:0], r) // a header makes it hundreds of bytes: one buffer for all
	head = w.hdr.append(head, r.Header, w.redact.value)
	w.appendFramed(head, tag, payload)
	w.head = head[:0]
	if t := r.Time.UnixNano(); t > w.fr.maxTime {
		w.fr.maxTime = t
	}
}

// appendFramed appends one record: uvarint length, head, payload field.
func (w *Writer) appendFramed(head []byte, tag uint64, payload []byte) {
	if w.fr.since.IsZero() {
		w.fr.since = time.Now()
	}
	n := len(head)
	if len(payload) > 0 {
		n += uvarintLen(tag) + uvarintLen(uint64(len(payload))) + len(payload)
	}
	raw := binary.AppendUvarint(w.fr.raw, uint64(n))
	raw = append(raw, head...)
	w.fr.raw = appendBytesField(raw, tag, payload)
	w.fr.records++
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// writeFrame compresses the frame and appends it to the segment with one
// write. On failure the frame's records are lost and counted, and the
// segment is abandoned: the next frame starts a new one.
func (w *Writer) writeFrame() {
	if w.fr.records == 0 {
		return
	}
	defer w.resetFrame()
	if time.Now().Before(w.retryAt) {
		w.loseFrame(nil)
		return
	}
	if w.seg.f == nil {
		if err := w.createSegment(); err != nil {
			w.loseFrame(err)
			return
		}
	}
	out := w.out[:0]
	if w.seg.size == 0 {
		out = appendSegHeader(out, w.seg.num, time.Now())
	}
	out = w.appendFrame(out)
	w.out = out
	n, err := w.seg.f.Write(out)
	if err == nil && n != len(out) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(out))
	}
	if err != nil {
		w.loseFrame(fmt.Errorf("capture write %s: %w", w.seg.path, err))
		return
	}
	w.frameWritten(int64(len(out)))
}

// appendFrame appends header, compressed frame and trailer.
func (w *Writer) appendFrame(out []byte) []byte {
	hdr := len(out)
	out = append(out, make([]byte, frameHeaderSize)...)
	out = w.enc.EncodeAll(w.fr.raw, out)
	body := out[hdr+frameHeaderSize:]
	putFrameHeader(out[hdr:], uint32(len(body)))
	return appendTrailer(out, trailer{
		FrameLen:  uint32(len(body)),
		RawLen:    uint32(len(w.fr.raw)),
		Records:   w.fr.records,
		BlobFirst: w.fr.blobFirst,
		Blobs:     w.fr.blobs,
		MaxTime:   w.fr.maxTime,
		FrameCRC:  crc(body),
	})
}

func (w *Writer) frameWritten(n int64) {
	w.seg.size += n
	w.written.Add(w.fr.user)
	w.bytesRaw.Add(w.fr.rawBytes)
	w.bytesOnDisk.Add(n)
	w.backoff = 0
	w.noteRecovery()
	if w.seg.size >= w.opts.SegmentBytes || len(w.seg.blobs) >= maxSegmentBlobs {
		if err := w.seg.f.Sync(); err != nil {
			w.noteError(fmt.Errorf("capture sync: %w", err))
		}
		w.closeSegment()
		w.enforceRetention()
	}
}

// loseFrame counts the frame's records as lost; err is nil when the frame
// is dropped because the writer is backing off after an error.
func (w *Writer) loseFrame(err error) {
	if err != nil {
		w.noteError(err)
		w.backoff = min(max(2*w.backoff, 50*time.Millisecond), w.maxBackoff)
		w.retryAt = time.Now().Add(w.backoff)
	}
	w.lost.Add(w.fr.user)
	w.pendingLost += w.fr.user + w.fr.dropLost
	w.pendingDrops.Add(w.fr.dropQueue)
	w.fr.dropQueue, w.fr.dropLost = 0, 0
	// The frame may be torn on disk, and the blob ordinals it handed out
	// are gone with it: the next frame starts a new segment.
	w.abandonSegment()
}

func (w *Writer) noteError(err error) {
	w.writeErrors.Add(1)
	if w.flushErr == nil {
		w.flushErr = err
	}
	w.report.err = err
}

func (w *Writer) resetFrame() {
	w.fr = frameBuf{raw: w.fr.raw[:0], ords: w.fr.ords[:0]}
	if cap(w.fr.raw) > 4*w.opts.FrameBytes {
		w.fr.raw = nil
	}
	if cap(w.out) > 4*w.opts.FrameBytes {
		w.out = nil
	}
}

// createSegment creates the next segment file, never an existing one.
func (w *Writer) createSegment() error {
	var err error
	for range 1000 {
		num := w.nextNum
		w.nextNum++
		path := filepath.Join(w.opts.Dir, segName(num))
		var f File
		if f, err = w.opts.FS.Create(path, 0o600); err == nil {
			w.seg.num, w.seg.f, w.seg.path, w.seg.size = num, f, path, 0
			w.segments.Add(1)
			return nil
		}
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	return fmt.Errorf("capture create segment: %w", err)
}

// abandonSegment gives up the current segment after an error: the torn
// bytes are cut off when possible, and an empty file is removed.
func (w *Writer) abandonSegment() {
	if f := w.seg.f; f != nil {
		_ = f.Truncate(w.seg.size)
		_ = f.Close()
		if w.seg.size == 0 {
			_ = w.opts.FS.Remove(w.seg.path)
		}
	}
	w.resetSegment()
}

// closeSegment closes the current segment; the next frame starts a new one.
func (w *Writer) closeSegment() {
	if w.seg.f != nil {
		if err := w.seg.f.Close(); err != nil {
			w.noteError(fmt.Errorf("capture close: %w", err))
		}
	}
	w.resetSegment()
}

func (w *Writer) resetSegment() {
	w.seg = segState{blobs: make(map[conv.RawKey]uint32)}
}

// syncAndReport syncs the segment and returns (and clears) the first error
// since the last report.
func (w *Writer) syncAndReport() error {
	if w.seg.f != nil {
		if err := w.seg.f.Sync(); err != nil {
			w.noteError(fmt.Errorf("capture sync: %w", err))
			w.abandonSegment()
		}
	}
	err := w.flushErr
	w.flushErr = nil
	return err
}
