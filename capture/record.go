package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Kind is the type of a Record.
type Kind uint8

// Record kinds. The zero Kind is invalid.
const (
	KindRequest       Kind = 1 + iota // a request as sent upstream
	KindClientRequest                 // a request as received from the client
	KindResponse                      // response status and headers
	KindEvent                         // one SSE event, raw bytes
	KindBody                          // non-stream response body bytes
	KindEnd                           // the end of a call, with its outcome
	KindDrops                         // records dropped before they reached the disk
	KindNote                          // an internal signal (JSON in Data)

	kindBlob Kind = 100 // a message body referenced by request skeletons
)

var kindNames = map[Kind]string{
	KindRequest:       "request",
	KindClientRequest: "client_request",
	KindResponse:      "response",
	KindEvent:         "event",
	KindBody:          "body",
	KindEnd:           "end",
	KindDrops:         "drops",
	KindNote:          "note",
	kindBlob:          "blob",
}

// String returns the kind's name as used by the commands ("request", ...).
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// ParseKind returns the Kind named s (as printed by String).
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if k != kindBlob && strings.EqualFold(name, s) {
			return k, nil
		}
	}
	return 0, fmt.Errorf("unknown record kind %q", s)
}

// DefaultWhere is the pipeline position of a Record whose Where is empty:
// exactly the bytes sent to or received from the upstream.
const DefaultWhere = "upstream-wire"

// Record is one captured item. Which fields are set depends on Kind.
type Record struct {
	Kind     Kind
	Call     string        // call id
	Parent   string        // the call that caused a proxy-made request
	Internal bool          // request made by the proxy itself (reviews)
	Seq      int           // event sequence within the call, 0-based
	Time     time.Time     // wall clock; Enqueue sets it when zero
	Offset   time.Duration // monotonic offset from the request start
	Where    string        // pipeline position; "" means DefaultWhere
	Route    string
	Model    string
	Method   string
	URL      string      // redacted by the Writer
	Header   http.Header // redacted by the Writer as it encodes the record; not to be changed once enqueued
	Status   int
	Stream   bool
	Data     []byte // request body, event raw bytes, body bytes, note JSON

	// Purpose is what an internal call was for ("review-child",
	// "review-continuation", "deliberate-branch", …; "" for the client's
	// own calls and in logs written before it was recorded), Conversation
	// the call's conversation key (conv.ConversationKey; "" for calls that
	// are not chat requests and in older logs). Both are set on the
	// request and end records.
	Purpose      string
	Conversation string

	// ReasoningShaped and ReasoningRaw count the outgoing reasoning blocks
	// of a request that were shaped and left raw.
	ReasoningShaped int
	ReasoningRaw    int

	// Outcome is set on KindEnd: "complete", "client_cancelled",
	// "upstream_error", "timeout".
	Outcome string
	Bytes   int64
	Events  int
	Usage   []byte
	Err     string

	DroppedCount int64 // KindDrops
}

// Field tags: field number << 3 | wire type (0 varint, 2 bytes).
const (
	wtVarint = 0
	wtBytes  = 2
)

const (
	fCall     = 1<<3 | wtBytes
	fParent   = 2<<3 | wtBytes
	fSeq      = 3<<3 | wtVarint
	fTime     = 4<<3 | wtVarint
	fOffset   = 5<<3 | wtVarint
	fWhere    = 6<<3 | wtBytes
	fRoute    = 7<<3 | wtBytes
	fModel    = 8<<3 | wtBytes
	fMethod   = 9<<3 | wtBytes
	fURL      = 10<<3 | wtBytes
	fHeader   = 11<<3 | wtBytes
	fStatus   = 12<<3 | wtVarint
	fData     = 13<<3 | wtBytes
	fShaped   = 14<<3 | wtVarint
	fRaw      = 15<<3 | wtVarint
	fOutcome  = 16<<3 | wtBytes
	fBytes    = 17<<3 | wtVarint
	fEvents   = 18<<3 | wtVarint
	fUsage    = 19<<3 | wtBytes
	fErr      = 20<<3 | wtBytes
	fDropped  = 21<<3 | wtVarint
	fSkeleton = 22<<3 | wtBytes // request body as a skeleton, instead of fData
	fHash     = 23<<3 | wtBytes // blob SHA-256
	fPurpose  = 24<<3 | wtBytes
	fConv     = 25<<3 | wtBytes
)

// Flags byte.
const (
	flagInternal = 1 << 0
	flagStream   = 1 << 1
)

func appendVarintField(b []byte, tag uint64, v int64) []byte {
	if v == 0 {
		return b
	}
	b = binary.AppendUvarint(b, tag)
	return binary.AppendVarint(b, v)
}

func appendBytesField(b []byte, tag uint64, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = binary.AppendUvarint(b, tag)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendStringField(b []byte, tag uint64, v string) []byte {
	if v == "" {
		return b
	}
	b = binary.AppendUvarint(b, tag)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// appendRecordBody appends the encoding of r without its Data; the caller
// adds the header (headerScratch.append, redacting) and fData or
// fSkeleton. r.URL must be redacted already.
func appendRecordBody(b []byte, r *Record) []byte {
	var flags byte
	if r.Internal {
		flags |= flagInternal
	}
	if r.Stream {
		flags |= flagStream
	}
	b = append(b, byte(r.Kind), flags)
	b = appendStringField(b, fCall, r.Call)
	b = appendStringField(b, fParent, r.Parent)
	b = appendStringField(b, fPurpose, r.Purpose)
	b = appendStringField(b, fConv, r.Conversation)
	b = appendVarintField(b, fSeq, int64(r.Seq))
	if !r.Time.IsZero() {
		b = appendVarintField(b, fTime, r.Time.UnixNano())
	}
	b = appendVarintField(b, fOffset, int64(r.Offset))
	if r.Where != DefaultWhere {
		b = appendStringField(b, fWhere, r.Where)
	}
	b = appendStringField(b, fRoute, r.Route)
	b = appendStringField(b, fModel, r.Model)
	b = appendStringField(b, fMethod, r.Method)
	b = appendStringField(b, fURL, r.URL)
	b = appendVarintField(b, fStatus, int64(r.Status))
	b = appendVarintField(b, fShaped, int64(r.ReasoningShaped))
	b = appendVarintField(b, fRaw, int64(r.ReasoningRaw))
	b = appendStringField(b, fOutcome, r.Outcome)
	b = appendVarintField(b, fBytes, r.Bytes)
	b = appendVarintField(b, fEvents, int64(r.Events))
	b = appendBytesField(b, fUsage, r.Usage)
	b = appendStringField(b, fErr, r.Err)
	return appendVarintField(b, fDropped, r.DroppedCount)
}

// headerScratch is what encoding a header (a bytes field of name, count,
// values...) needs besides the output, kept
// by the writer so that a record's header costs no allocation.
type headerScratch struct {
	names []string
	nvals []int
	vals  []string
}

// append appends h as the header field, each value passed through value
// when it is set (the writer's redaction). The field's length is known
// before it is written: no buffer of its own.
func (sc *headerScratch) append(b []byte, h http.Header, value func(name, v string) string) []byte {
	sc.names, sc.nvals, sc.vals = sc.names[:0], sc.nvals[:0], sc.vals[:0]
	n := 0
	for name, vals := range h {
		sc.names = append(sc.names, name)
		sc.nvals = append(sc.nvals, len(vals))
		n += uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(vals)))
		for _, v := range vals {
			if value != nil {
				v = value(name, v)
			}
			sc.vals = append(sc.vals, v)
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	if n == 0 {
		return b
	}
	b = binary.AppendUvarint(b, fHeader)
	b = binary.AppendUvarint(b, uint64(n))
	vals := sc.vals
	for i, name := range sc.names {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(sc.nvals[i]))
		for _, v := range vals[:sc.nvals[i]] {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
		vals = vals[sc.nvals[i]:]
	}
	return b
}

var errBadRecord = errors.New("capture: malformed record")

// decoded is a record body as stored: Data is either the body or, for a
// deduplicated request, nil with Skeleton set. Byte slices alias the frame.
type decoded struct {
	Record
	Skeleton []byte
	Hash     []byte
}

// decodeRecord parses a record body. Byte slices in the result alias b.
func decodeRecord(b []byte) (decoded, error) {
	var d decoded
	if len(b) < 2 {
		return d, errBadRecord
	}
	d.Kind = Kind(b[0])
	d.Internal = b[1]&flagInternal != 0
	d.Stream = b[1]&flagStream != 0
	d.Where = DefaultWhere
	b = b[2:]
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return d, errBadRecord
		}
		b = b[n:]
		var err error
		switch tag & 7 {
		case wtVarint:
			var v int64
			if v, n = binary.Varint(b); n <= 0 {
				return d, errBadRecord
			}
			b = b[n:]
			d.setVarint(tag, v)
		case wtBytes:
			var v []byte
			if v, b, err = readBytes(b); err != nil {
				return d, err
			}
			err = d.setBytes(tag, v)
		default:
			return d, errBadRecord
		}
		if err != nil {
			return d, err
		}
	}
	return d, nil
}

func readBytes(b []byte) (v, rest []byte, err error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return nil, nil, errBadRecord
	}
	end := n + int(l)
	return b[n:end:end], b[end:], nil
}

func (d *decoded) setVarint(tag uint64, v int64) {
	switch tag {
	case fSeq:
		d.Seq = int(v)
	case fTime:
		d.Time = time.Unix(0, v)
	case fOffset:
		d.Offset = time.Duration(v)
	case fStatus:
		d.Status = int(v)
	case fShaped:
		d.ReasoningShaped = int(v)
	case fRaw:
		d.ReasoningRaw = int(v)
	case fBytes:
		d.Bytes = v
	case fEvents:
		d.Events = int(v)
	case fDropped:
		d.DroppedCount = v
	}
}

func (d *decoded) setBytes(tag uint64, v []byte) error {
	switch tag {
	case fCall:
		d.Call = string(v)
	case fParent:
		d.Parent = string(v)
	case fPurpose:
		d.Purpose = string(v)
	case fConv:
		d.Conversation = string(v)
	case fWhere:
		d.Where = string(v)
	case fRoute:
		d.Route = string(v)
	case fModel:
		d.Model = string(v)
	case fMethod:
		d.Method = string(v)
	case fURL:
		d.URL = string(v)
	case fHeader:
		h, err := decodeHeader(v)
		d.Header = h
		return err
	case fData:
		d.Data = v
	case fOutcome:
		d.Outcome = string(v)
	case fUsage:
		d.Usage = v
	case fErr:
		d.Err = string(v)
	case fSkeleton:
		d.Skeleton = v
	case fHash:
		d.Hash = v
	}
	return nil
}

func decodeHeader(b []byte) (http.Header, error) {
	h := http.Header{}
	for len(b) > 0 {
		name, rest, err := readBytes(b)
		if err != nil {
			return h, err
		}
		count, n := binary.Uvarint(rest)
		if n <= 0 || count > uint64(len(rest)) {
			return h, errBadRecord
		}
		b = rest[n:]
		vals := make([]string, 0, count)
		for range count {
			var v []byte
			if v, b, err = readBytes(b); err != nil {
				return h, err
			}
			vals = append(vals, string(v))
		}
		h[string(name)] = vals
	}
	return h, nil
}
