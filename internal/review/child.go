package review

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Mask says what of the open turn the child does not see.
type Mask string

// The masks.
const (
	// MaskReasoningOnly hides the reasoning of the open turn and keeps the
	// actor's visible text (labelled as its claims). The default.
	MaskReasoningOnly Mask = "reasoning-only"
	// MaskActionOnly also hides the actor's visible text (and its images):
	// the child sees inputs, tool calls and results only. A stronger
	// intervention, meant for evaluation.
	MaskActionOnly Mask = "action-only"
)

// Format is the response_format the child asks for.
type Format string

// The formats.
const (
	// FormatJSONObject sets {"type":"json_object"} (DeepSeek supports only
	// this one). The default.
	FormatJSONObject Format = "json_object"
	// FormatJSONSchema sets an OpenAI-style strict json_schema named
	// "masked_review".
	FormatJSONSchema Format = "json_schema"
	// FormatNone sets no response_format (and removes the primary's): the
	// task text alone asks for JSON.
	FormatNone Format = "none"
)

// Limits of the snapshot.
const (
	defaultMaxSnapshotChars = 65536
	defaultMaxImages        = 20
)

// Reasons of a SkipError.
const (
	skipNoTurn        = "no-turn"        // the request has no user message
	skipOversize      = "oversize"       // the snapshot exceeds MaxSnapshotChars
	skipImages        = "images"         // the snapshot references more than MaxImages images
	skipDuplicateKeys = "duplicate-keys" // the primary repeats a key; path edits would be ambiguous
)

// removedKeys are the primary's top-level keys the child never carries:
// the child is a one-shot, non-streamed call (tools stay with KeepTools,
// which the Reviewer sets).
var removedKeys = []string{"tools", "tool_choice", "parallel_tool_calls", "stream_options", "n", "functions", "function_call"}

// childOptions configure BuildChild. The zero value is the automatic
// review: reasoning-only, json_object, the primary's model, default limits.
type childOptions struct {
	// Mask is MaskReasoningOnly ("" means it) or MaskActionOnly.
	Mask Mask
	// ResponseFormat is FormatJSONObject ("" means it), FormatJSONSchema
	// or FormatNone.
	ResponseFormat Format
	// Model, when set, replaces the primary's "model".
	Model string
	// MaxSnapshotChars bounds the snapshot in characters; 0 means
	// DefaultMaxSnapshotChars. A larger snapshot skips the review whole:
	// it is never truncated.
	MaxSnapshotChars int
	// MaxImages bounds the images the snapshot references; 0 means
	// DefaultMaxImages.
	MaxImages int
	// KeepTools keeps the primary's "tools" (tool_choice and the rest are
	// still removed). Upstreams that render tools at the head of the prompt
	// (DeepSeek does) then hit their prefix cache for the whole seed; the
	// child may still try a tool call, which ParsePacket rejects.
	KeepTools bool
	// ToolChoice, with KeepTools, is the child's tool_choice when the
	// primary has tools ("" sends none; "none" where the upstream accepts
	// it and still renders the tools, see profile.Profile.ChildToolChoice).
	ToolChoice string
}

func (o childOptions) withDefaults() (childOptions, error) {
	if o.Mask == "" {
		o.Mask = MaskReasoningOnly
	}
	if o.ResponseFormat == "" {
		o.ResponseFormat = FormatJSONObject
	}
	if o.MaxSnapshotChars <= 0 {
		o.MaxSnapshotChars = defaultMaxSnapshotChars
	}
	if o.MaxImages <= 0 {
		o.MaxImages = defaultMaxImages
	}
	if err := o.Mask.validate(); err != nil {
		return o, err
	}
	return o, o.ResponseFormat.validate()
}

// skipError reports that no review should run for this request (not a
// failure): see the Skip* reasons.
type skipError struct {
	Reason string // one of the Skip* constants
	Detail string
}

func (e *skipError) Error() string {
	return "review: skipped (" + e.Reason + "): " + e.Detail
}

// skipReason returns the reason of a SkipError in err's chain.
func skipReason(err error) (string, bool) {
	var s *skipError
	if errors.As(err, &s) {
		return s.Reason, true
	}
	return "", false
}

// child is the request of one masked review.
type child struct {
	// Body is the child's chat completions request (non-streamed).
	Body  []byte
	Stats childStats
}

// childStats describe a Child, for metrics and the benchmark.
type childStats struct {
	SeedMessages    int // messages copied byte for byte (those before the open turn)
	SeedBytes       int // bytes of the messages array copied verbatim ("[" to the last seed message)
	SnapshotChars   int // characters of the snapshot (markers included, task excluded)
	Images          int // image references in the snapshot
	ReasoningMasked int // reasoning blocks of the open turn (draft included) left out
	ProseMasked     int // visible texts left out (action-only)
	ChildBytes      int // len(Body)
	PrimaryBytes    int // len(primary.Body)
}

// buildChild builds the masked-review request for the turn primary is
// about to end with draft (the mid-fork):
//
//   - the messages before the open turn, byte for byte with their
//     separators, so the upstream's prompt cache applies to them;
//   - then one user message: Task, then the snapshot of the open turn
//     (inputs labelled by source, the actor's visible text as its claims,
//     tool calls with arguments, tool results, the draft as the last step;
//     no reasoning; see ChildOptions.Mask);
//   - the primary's other top-level keys, minus tools, tool_choice,
//     parallel_tool_calls, stream_options, n, functions and function_call;
//     "stream": false; response_format per opts; model per opts.
//
// It returns a *SkipError when the review should not run (no user
// message, a repeated key, a snapshot over the limits) and another error
// for invalid options. primary.Body is not modified.
func buildChild(primary *conv.Request, draft Draft, opts childOptions) (child, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return child{}, err
	}
	if primary.DuplicateKeys {
		return child{}, &skipError{Reason: skipDuplicateKeys, Detail: "the request repeats a key"}
	}
	t, ok := primary.OpenTurn()
	if !ok {
		return child{}, &skipError{Reason: skipNoTurn, Detail: "the request has no user message"}
	}
	snap := project(primary, t, draft, opts.Mask == MaskActionOnly)
	if err := checkLimits(snap, opts); err != nil {
		return child{}, err
	}
	start, end := arrayBounds(primary)
	seed := seedBytes(primary, t.Start, start)
	arr := messagesArray(seed, t.Start > 0, userMessage(task+"\n\n"+snap.text))
	body, err := childBody(primary.Body, start, end, arr, opts)
	if err != nil {
		return child{}, err
	}
	return child{Body: body, Stats: childStats{
		SeedMessages: t.Start, SeedBytes: len(seed),
		SnapshotChars: snap.chars, Images: snap.images,
		ReasoningMasked: snap.reasoningMasked, ProseMasked: snap.proseMasked,
		ChildBytes: len(body), PrimaryBytes: len(primary.Body),
	}}, nil
}

// checkLimits skips a snapshot over the size or image limit.
func checkLimits(s snapshot, opts childOptions) error {
	if s.chars > opts.MaxSnapshotChars {
		return &skipError{Reason: skipOversize, Detail: fmt.Sprintf("snapshot of %d characters (max %d)", s.chars, opts.MaxSnapshotChars)}
	}
	if s.images > opts.MaxImages {
		return &skipError{Reason: skipImages, Detail: fmt.Sprintf("snapshot with %d images (max %d)", s.images, opts.MaxImages)}
	}
	return nil
}

// arrayBounds returns the offsets of the messages array of req: its "["
// and one past its "]". req has at least one message (it has a turn).
func arrayBounds(req *conv.Request) (start, end int) {
	first, last := req.Messages[0].Start, req.Messages[len(req.Messages)-1].End
	start = bytes.LastIndexByte(req.Body[:first], '[')
	end = last + bytes.IndexByte(req.Body[last:], ']') + 1
	return start, end
}

// seedBytes returns the raw bytes of the messages array from its "[" (at
// start) up to the end of message upTo-1, or up to the first message when
// upTo is 0.
func seedBytes(req *conv.Request, upTo, start int) []byte {
	end := req.Messages[0].Start
	if upTo > 0 {
		end = req.Messages[upTo-1].End
	}
	return req.Body[start:end]
}

// ChildRequest builds a one-shot child request from primary, as the
// review's child is built (the deliberate tool's branches use it): the
// messages of primary before index upTo byte for byte with their
// separators (none when upTo is 0), then one user message holding text;
// primary's other top-level keys without tools, tool_choice and the other
// keys a one-shot call has no use for, not streamed, response_format
// json_object, and model when it is not "".
func ChildRequest(primary *conv.Request, upTo int, text, model string) ([]byte, error) {
	if primary.DuplicateKeys || len(primary.Messages) == 0 || upTo < 0 || upTo > len(primary.Messages) {
		return nil, errors.New("review: no child request for this primary (a repeated key, no messages or a bad cut)")
	}
	opts, err := childOptions{Model: model}.withDefaults()
	if err != nil {
		return nil, err
	}
	start, end := arrayBounds(primary)
	arr := messagesArray(seedBytes(primary, upTo, start), upTo > 0, userMessage(text))
	return childBody(primary.Body, start, end, arr, opts)
}

// userMessage returns {"role":"user","content":text}.
func userMessage(text string) []byte {
	return append(appendString([]byte(`{"role":"user","content":`), text), '}')
}

// messagesArray returns the child's messages: seed, a comma when the seed
// holds messages, msg and the closing bracket.
func messagesArray(seed []byte, comma bool, msg []byte) []byte {
	arr := make([]byte, 0, len(seed)+len(msg)+2)
	arr = append(arr, seed...)
	if comma {
		arr = append(arr, ',')
	}
	return append(append(arr, msg...), ']')
}

// childBody builds the child's body: the primary's top-level keys edited
// (on a copy whose messages array, primary[start:end], is left out, so no
// edit scans the history), then arr spliced in as the messages.
func childBody(primary []byte, start, end int, arr []byte, opts childOptions) ([]byte, error) {
	shell := make([]byte, 0, len(primary)-(end-start)+2)
	shell = append(append(append(shell, primary[:start]...), "[]"...), primary[end:]...)
	var err error
	for _, k := range removedKeys {
		if k == "tools" && opts.KeepTools {
			continue
		}
		if shell, err = deleteKey(shell, k); err != nil {
			return nil, err
		}
	}
	if opts.KeepTools && opts.ToolChoice != "" && gjson.GetBytes(shell, "tools").Exists() {
		if shell, err = sjson.SetRawBytes(shell, "tool_choice", quote(opts.ToolChoice)); err != nil {
			return nil, fmt.Errorf("review: child tool_choice: %w", err)
		}
	}
	if shell, err = setChildKeys(shell, opts); err != nil {
		return nil, err
	}
	at := gjson.GetBytes(shell, "messages").Index
	body := make([]byte, 0, len(shell)+len(arr))
	return append(append(append(body, shell[:at]...), arr...), shell[at+2:]...), nil
}

// setChildKeys sets stream, response_format and model.
func setChildKeys(body []byte, opts childOptions) ([]byte, error) {
	body, err := sjson.SetRawBytes(body, "stream", []byte("false"))
	if err != nil {
		return nil, fmt.Errorf("review: child stream: %w", err)
	}
	if rf := responseFormat(opts.ResponseFormat); rf != nil {
		body, err = sjson.SetRawBytes(body, "response_format", rf)
	} else {
		body, err = deleteKey(body, "response_format")
	}
	if err != nil {
		return nil, fmt.Errorf("review: child response_format: %w", err)
	}
	if opts.Model != "" {
		if body, err = sjson.SetRawBytes(body, "model", quote(opts.Model)); err != nil {
			return nil, fmt.Errorf("review: child model: %w", err)
		}
	}
	return body, nil
}

// deleteKey removes top-level key k when present.
func deleteKey(body []byte, k string) ([]byte, error) {
	if !gjson.GetBytes(body, pathEscape(k)).Exists() {
		return body, nil
	}
	out, err := sjson.DeleteBytes(body, pathEscape(k))
	if err != nil {
		return nil, fmt.Errorf("review: delete %s: %w", k, err)
	}
	return out, nil
}
