package review

import (
	"fmt"
	"strings"
)

// noticeRole is the role of the notice message (see the package doc for
// why it is "system").
const noticeRole = "system"

// notice renders p as the text the model reads before it revises: a
// numbered list of the items with their kind and certainty, framed as
// coming from an automatic reviewer and not from the user. A no_update
// packet renders as a short "found nothing" notice (for a publication
// policy that publishes every packet).
func notice(p Packet) string {
	var b strings.Builder
	b.WriteString("Automatic masked review by the proxy (not from the user): a second look at this turn with your reasoning hidden ")
	if len(p.Items) == 0 {
		b.WriteString("found nothing to add. Keep your answer unless you see a reason to change it; then say briefly what changed.")
		return b.String()
	}
	b.WriteString("found:\n")
	for i, it := range p.Items {
		fmt.Fprintf(&b, "%d. [%s, %s] %s\n", i+1, it.Kind, it.Certainty, it.Content)
	}
	b.WriteString("The reviewer saw only your visible text, tool calls and results; its points may be wrong. Revise your answer if these hold; otherwise say briefly why not.")
	return b.String()
}

// noticeMessage returns the notice as a raw message:
// {"role":"system","content":Notice(p)}.
func noticeMessage(p Packet) []byte {
	b := append(appendString([]byte(`{"role":`), noticeRole), `,"content":`...)
	return append(appendString(b, notice(p)), '}')
}
