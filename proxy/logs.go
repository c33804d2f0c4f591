package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/redact"
	"github.com/shaperproxy/shaperproxy/internal/runecut"
)

// maxLogModel bounds the model name in a log line (it comes from the
// request).
const maxLogModel = 200

// logCall writes the call's line: info when complete, warn otherwise. err,
// retry, internal, parent and purpose appear only when set.
func (p *Proxy) logCall(call *Call, end End) {
	level := slog.LevelInfo
	if end.Outcome != OutcomeComplete {
		level = slog.LevelWarn
	}
	if !p.log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs,
		slog.String("call", call.ID), slog.String("route", call.Route),
		slog.String("model", clip(call.Model, maxLogModel)),
		slog.String("method", call.Method), slog.String("path", logPath(call)),
		slog.Bool("stream", call.Stream), slog.Int("status", end.Status),
		slog.String("outcome", string(end.Outcome)), durationMS(end.Duration),
		slog.Int64("bytes", end.Bytes), slog.Int("events", end.Events))
	if call.times.firstToken > 0 {
		attrs = append(attrs, slog.Float64("first_token_ms", ms(call.times.firstToken)))
	}
	if call.Retry {
		attrs = append(attrs, slog.Bool("retry", true))
	}
	if call.Internal {
		attrs = append(attrs, slog.Bool("internal", true), slog.String("parent", call.Parent), slog.String("purpose", call.Purpose))
	}
	if end.Err != "" {
		attrs = append(attrs, slog.String("err", end.Err))
	}
	p.log.LogAttrs(context.Background(), level, "call", attrs...)
}

// logPath is the call's path and query as a log line may show them: the
// values of key-like parameters (";key=", "?key=") redacted.
func logPath(call *Call) string {
	path := call.Path
	if call.RawQuery != "" {
		path += "?" + call.RawQuery
	}
	return redact.URL(path)
}

// durationMS is a duration attribute in milliseconds, the same number in
// text and JSON logs.
func durationMS(d time.Duration) slog.Attr { return slog.Float64("duration_ms", ms(d)) }

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// clip cuts s to at most n bytes, on a rune boundary, and makes it valid
// UTF-8.
func clip(s string, n int) string {
	return runecut.Prefix(strings.ToValidUTF8(s, "\uFFFD"), n)
}

// debugRequest logs, at debug level, a request about to go upstream: what
// the proxy understood of it and which transforms changed it.
func (p *Proxy) debugRequest(call *Call, body []byte) {
	if !p.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	call.settle() // the view of what goes out, made now rather than beside the trip
	changed := make([]string, len(call.changedBy))
	for i, t := range call.changedBy {
		changed[i] = fmt.Sprintf("%T", t)
	}
	attrs := []slog.Attr{
		slog.String("call", call.ID), slog.String("route", call.Route), slog.String("method", call.Method),
		slog.String("path", logPath(call)), slog.String("model", clip(call.Model, maxLogModel)),
		slog.Bool("chat", call.Chat), slog.Bool("stream", call.Stream), slog.String("conversation", call.Conversation),
		slog.Int("client_body_bytes", len(call.ClientBody)), slog.Int("body_bytes", len(body)),
		slog.Any("changed_by", changed), slog.Bool("retry", call.Retry),
	}
	if call.View != nil {
		attrs = append(attrs, slog.Int("messages", len(call.View.Messages)))
	}
	p.log.LogAttrs(context.Background(), slog.LevelDebug, "request", attrs...)
}

// debugResponse logs, at debug level, the upstream's response header.
func (p *Proxy) debugResponse(call *Call, info *ResponseInfo) {
	if !p.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	p.log.LogAttrs(context.Background(), slog.LevelDebug, "response",
		slog.String("call", call.ID), slog.Int("status", info.Status),
		slog.String("content_type", clip(info.Header.Get("Content-Type"), 100)),
		slog.String("content_encoding", clip(info.Header.Get("Content-Encoding"), 50)),
		slog.Bool("stream", info.Stream), slog.Float64("header_ms", ms(call.times.header)))
}
