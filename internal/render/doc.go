// Package render turns a chat completions request into the prompt text a
// self-hosted server would feed the model: through a model's chat template
// (Jinja, with github.com/ardanlabs/jinja) or, for DeepSeek V4, which ships
// a Python encoder instead of a template, through a Go port of that
// encoder's behaviour.
//
// It mirrors ../shared/tools/render.py (a copy of whose behaviour is
// described in fixtures/templates/SOURCES.md), itself modelled on Hugging
// Face transformers' apply_chat_template and vLLM's preprocessing:
//
//   - the Jinja environment has trim_blocks, lstrip_blocks and loop
//     controls; tojson writes Python's json.dumps (", " and ": ",
//     ensure_ascii=False); raise_exception fails the render; strftime_now
//     reads Options.Now;
//   - an assistant message's reasoning is set under both
//     "reasoning_content" and "reasoning" (and "thinking" for gpt-oss);
//   - tool-call arguments are parsed to objects, or kept as strings for
//     the templates that concatenate them (DeepSeek R1/V3/V3.1);
//   - JSON objects keep their key order (as Python's json.load does).
//
// Tests use it to see what the upstream renders from what the proxy
// sends (does a request's prompt extend the previous one's? where does an
// inserted notice land? which reasoning survives?), and the fake upstream
// uses it to estimate prompt-cache hits.
//
//	r, err := render.Named("qwen3")       // a template of fixtures/templates, or "deepseek-v4"
//	prompt, err := r.Render(body, render.Options{})
package render
