package demo

import (
	"strings"

	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
)

// The scripted conversation: a coding agent fixes a failing test in two
// user turns, with tool calls in between. The reasoning reads like a
// reasoning model's: filler, second thoughts, then a decision.

const systemPrompt = "You are a coding agent. Use the tools to read and edit files and to run the tests. Be brief."

var userTurns = []string{
	"TestParseDate fails in dates/dates.go. Find out why and fix it.",
	"Good. Now add a test for 29 February in a leap year.",
}

// replies are the upstream's answers in order, one per agent request.
var replies = []fakeupstream.Reply{
	{
		Reasoning: "Hmm, the user says TestParseDate fails. Let me think about what could be wrong. " +
			"Wait, I have not seen the code yet, so guessing is pointless. " +
			"The test probably compares a parsed time.Time with an expected value. " +
			"Maybe it is a time zone issue, or maybe the layout string is wrong. " +
			"Okay so the first thing to do is to read the file. " +
			"I'll read dates/dates.go and then run the failing test to see the actual error.",
		ToolCalls: []fakeupstream.ToolCall{{Name: "read_file", Arguments: `{"path":"dates/dates.go"}`}},
	},
	{
		Reasoning: "Hmm, the layout is \"2006-01-02\" but the input in the test is \"02/01/2006\". " +
			"Wait, let me look again. The function uses time.Parse(\"2006-02-01\", s). " +
			"That swaps month and day: 2006-02-01 means year-day-month in Go's reference time. " +
			"Hmm, so for 2024-03-05 it returns 3 May instead of 5 March. " +
			"Let me double check the reference time: Mon Jan 2 15:04:05 MST 2006, so 01 is the month and 02 is the day. " +
			"So the layout must be \"2006-01-02\". " +
			"The fix is to change the layout string in ParseDate to \"2006-01-02\".",
		ToolCalls: []fakeupstream.ToolCall{{Name: "edit_file", Arguments: `{"path":"dates/dates.go","old":"\"2006-02-01\"","new":"\"2006-01-02\""}`}},
	},
	{
		Reasoning: "Okay, the edit was applied. " +
			"Now I should run the tests to confirm. " +
			"Wait, there might be other callers relying on the wrong layout. " +
			"Let me think. ParseDate is only used in the test and in cmd/report. " +
			"I'll run the whole package's tests.",
		ToolCalls: []fakeupstream.ToolCall{{Name: "run_tests", Arguments: `{"package":"./dates"}`}},
	},
	{
		Reasoning: "The tests pass now. Hmm, should I mention the reference time? " +
			"Yes, a short explanation helps. Therefore I will summarise the cause and the fix in two sentences.",
		Content: "Fixed: ParseDate used the layout \"2006-02-01\", which swaps month and day in Go's reference time. " +
			"It now uses \"2006-01-02\" and `go test ./dates` passes.",
	},
	{
		Reasoning: "The user wants a leap-year test. Hmm, 29 February exists in 2024 but not in 2023. " +
			"Wait, should I also test that 2023-02-29 fails? That would make the test stronger. " +
			"Let me think about the table: 2024-02-29 valid, 2023-02-29 invalid. " +
			"I'll add a table-driven test with both cases to dates_test.go.",
		ToolCalls: []fakeupstream.ToolCall{{Name: "edit_file", Arguments: `{"path":"dates/dates_test.go","append":"func TestParseDateLeap(t *testing.T) {...}"}`}},
	},
	{
		Reasoning: "Hmm, the file was written. Now run the tests again. " +
			"So the next step is run_tests on ./dates.",
		ToolCalls: []fakeupstream.ToolCall{{Name: "run_tests", Arguments: `{"package":"./dates"}`}},
	},
	{
		Reasoning: "Both cases pass. So I am done; I'll tell the user what the new test covers.",
		Content:   "Added TestParseDateLeap: 2024-02-29 parses, 2023-02-29 is rejected. `go test ./dates` passes.",
	},
}

// runTool is the demo's tool executor.
func runTool(name, args string) string {
	switch name {
	case "read_file":
		return "package dates\n\nimport \"time\"\n\n// ParseDate parses an ISO date.\nfunc ParseDate(s string) (time.Time, error) {\n\treturn time.Parse(\"2006-02-01\", s)\n}\n"
	case "edit_file":
		return "ok: 1 change"
	case "run_tests":
		return "ok  \texample.com/dates\t0.004s"
	}
	return "error: unknown tool " + strings.TrimSpace(name)
}

// The review's scripted answers: the child finds a possible error in the
// first turn's answer (once), the model revises; the second turn's review
// finds nothing.
const (
	reviewPacket = `{"role":"masked-review","status":"update","items":[` +
		`{"kind":"possible_error","certainty":"likely","content":"ParseDate is also called from cmd/report; the layout change was not checked there."},` +
		`{"kind":"suggestion","certainty":"certain","content":"Run the tests of cmd/report too, or say why they are unaffected."}]}`
	reviewNothing = `{"role":"masked-review","status":"no_update"}`
)

var revision = fakeupstream.Reply{
	Reasoning: "The reviewer has a point: cmd/report calls ParseDate. It passes ISO dates, so the fixed layout is what it needs.",
	Content:   "I also checked cmd/report: it passes ISO dates (2024-03-05), which the corrected layout now parses as 5 March.",
}

// The script's size, for tests of a run: the agent's requests (one per
// scripted reply) and its user turns.
var (
	ScriptSteps = len(replies)
	ScriptTurns = len(userTurns)
)
