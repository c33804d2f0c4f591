package deliberate

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/review"
	"github.com/tidwall/gjson"
)

// sender sends one child request and returns the body of its answer and
// the child's call id.
type sender func(ctx context.Context, body []byte) (answer []byte, callID string, err error)

// outcome is what one branch gave.
type outcome struct {
	Branch    Branch
	Requested int // masked-review: K asked
	Projected int // masked-review: K shown
	Packet    *review.Packet
	Err       string // a short, safe diagnostic; "" on success
	Child     string // the child's call id
	Took      time.Duration
	Usage     gjson.Result // the child's usage object, when it answered
}

// run builds and runs the branches of a call in parallel, each with its
// own deadline, and returns their outcomes in the order asked. A branch
// that fails gives a short diagnostic; the others still return.
func run(ctx context.Context, primary *conv.Request, a Args, c Config, send sender) []outcome {
	out := make([]outcome, len(a.Branches))
	var wg sync.WaitGroup
	for i, b := range a.Branches {
		model := ""
		if b.Strong {
			model = c.StrongModel
		}
		ch, err := buildChild(primary, a, b, model, c.MaxSnapshotChars)
		out[i] = outcome{Branch: b, Requested: ch.Requested, Projected: ch.Projected}
		if err != nil {
			out[i].Err = err.Error()
			continue
		}
		wg.Add(1)
		go func(o *outcome, body []byte) {
			defer wg.Done()
			bctx, cancel := context.WithTimeout(ctx, c.BranchTimeout)
			defer cancel()
			o.runOne(bctx, body, send)
		}(&out[i], ch.Body)
	}
	wg.Wait()
	return out
}

// runOne sends one child and validates its packet.
func (o *outcome) runOne(ctx context.Context, body []byte, send sender) {
	start := time.Now()
	answer, id, err := send(ctx, body)
	o.Child, o.Took = id, time.Since(start)
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		o.Err = "the branch timed out"
		return
	case ctx.Err() != nil:
		o.Err = "the branch was cancelled"
		return
	case err != nil:
		o.Err = "the branch's model call failed"
		return
	}
	o.Usage = gjson.GetBytes(answer, "usage")
	p, err := review.ParsePacketAs(answer, string(o.Branch.Role))
	if err != nil {
		o.Err = "the branch did not answer with a valid packet"
		return
	}
	o.Packet = &p
}

// resultJSON is the tool result the model reads: one JSON object with each
// branch's packet or diagnostic, in the order asked (seed 003 §10: the
// primary gets the packets, not a summary of them).
func resultJSON(outs []outcome) []byte {
	type branchJSON struct {
		Role      Role          `json:"role"`
		Requested *int          `json:"requested_steps,omitempty"` // masked-review only
		Projected *int          `json:"projected_steps,omitempty"`
		Status    string        `json:"status,omitempty"`
		Items     []review.Item `json:"items,omitempty"`
		Error     string        `json:"error,omitempty"`
	}
	res := struct {
		Branches []branchJSON `json:"branches"`
	}{}
	for _, o := range outs {
		b := branchJSON{Role: o.Branch.Role, Error: o.Err}
		if o.Branch.Role == RoleMasked {
			b.Requested, b.Projected = &o.Requested, &o.Projected
		}
		if o.Packet != nil {
			b.Status, b.Items = o.Packet.Status, o.Packet.Items
		}
		res.Branches = append(res.Branches, b)
	}
	out, _ := json.Marshal(res)
	return out
}

// errorResult is the tool result for arguments that could not be used.
func errorResult(err error) []byte {
	out, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{"deliberate was not run: " + err.Error() + ". Fix the arguments and call it again, or go on without it."})
	return out
}
