package conv

import "github.com/tidwall/gjson"

// signatureKeys are the keys whose non-null value is a signature or
// encrypted reasoning (Anthropic "signature", OpenAI Responses
// "encrypted_content", Gemini "thought_signature", LiteLLM's
// "thought_signatures").
var signatureKeys = []string{"signature", "encrypted_content", "thought_signature", "thought_signatures"}

// signatureHolders are the keys whose object may hold a signature key at
// any depth: Gemini's OpenAI-compatible "extra_content" (on a message, a
// content part or a tool call) and LiteLLM's "provider_specific_fields".
var signatureHolders = []string{"extra_content", "provider_specific_fields"}

// holdsSignature reports whether any holder key of v (read by get)
// carries a thought signature: a "thought_signature" or
// "thought_signatures" key, at any depth, with a non-empty string or a
// non-empty array (an unrelated "signature" key, such as an e-mail's, or
// an empty value is none).
func holdsSignature(get func(string) gjson.Result) bool {
	for _, h := range signatureHolders {
		if hasThoughtSignature(get(h), maxSignedDepth) {
			return true
		}
	}
	return false
}

func hasThoughtSignature(v gjson.Result, depth int) bool {
	if depth == 0 || !(v.IsObject() || v.IsArray()) {
		return false
	}
	found := false
	v.ForEach(func(k, c gjson.Result) bool {
		isKey := k.Type == gjson.String && (k.Str == "thought_signature" || k.Str == "thought_signatures")
		found = isKey && (c.Type == gjson.String && c.Str != "" || nonEmptyArray(c)) || hasThoughtSignature(c, depth-1)
		return !found
	})
	return found
}

// maxSignedDepth bounds the search for a signature inside extra_content.
const maxSignedDepth = 16

// messageSigned reports whether the message-level keys k (from lastKeys)
// carry signed reasoning.
func messageSigned(k *keyVals) bool {
	if nonEmptyArray(k.get("reasoning_details")) || nonEmptyArray(k.get("thinking_blocks")) {
		return true
	}
	for _, s := range signatureKeys {
		if present(k.get(s)) {
			return true
		}
	}
	return holdsSignature(k.get)
}

// partsSigned reports whether a content array holds a thinking,
// redacted_thinking or reasoning part, or a part with a signature key.
func partsSigned(content gjson.Result) bool {
	if !content.IsArray() {
		return false
	}
	signed := false
	content.ForEach(func(_, p gjson.Result) bool {
		signed = partSigned(p)
		return !signed
	})
	return signed
}

// signedPartKeys are the keys partSigned reads, in one pass over the part.
var signedPartKeys = append(append([]string{"type"}, signatureKeys...), signatureHolders...)

// partSigned reports whether one content part (or tool call) is signed.
// Its keys are read in one pass, the last of a repeated key winning as
// everywhere in the view.
func partSigned(p gjson.Result) bool {
	if !p.IsObject() {
		return false
	}
	var dup bool
	k := lastKeys(p, &dup, signedPartKeys...)
	switch str(k.get("type")) {
	case "thinking", "redacted_thinking", "reasoning":
		return true
	}
	for _, s := range signatureKeys {
		if present(k.get(s)) {
			return true
		}
	}
	return holdsSignature(k.get)
}

// toolCallsSigned reports whether a tool call carries a signature in its
// "extra_content" (Gemini's extra_content.google.thought_signature), its
// "provider_specific_fields" (LiteLLM) or at its top level.
func toolCallsSigned(calls gjson.Result) bool {
	if !calls.IsArray() {
		return false
	}
	signed := false
	calls.ForEach(func(_, c gjson.Result) bool {
		signed = partSigned(c)
		return !signed
	})
	return signed
}

// present reports whether v exists and is not null.
func present(v gjson.Result) bool {
	return v.Exists() && v.Type != gjson.Null
}

// nonEmptyArray reports whether v is an array with at least one element.
func nonEmptyArray(v gjson.Result) bool {
	if !v.IsArray() {
		return false
	}
	n := 0
	v.ForEach(func(_, _ gjson.Result) bool { n++; return false })
	return n > 0
}
