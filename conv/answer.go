package conv

import "github.com/tidwall/gjson"

// Answer is what a whole non-stream chat body says, read in one pass over
// its top-level members: its "usage", its "model" and its first choice.
// The UsageWatcher reads it once for all of a call's readers (the proxy
// hands it over with the call's end): the usage the accounting reads and
// the message the guard measures come from one pass, where each reader
// scanned the body on its own (issue 15).
//
// An Answer reads the body where it lies: it is valid while the body is.
// It does not say whether the body is valid JSON (ValidJSON does); on a
// body that is not, its results are gjson's reading of it.
type Answer struct {
	// Usage and Model are the body's first top-level "usage" and "model"
	// members, as gjson.Get finds them (a result that does not Exist
	// when there is none); their Index is their place in the body.
	Usage, Model gjson.Result
	// Choices counts the elements of a top-level "choices" array, up to
	// two (2: two or more; 0 also when "choices" is not an array), and
	// First is the first of them.
	Choices int
	First   gjson.Result
}

// ReadAnswer reads body's top-level members once.
func ReadAnswer(body []byte) Answer {
	var a Answer
	var choices gjson.Result
	seen := 0 // of usage, model and choices: the first of each counts, as for gjson.Get
	const usage, model, choicesSeen = 1, 2, 4
	gjson.Parse(AsString(body)).ForEach(func(k, v gjson.Result) bool { // places count from the body's start, blanks before it included
		switch {
		case k.Str == "usage" && seen&usage == 0:
			a.Usage, seen = v, seen|usage
		case k.Str == "model" && seen&model == 0:
			a.Model, seen = v, seen|model
		case k.Str == "choices" && seen&choicesSeen == 0:
			choices, seen = v, seen|choicesSeen
		}
		return true
	})
	if choices.IsArray() {
		choices.ForEach(func(_, c gjson.Result) bool { // no slice of the choices: two at most are looked at
			a.Choices++
			if a.Choices == 1 {
				a.First = c
			}
			return a.Choices < 2
		})
	}
	return a
}

// Choice returns the answer's only choice as the usual body has it (one
// choice, "index" 0, a "message" object whose "content" is a string or
// null): its content and its reasoning (DeltaReasoning's field, read in
// the same pass). false for any other shape: an Assembler says what the
// first choice of those is.
func (a *Answer) Choice() (Choice, bool) {
	if a.Choices != 1 {
		return Choice{}, false
	}
	var index, msg gjson.Result
	a.First.ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Str == "index" && !index.Exists():
			index = v
		case k.Str == "message" && !msg.Exists():
			msg = v
		}
		return true
	})
	if index.Int() != 0 || !msg.IsObject() {
		return Choice{}, false
	}
	var content gjson.Result
	var rs [len(ReasoningFields)]gjson.Result
	msg.ForEach(func(k, v gjson.Result) bool {
		if k.Str == "content" {
			if !content.Exists() {
				content = v
			}
			return true
		}
		for i, f := range ReasoningFields {
			if k.Str == f && !rs[i].Exists() {
				rs[i] = v
			}
		}
		return true
	})
	if content.Type != gjson.String && content.Type != gjson.Null {
		return Choice{}, false
	}
	c := Choice{Content: content.Str}
	for i, r := range rs { // DeltaReasoning's rule: the first field in order that holds a string
		if r.Type == gjson.String {
			c.Reasoning, c.ReasoningField = r.Str, ReasoningFields[i]
			break
		}
	}
	return c, true
}
