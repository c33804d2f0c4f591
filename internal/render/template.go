package render

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
	"github.com/tidwall/gjson"
)

// Renderer renders a chat completions request body into a prompt.
type Renderer interface {
	// Render returns the prompt for body. An error means the template or
	// encoder refused the request (raise_exception, an invalid message):
	// a finding about the request, not a failure of the renderer.
	Render(body []byte, opts Options) (string, error)
	// Name is the template's name ("qwen3", "deepseek-v4").
	Name() string
}

// Options change one render.
type Options struct {
	// NoGenerationPrompt leaves out the assistant opener at the end (the
	// prompt a finished conversation would be cached as).
	NoGenerationPrompt bool
	// Now is strftime_now's clock; nil means time.Now.
	Now func() time.Time
	// Kwargs are extra template variables, after the template's defaults
	// and the request's chat_template_kwargs.
	Kwargs map[string]any
}

// templateConfig is what render.py's CONFIG says about one template.
type templateConfig struct {
	bos, eos string
	args     argsMode
	thinking bool           // also set "thinking" (gpt-oss's HF template reads it)
	kwargs   map[string]any // default template variables
}

// Template is a compiled Jinja chat template. It is safe for concurrent
// use.
type Template struct {
	name string
	tmpl *jinja.Template
	cfg  templateConfig
}

// ErrTemplate wraps every error a template raised while rendering.
var ErrTemplate = errors.New("render: template error")

// Compile compiles source as the template called name; name selects the
// settings render.py uses for it (special tokens, argument form, default
// variables), and a name render.py does not know gets its defaults.
func Compile(name, source string) (*Template, error) {
	t, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("render: compile %s: %w", name, err)
	}
	return &Template{name: name, tmpl: t, cfg: configs[name]}, nil
}

// Name returns the template's name.
func (t *Template) Name() string { return t.name }

// Render renders body (a chat completions request) as render.py does:
// messages, tools, add_generation_prompt, bos_token, eos_token, the
// template's default variables, the request's chat_template_kwargs and
// reasoning_effort, then opts.Kwargs. As render.py, it retries with the
// other tool-argument form when the first one fails.
func (t *Template) Render(body []byte, opts Options) (string, error) {
	if !gjson.ValidBytes(body) {
		return "", errors.New("render: body is not valid JSON")
	}
	vars := t.vars(body, opts)
	modes := []argsMode{t.cfg.args, 1 - t.cfg.args}
	var first error
	for _, mode := range modes {
		vars["messages"] = messages(body, mode, t.cfg.thinking)
		out, err := t.tmpl.RenderValues(vars)
		if err == nil {
			return out, nil
		}
		if first == nil {
			first = err
		}
		if !typeError(err) {
			break
		}
	}
	return "", fmt.Errorf("%w: %s: %w", ErrTemplate, t.name, first)
}

// typeError reports whether a render failed on a type mismatch (the
// case render.py retries with the other argument form).
func typeError(err error) bool {
	s := err.Error()
	return strings.Contains(s, "type") || strings.Contains(s, "cannot") || strings.Contains(s, "unsupported")
}

// vars returns the template variables for body, messages aside.
func (t *Template) vars(body []byte, opts Options) map[string]jinja.Value {
	kw := maps.Clone(t.cfg.kwargs)
	if kw == nil {
		kw = map[string]any{}
	}
	vars := map[string]jinja.Value{}
	for k, v := range kw {
		vars[k] = jinja.FromGoValue(v)
	}
	gjson.GetBytes(body, "chat_template_kwargs").ForEach(func(k, v gjson.Result) bool {
		vars[k.Str] = value(v)
		return true
	})
	for k, v := range opts.Kwargs {
		vars[k] = jinja.FromGoValue(v)
	}
	if e := gjson.GetBytes(body, "reasoning_effort"); e.Exists() {
		if _, set := vars["reasoning_effort"]; !set {
			vars["reasoning_effort"] = value(e)
		}
	}
	vars["tools"] = jinja.None()
	if tools := gjson.GetBytes(body, "tools"); tools.Exists() {
		vars["tools"] = value(tools)
	}
	vars["add_generation_prompt"] = jinja.NewBool(!opts.NoGenerationPrompt)
	vars["bos_token"] = jinja.NewString(t.cfg.bos)
	vars["eos_token"] = jinja.NewString(t.cfg.eos)
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	vars["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		f := "%Y-%m-%d"
		if len(args) > 0 && args[0].IsString() {
			f = args[0].AsString()
		}
		return jinja.NewString(strftime(now(), f)), nil
	})
	return vars
}

// strftime formats t with the directives chat templates use.
func strftime(t time.Time, f string) string {
	r := strings.NewReplacer("%Y", "2006", "%m", "01", "%d", "02", "%H", "15", "%M", "04", "%S", "05",
		"%B", "January", "%b", "Jan", "%A", "Monday", "%a", "Mon", "%y", "06", "%%", "%")
	return t.Format(r.Replace(f))
}
