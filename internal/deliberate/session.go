package deliberate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/review"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
)

// joint joins the model's steps in the one message the client sees: no
// visible separator, a blank line between two texts.
var joint = review.Joint{Content: "\n\n", Reasoning: "\n\n"}

// maxRounds bounds the continuations of one response: a continuation that
// calls deliberate again is told it already ran and goes on once more.
const maxRounds = 3

// maxDraft bounds the stream data a session assembles.
const maxDraft = 32 << 20

// session follows one response to a request that got the tool.
type session struct {
	d       *Deliberator
	call    *proxy.Call
	asm     *conv.Assembler
	first   []byte // the response's first chunk (ids for the continuation)
	holding bool
	idx     int // the deliberate call's index in the stream
}

// Hold holds the stream from the first fragment of a deliberate call on.
func (s *session) Hold(ev *sse.Event) bool {
	if ev.HasData && !ev.IsDone() {
		if s.first == nil {
			s.first = bytes.Clone(ev.Data)
		}
		_ = s.asm.AddChunk(ev.Data)
		if !s.holding {
			s.idx, s.holding = startsCall(ev.Data)
		}
	}
	return s.holding
}

// assemble adds the held events after the first (the proxy asks Hold
// only until it holds) to the response.
func (s *session) assemble(held [][]byte) {
	for _, raw := range held[min(1, len(held)):] {
		rd := sse.NewReader(bytes.NewReader(raw))
		for {
			ev, err := rd.Next()
			if ev.HasData && !ev.IsDone() {
				_ = s.asm.AddChunk(ev.Data)
			}
			if err != nil {
				break
			}
		}
	}
}

// step is one response of the model: its choice and its deliberate call.
type step struct {
	choice conv.Choice
	call   conv.ToolCall
	others []conv.ToolCall // the client's calls beside it
}

// split finds the deliberate call of a response (one choice).
func split(r conv.Response) (step, bool) {
	if len(r.Choices) != 1 {
		return step{}, false
	}
	st := step{choice: r.Choices[0]}
	found := false
	for _, c := range st.choice.ToolCalls {
		if c.Name == ToolName && !found {
			st.call, found = c, true
		} else {
			st.others = append(st.others, c)
		}
	}
	return st, found
}

// End takes the deliberate call out of a streamed response: beside the
// client's calls, the client gets its calls and the branches run in the
// background; alone, the branches run now and the model's continuation
// streams into the same response.
func (s *session) End(ctx context.Context, held [][]byte, out *proxy.EventWriter) error {
	if !s.holding { // another finisher held this response
		return nil
	}
	s.assemble(held)
	if s.asm.Over() {
		return fmt.Errorf("%w: the response was too long to read its deliberate call", proxy.ErrAbandon)
	}
	st, ok := split(s.asm.Response())
	if !ok {
		return writeStripped(out, held, s.idx)
	}
	if len(st.others) > 0 {
		if err := writeStripped(out, held, s.idx); err != nil {
			return err
		}
		s.beside(st)
		return nil
	}
	stop := out.KeepAlive(s.d.cfg.KeepAlive, "shaperproxy: deliberation in progress")
	defer stop() // a panic below must not leave the keep-alives beating
	if err := s.aloneStream(ctx, st, out, stop); err != nil {
		// The client cannot get the held call (a tool it never declared),
		// nor the turn without it (a tool-calls turn with no call), nor a
		// continuation cut short as if whole: the proxy cuts the stream,
		// which the client reads as the failure it is (and logs it).
		return fmt.Errorf("%w: %w", proxy.ErrAbandon, err)
	}
	return nil
}

// Releasable reports whether the held events may go out as they came:
// not once they hold a deliberate call (proxy.Withholder).
func (s *session) Releasable() bool { return !s.holding }

// writeStripped writes the held events with the deliberate call removed.
func writeStripped(out *proxy.EventWriter, held [][]byte, idx int) error {
	for _, raw := range held {
		b := raw
		ev, err := sse.NewReader(bytes.NewReader(raw)).Next()
		if (err == nil || errors.Is(err, io.EOF)) && ev.HasData && !ev.IsDone() {
			if data, werr := withoutCall(ev.Data, idx); werr == nil {
				b = append(append([]byte("data: "), data...), '\n', '\n')
			}
		}
		if err := out.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// beside runs a deliberate call made beside the client's calls in the
// background, and records the model's message and the result for the
// conversation's next request (which waits for it).
func (s *session) beside(st step) {
	view, call := s.call.View, s.call
	model := review.DraftOf(st.choice).Message()
	key := messageKey(st.choice.Content, st.others)
	a, err := parseArgs(st.call.Arguments, s.d.cfg.StrongModel != "")
	finish := func(result []byte, outs []outcome, mode string, argErr error) {
		r := record{Before: [][]byte{model, toolResult(st.call.ID, result)}}
		if err := s.d.store.put(call.Conversation, key, r); err != nil {
			s.d.log.Warn("deliberation not recorded", "call", call.ID, "err", err)
		}
		s.d.note(call, st.call.ID, mode, outs, argErr)
	}
	if err != nil {
		finish(errorResult(err), nil, "invalid", err)
		return
	}
	// The branches read the call's view after the call ended: its bodies
	// are held until they are done (proxy.Call.Hold).
	hold := call.Hold()
	if !s.d.background(call.Conversation, func(ctx context.Context) {
		defer hold.Release()
		outs := s.d.runBranches(ctx, call, view, a)
		finish(resultJSON(outs), outs, "mixed", nil)
	}) {
		hold.Release()
		finish(errorResult(errBusy), nil, "busy", errBusy)
	}
}

// answer returns the tool result of a deliberate call made alone: the
// branches' outcomes (round 0), or a refusal (a later round of the same
// response).
func (s *session) answer(ctx context.Context, c conv.ToolCall, round int) []byte {
	if round > 0 {
		err := errors.New("deliberate already ran for this step; decide with what you have")
		s.d.note(s.call, c.ID, "invalid", nil, err)
		return errorResult(err)
	}
	a, err := parseArgs(c.Arguments, s.d.cfg.StrongModel != "")
	if err != nil {
		s.d.note(s.call, c.ID, "invalid", nil, err)
		return errorResult(err)
	}
	outs := s.d.runBranches(ctx, s.call, s.call.View, a)
	s.d.note(s.call, c.ID, "alone", outs, nil)
	return resultJSON(outs)
}

// runBranches runs a call's branches and marks the turn reviewed when a
// masked-review branch ran (the automatic review then skips it).
func (d *Deliberator) runBranches(ctx context.Context, call *proxy.Call, view *conv.Request, a Args) []outcome {
	outs := run(ctx, view, a, d.cfg, sendVia(call, "deliberate-branch"))
	for _, o := range outs {
		if o.Branch.Role == RoleMasked && o.Child != "" {
			if key := conv.TurnKey(view, call.Conversation); key != "" {
				_, _ = d.store.l.MarkReviewed(call.Conversation, key)
			}
			break
		}
	}
	return outs
}

// aloneStream answers a deliberate call made alone and streams the
// model's continuation into the response, round after round while the
// continuation calls deliberate again. stop ends the keep-alives once the
// continuation streams.
func (s *session) aloneStream(ctx context.Context, st step, out *proxy.EventWriter, stop func()) error {
	shown := visible(st.choice)
	usage := s.asm.Response().Usage
	var before [][]byte
	for round := 0; round < maxRounds; round++ {
		result := s.answer(ctx, st.call, round)
		if ctx.Err() != nil { // the client left: no continuation
			return ctx.Err()
		}
		before = append(before, review.DraftOf(st.choice).Message(), toolResult(st.call.ID, result))
		body := review.AppendMessages(s.call.View, before...)
		next, err := s.continueStream(ctx, body, shown, usage, out, stop)
		if errors.Is(err, errTooLong) { // it went out whole, unread: nothing to record
			s.d.log.Warn("the deliberation's continuation was too long to record", "call", s.call.ID)
			return nil
		}
		if err != nil {
			return err
		}
		if len(next.Choices) != 1 {
			return fmt.Errorf("continuation with %d choices", len(next.Choices))
		}
		again, ok := split(next)
		if !ok { // the model went on without deliberating: done
			final := review.DraftOf(next.Choices[0])
			content := joint.Contents(shown.Content, final.Content)
			// It went out whole: a failure to record it is no reason to cut it.
			if err := s.record(content, final, before); err != nil {
				s.d.log.Warn("the deliberation went out but was not recorded", "call", s.call.ID, "err", err)
			}
			return nil
		}
		cont := visible(again.choice)
		shown = review.Draft{ReasoningField: shown.ReasoningField, Reasoning: joinReasoning(shown.Reasoning, cont.Reasoning), Content: joint.Contents(shown.Content, cont.Content)}
		usage, st = summed(usage, next.Usage), again
	}
	return errors.New("deliberate: the model kept calling deliberate")
}

// errTooLong: a continuation streamed whole to the client was longer than
// the proxy assembles (maxDraft), so it was not read.
var errTooLong = errors.New("continuation longer than the proxy reads")

// continueStream sends one continuation and streams it to the client
// after what it has seen (shown), until the continuation ends or starts a
// deliberate call (held back: the next round answers it). What it
// assembles is bounded by maxDraft: a longer continuation streams on
// unread and ends with errTooLong, unless it started a deliberate call,
// which then cannot be answered.
func (s *session) continueStream(ctx context.Context, body []byte, shown review.Draft, usage []byte, out *proxy.EventWriter, stop func()) (conv.Response, error) {
	resp, _, err := s.call.Do(ctx, "deliberate-continuation", body)
	if err != nil {
		return conv.Response{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return conv.Response{}, fmt.Errorf("continuation: upstream answered %d", resp.StatusCode)
	}
	merger, err := review.NewStreamMerger(s.first, shown, joint)
	if err != nil {
		return conv.Response{}, err
	}
	merger.DraftUsage = usage
	asm, rd := conv.NewBoundedAssembler(maxDraft), sse.NewReader(resp.Body)
	holding := false
	for {
		ev, rerr := rd.Next()
		if ev.Truncated { // the client must not get half an event: give up as if cut
			return conv.Response{}, errors.New("continuation event over the size limit")
		}
		if ev.HasData && !ev.IsDone() {
			_ = asm.AddChunk(ev.Data)
			if !holding {
				_, holding = startsCall(ev.Data)
			}
		}
		if len(ev.Raw) > 0 && !ev.Partial && !holding {
			if b, merr := merger.Next(ev.Raw); merr == nil && len(b) > 0 {
				stop()
				if out.Write(b) != nil {
					return conv.Response{}, ctx.Err()
				}
			}
		}
		if rerr != nil {
			switch {
			case !errors.Is(rerr, io.EOF) || rd.Truncated():
				return conv.Response{}, fmt.Errorf("continuation cut: %w", rerr)
			case asm.Over() && holding:
				return conv.Response{}, errors.New("continuation too long to answer its deliberate call")
			case asm.Over():
				return conv.Response{}, errTooLong
			}
			return asm.Response(), nil
		}
	}
}

// record keeps what the client did not see, keyed by the message it gets.
func (s *session) record(content string, final review.Draft, before [][]byte) error {
	r := record{Before: before, Final: final.Message()}
	return s.d.store.put(s.call.Conversation, messageKey(content, final.ToolCalls), r)
}

// EndBody is End for a non-streamed response.
func (s *session) EndBody(ctx context.Context, body []byte, keepAlive proxy.KeepAlive) ([]byte, error) {
	if err := s.asm.AddBody(body); err != nil {
		return body, nil
	}
	st, ok := split(s.asm.Response())
	if !ok {
		return body, nil
	}
	if len(st.others) > 0 {
		s.beside(st)
		return bodyWithoutCall(body, st.call.ID)
	}
	stop := keepAlive(s.d.cfg.KeepAlive)
	defer stop()
	merged, err := s.aloneBody(ctx, st, body)
	if err != nil {
		// As in End: neither the call nor a tool-calls turn without it
		// (the proxy logs the failure).
		return nil, fmt.Errorf("%w: %w", proxy.ErrAbandon, err)
	}
	return merged, nil
}

// aloneBody is aloneStream for a non-streamed response: each continuation
// body is merged into the response (review.MergeBodies).
func (s *session) aloneBody(ctx context.Context, st step, body []byte) ([]byte, error) {
	merged := body
	var before [][]byte
	for round := 0; round < maxRounds; round++ {
		result := s.answer(ctx, st.call, round)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		before = append(before, review.DraftOf(st.choice).Message(), toolResult(st.call.ID, result))
		contBody, _, err := sendVia(s.call, "deliberate-continuation")(ctx, review.AppendMessages(s.call.View, before...))
		if err != nil {
			return nil, err
		}
		if merged, err = review.MergeBodies(merged, contBody, joint); err != nil {
			return nil, err
		}
		asm := conv.NewAssembler()
		if err := asm.AddBody(contBody); err != nil {
			return nil, err
		}
		if n := len(asm.Response().Choices); n != 1 {
			return nil, fmt.Errorf("continuation with %d choices", n)
		}
		again, ok := split(asm.Response())
		if !ok {
			final := review.DraftOf(asm.Response().Choices[0])
			all := conv.NewAssembler()
			if err := all.AddBody(merged); err != nil || len(all.Response().Choices) == 0 {
				return nil, fmt.Errorf("the merged answer does not read back: %v", err)
			}
			if err := s.record(all.Response().Choices[0].Content, final, before); err != nil {
				s.d.log.Warn("the deliberation went out but was not recorded", "call", s.call.ID, "err", err)
			}
			return merged, nil
		}
		st = again
	}
	return nil, errors.New("deliberate: the model kept calling deliberate")
}

// visible is what the client got of a step: its reasoning and content.
func visible(c conv.Choice) review.Draft {
	return review.Draft{ReasoningField: c.ReasoningField, Reasoning: c.Reasoning, Content: c.Content}
}

func joinReasoning(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + joint.Reasoning + b
}

// summed adds two usage objects (either may be nil).
func summed(a, b []byte) []byte {
	if len(a) == 0 {
		return b
	}
	if len(b) == 0 {
		return a
	}
	s, err := review.SumUsage(a, b)
	if err != nil {
		return b
	}
	return s
}
