package shaping_test

import (
	"fmt"

	"github.com/shaperproxy/shaperproxy/shaping"
)

func Example() {
	reasoning := "Hmm, the user wants the export to be faster. Wait, let me think. " +
		"The export reads every row twice, once to count and once to write. " +
		"Hmm. That doubles the I/O for 40 million rows. Let me see. " +
		"Maybe an index would help? No, the query already uses one. " +
		"So the fix is to stream the rows once and count while writing."

	out, changed := shaping.Shape(reasoning, shaping.Options{MaxChars: 160})
	fmt.Println(changed)
	fmt.Println(out)

	again, changedAgain := shaping.Shape(out, shaping.Options{MaxChars: 160})
	fmt.Println(again == out, changedAgain)
	// Output:
	// true
	// The user wants the export to be faster. So the fix is to stream the rows once and count while writing.
	// true false
}

func ExampleSentences() {
	for _, s := range shaping.Sentences("嗯，用户要导出。所以用流式写入。\nHmm. I'll use e.g. bufio.Writer.") {
		fmt.Printf("%-9s %s\n", s.Kind, s.Text)
	}
	// Output:
	// normal    嗯，用户要导出。
	// decisive  所以用流式写入。
	// filler    Hmm.
	// decisive  I'll use e.g. bufio.Writer.
}

func ExampleCollisions() {
	texts := []string{
		"Hmm. The cache is cold at startup. So I'll warm it in main before serving.",
		"Wait. The cache is cold at startup. So I'll warm it in main before serving.",
		"Hmm. The cache misses on every key. So I'll warm it in main before serving.",
	}
	in, out, fanout := shaping.Collisions(texts, shaping.Options{MaxChars: 70})
	fmt.Println(in, out, fanout)
	// Output:
	// 3 2 2
}
