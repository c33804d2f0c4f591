package review

import "github.com/shaperproxy/shaperproxy/conv"

// TurnKey names the open turn of req within conversation: the key the
// proxy checkpoints a review under (ledger.Store.MarkReviewed). It is
// conv.TurnKey; see there.
func TurnKey(req *conv.Request, conversation string) string { return conv.TurnKey(req, conversation) }
