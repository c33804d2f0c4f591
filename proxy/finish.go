package proxy

import (
	"context"
	"log/slog"
	"strconv"
	"time"
)

// finish records a finished call in the metrics and the log. The log line
// holds no body, header or query value.
func (p *Proxy) finish(call *Call, info *ResponseInfo, end End) {
	end.Duration = time.Since(call.Start)
	status := strconv.Itoa(end.Status)
	p.metrics.requests.WithLabelValues(call.Route, methodLabel(call.Method), status, string(end.Outcome)).Inc()
	p.metrics.duration.WithLabelValues(call.Route).Observe(end.Duration.Seconds())
	p.metrics.bytes.WithLabelValues("client").Add(float64(end.Bytes))
	if info != nil && info.Stream {
		p.metrics.streams.WithLabelValues(call.Route).Inc()
	}
	if end.Outcome == OutcomeUpstreamError || end.Outcome == OutcomeTimeout {
		if end.Status != 0 && info != nil {
			p.metrics.upstreamErrors.WithLabelValues(call.Route, string(end.Outcome)).Inc()
		}
	}
	level := slog.LevelInfo
	if end.Outcome != OutcomeComplete {
		level = slog.LevelWarn
	}
	p.log.LogAttrs(context.Background(), level, "call",
		slog.String("call", call.ID), slog.String("route", call.Route),
		slog.String("method", call.Method), slog.String("path", call.Path),
		slog.String("model", call.Model), slog.Bool("stream", call.Stream),
		slog.Int("status", end.Status), slog.String("outcome", string(end.Outcome)),
		slog.Int64("bytes", end.Bytes), slog.Int("events", end.Events),
		slog.Duration("duration", end.Duration), slog.String("err", end.Err))
}
