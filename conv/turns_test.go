package conv

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
)

func TestTurnsDeepSeekMultiturn(t *testing.T) {
	tests := []struct {
		turns     []Turn
		startsNew bool
	}{
		{[]Turn{{Ordinal: 1, Start: 2, End: 3, Inputs: []int{2}}}, true},
		{[]Turn{{Ordinal: 1, Start: 2, End: 7, Inputs: []int{2}, Steps: []Step{
			{Assistant: 3, ToolResults: []int{4}},
			{Assistant: 5, ToolResults: []int{6}},
		}}}, false},
		{[]Turn{{Ordinal: 1, Start: 2, End: 10, Inputs: []int{2}, Steps: []Step{
			{Assistant: 3, ToolResults: []int{4}},
			{Assistant: 5, ToolResults: []int{6}},
			{Assistant: 7, ToolResults: []int{8, 9}},
		}}}, false},
	}
	for i, tt := range tests {
		r, err := ParseRequest(readTestdata(t, multiturn[i]))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Turns(); !reflect.DeepEqual(got, tt.turns) {
			t.Errorf("request %d: Turns = %+v, want %+v", i+1, got, tt.turns)
		}
		open, ok := r.OpenTurn()
		if !ok || !reflect.DeepEqual(open, tt.turns[len(tt.turns)-1]) {
			t.Errorf("request %d: OpenTurn = %+v, %v", i+1, open, ok)
		}
		if got := r.StartsNewTurn(); got != tt.startsNew {
			t.Errorf("request %d: StartsNewTurn = %v, want %v", i+1, got, tt.startsNew)
		}
		if r.ToolCallsPending() {
			t.Errorf("request %d: ToolCallsPending = true, all calls are answered", i+1)
		}
	}
}

func TestTurnRules(t *testing.T) {
	tests := []struct {
		name      string
		msgs      []string
		turns     []Turn
		startsNew bool
		pending   bool
	}{
		{
			name: "prelude only",
			msgs: []string{"system", "developer"},
		},
		{
			name: "assistant in prelude belongs to no turn",
			msgs: []string{"system", "assistant", "user"},
			turns: []Turn{
				{Ordinal: 1, Start: 2, End: 3, Inputs: []int{2}},
			},
			startsNew: true,
		},
		{
			name: "first user message",
			msgs: []string{"system", "user"},
			turns: []Turn{
				{Ordinal: 1, Start: 1, End: 2, Inputs: []int{1}},
			},
			startsNew: true,
		},
		{
			name: "multiple turns, fresh user at the tail",
			msgs: []string{"system", "user", "assistant", "user", "assistant+c1", "tool=c1", "assistant", "user"},
			turns: []Turn{
				{Ordinal: 1, Start: 1, End: 3, Inputs: []int{1}, Steps: []Step{{Assistant: 2}}},
				{Ordinal: 2, Start: 3, End: 7, Inputs: []int{3}, Steps: []Step{
					{Assistant: 4, ToolResults: []int{5}}, {Assistant: 6},
				}},
				{Ordinal: 3, Start: 7, End: 8, Inputs: []int{7}},
			},
			startsNew: true,
		},
		{
			name: "user injected during tool loop stays in the turn",
			msgs: []string{"system", "user", "assistant+c1", "tool=c1", "user", "system", "assistant+c2", "tool=c2", "user"},
			turns: []Turn{
				{Ordinal: 1, Start: 1, End: 9, Inputs: []int{1, 4, 5, 8}, Steps: []Step{
					{Assistant: 2, ToolResults: []int{3}},
					{Assistant: 6, ToolResults: []int{7}},
				}},
			},
		},
		{
			name: "user after unanswered tool calls stays in the turn",
			msgs: []string{"user", "assistant+c1", "user"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 3, Inputs: []int{0, 2}, Steps: []Step{{Assistant: 1}}},
			},
			pending: true,
		},
		{
			name: "final answer closes the loop",
			msgs: []string{"user", "assistant+c1", "tool=c1", "user", "assistant", "user"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 5, Inputs: []int{0, 3}, Steps: []Step{
					{Assistant: 1, ToolResults: []int{2}}, {Assistant: 4},
				}},
				{Ordinal: 2, Start: 5, End: 6, Inputs: []int{5}},
			},
			startsNew: true,
		},
		{
			name: "parallel tool results out of order",
			msgs: []string{"user", "assistant+a+b", "tool=b", "tool=a"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 4, Inputs: []int{0}, Steps: []Step{
					{Assistant: 1, ToolResults: []int{2, 3}},
				}},
			},
		},
		{
			name: "tool results out of order across steps",
			msgs: []string{"user", "assistant+a", "assistant+b", "tool=b", "tool=a"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 5, Inputs: []int{0}, Steps: []Step{
					{Assistant: 1, ToolResults: []int{4}},
					{Assistant: 2, ToolResults: []int{3}},
				}},
			},
		},
		{
			name: "unknown and missing tool_call_id go to the latest step",
			msgs: []string{"user", "assistant+a", "tool=zzz", "tool"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 4, Inputs: []int{0}, Steps: []Step{
					{Assistant: 1, ToolResults: []int{2, 3}},
				}},
			},
		},
		{
			name: "an empty call id is no id",
			msgs: []string{"user", "assistant+", "assistant+b", "tool"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 4, Inputs: []int{0}, Steps: []Step{
					{Assistant: 1}, {Assistant: 2, ToolResults: []int{3}},
				}},
			},
		},
		{
			name: "tool result before any step is an input",
			msgs: []string{"user", "tool=a", "assistant"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 3, Inputs: []int{0, 1}, Steps: []Step{{Assistant: 2}}},
			},
		},
		{
			name: "tool in prelude belongs to no turn",
			msgs: []string{"system", "tool=a", "user"},
			turns: []Turn{
				{Ordinal: 1, Start: 2, End: 3, Inputs: []int{2}},
			},
			startsNew: true,
		},
		{
			name: "system after closed turn stays in it",
			msgs: []string{"user", "assistant", "system"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 3, Inputs: []int{0, 2}, Steps: []Step{{Assistant: 1}}},
			},
		},
		{
			name: "partly answered parallel calls are pending",
			msgs: []string{"user", "assistant+a+b", "tool=b"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 3, Inputs: []int{0}, Steps: []Step{
					{Assistant: 1, ToolResults: []int{2}},
				}},
			},
			pending: true,
		},
		{
			name: "answered by id-less tool messages",
			msgs: []string{"user", "assistant+a+b", "tool", "tool"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 4, Inputs: []int{0}, Steps: []Step{
					{Assistant: 1, ToolResults: []int{2, 3}},
				}},
			},
		},
		{
			name: "user message right after user opens new turn",
			msgs: []string{"user", "user"},
			turns: []Turn{
				{Ordinal: 1, Start: 0, End: 1, Inputs: []int{0}},
				{Ordinal: 2, Start: 1, End: 2, Inputs: []int{1}},
			},
			startsNew: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := chat(t, tt.msgs...)
			if got := r.Turns(); !reflect.DeepEqual(got, tt.turns) {
				t.Errorf("Turns =\n%+v\nwant\n%+v", got, tt.turns)
			}
			if got := r.StartsNewTurn(); got != tt.startsNew {
				t.Errorf("StartsNewTurn = %v, want %v", got, tt.startsNew)
			}
			if got := r.ToolCallsPending(); got != tt.pending {
				t.Errorf("ToolCallsPending = %v, want %v", got, tt.pending)
			}
			_, ok := r.OpenTurn()
			if ok != (len(tt.turns) > 0) {
				t.Errorf("OpenTurn ok = %v with %d turns", ok, len(tt.turns))
			}
		})
	}
}

func TestTurnContains(t *testing.T) {
	tr := Turn{Start: 2, End: 4}
	for i, want := range []bool{false, false, true, true, false} {
		if got := tr.Contains(i); got != want {
			t.Errorf("Contains(%d) = %v, want %v", i, got, want)
		}
	}
}

func TestLastAssistant(t *testing.T) {
	if got := chat(t, "user").LastAssistant(); got != -1 {
		t.Errorf("LastAssistant = %d, want -1", got)
	}
	if got := chat(t, "user", "assistant", "user", "assistant+a", "tool=a").LastAssistant(); got != 3 {
		t.Errorf("LastAssistant = %d, want 3", got)
	}
}

// TestTurnCount: TurnCount and OpenTurnStart agree with Turns,
// StartsNewTurn and OpenTurn on random
// role sequences (tool calls, injected users, preludes) and on the seed.
func TestTurnCount(t *testing.T) {
	check := func(r *Request, what string) {
		t.Helper()
		n, starts := r.TurnCount()
		if n != len(r.Turns()) || starts != r.StartsNewTurn() {
			t.Fatalf("%s: TurnCount = (%d, %v), Turns has %d, StartsNewTurn %v", what, n, starts, len(r.Turns()), r.StartsNewTurn())
		}
		open, ok := r.OpenTurn()
		if start, sok := r.OpenTurnStart(); sok != ok || start != open.Start {
			t.Fatalf("%s: OpenTurnStart = (%d, %v), OpenTurn starts at %d (%v)", what, start, sok, open.Start, ok)
		}
	}
	specs := []string{"system", "developer", "user", "user", "assistant", "assistant", "assistant+c1", "assistant+c1+c2", "tool=c1", "tool=c2", "tool=x"}
	rng := rand.New(rand.NewPCG(1, 2))
	for k := 0; k < 2000; k++ {
		msgs := make([]string, 1+rng.IntN(9))
		for i := range msgs {
			msgs[i] = specs[rng.IntN(len(specs))]
		}
		check(chat(t, msgs...), strings.Join(msgs, ","))
	}
	seed, err := ParseRequest(fixtures.SeedHistory())
	if err != nil {
		t.Fatal(err)
	}
	check(seed, "seed")
	for _, n := range []int{0, 1, 2, 3, 10, 100, len(seed.Messages) - 1} {
		r, err := ParseRequest(truncated(t, seed, n))
		if err != nil {
			t.Fatal(err)
		}
		check(r, "seed prefix")
	}
}
