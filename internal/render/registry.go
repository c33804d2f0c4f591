package render

import (
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"github.com/shaperproxy/shaperproxy/fixtures/templates"
)

// The special tokens of render.py's CONFIG.
const (
	dsBOS = "<｜begin▁of▁sentence｜>"
	dsEOS = "<｜end▁of▁sentence｜>"
	imEnd = "<|im_end|>"
)

// configs is render.py's CONFIG: per template, its special tokens, the
// form of tool-call arguments and its default variables.
var configs = map[string]templateConfig{
	"deepseek-r1":                       {bos: dsBOS, eos: dsEOS, args: argsString},
	"deepseek-v3":                       {bos: dsBOS, eos: dsEOS, args: argsString},
	"deepseek-v3.1":                     {bos: dsBOS, eos: dsEOS, args: argsString, kwargs: map[string]any{"thinking": true}},
	"deepseek-v3.2.llamacpp-port":       {bos: dsBOS, eos: dsEOS, kwargs: map[string]any{"enable_thinking": true}},
	"qwen3":                             {eos: imEnd},
	"qwen3-coder":                       {eos: imEnd},
	"qwq-32b":                           {eos: imEnd},
	"kimi-k2-instruct-0711":             {},
	"kimi-k2-instruct":                  {},
	"kimi-k2-thinking":                  {},
	"kimi-k2-thinking.llamacpp-1920345": {},
	"glm-4.5.llamacpp":                  {},
	"glm-4.6":                           {},
	"minimax-m2":                        {},
	"gpt-oss-120b":                      {thinking: true},
}

// V4 is the name of the DeepSeek V4 encoder (no template file).
const V4 = "deepseek-v4"

var (
	mu       sync.Mutex
	compiled = map[string]Renderer{}
)

// Named returns the renderer called name: V4, or a template of
// fixtures/templates (its file name without ".jinja"). Renderers are
// compiled once and shared.
func Named(name string) (Renderer, error) {
	if name == V4 {
		return v4Encoder{}, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if r, ok := compiled[name]; ok {
		return r, nil
	}
	src, err := fs.ReadFile(templates.FS, name+".jinja")
	if err != nil {
		return nil, fmt.Errorf("render: no template %q: %w", name, err)
	}
	t, err := Compile(name, string(src))
	if err != nil {
		return nil, err
	}
	compiled[name] = t
	return t, nil
}

// Names lists every renderer Named knows, sorted.
func Names() []string {
	names := []string{V4}
	entries, _ := fs.ReadDir(templates.FS, ".")
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".jinja"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}
