package capture

import (
	"errors"
	"time"
)

// Defaults of Options and Config, defined once.
const (
	DefaultQueue        = 4096
	DefaultQueueBytes   = 64 << 20
	DefaultSegmentBytes = 64 << 20
	DefaultRetainBytes  = 10 << 30
	DefaultRetainAge    = 14 * 24 * time.Hour
)

// Dir is the capture logs' directory inside the proxy's data directory.
const Dir = "capture"

// Config is the [capture] section of the configuration. Start from
// DefaultConfig.
type Config struct {
	// Enabled records every upstream request and every response event.
	Enabled bool `toml:"enabled"`
	// ClientRequests also records each request as the client sent it,
	// before any transform.
	ClientRequests bool `toml:"client_requests"`
	// Queue is the number of records waiting for the disk; beyond it new
	// records are dropped and counted (traffic is never held up).
	Queue int `toml:"queue"`
	// QueueBytes bounds the bytes of the records waiting: the capture's
	// memory. Beyond it records are dropped and counted.
	QueueBytes   int64         `toml:"queue_bytes"`
	SegmentBytes int64         `toml:"segment_bytes"` // rotate segments at this size
	RetainBytes  int64         `toml:"retain_bytes"`  // remove the oldest segments beyond this total
	RetainAge    time.Duration `toml:"retain_age"`    // remove segments older than this
}

// DefaultConfig is capture on, with the package defaults.
func DefaultConfig() Config {
	return Config{
		Enabled: true, Queue: DefaultQueue, QueueBytes: DefaultQueueBytes,
		SegmentBytes: DefaultSegmentBytes, RetainBytes: DefaultRetainBytes, RetainAge: DefaultRetainAge,
	}
}

// Validate checks every field; each error names its key (relative to the
// [capture] table).
func (c Config) Validate() error {
	var errs []error
	if c.Queue <= 0 {
		errs = append(errs, errors.New("queue: must be positive"))
	}
	if c.QueueBytes < 1<<20 {
		errs = append(errs, errors.New("queue_bytes: must be at least 1 MiB"))
	}
	if c.SegmentBytes < 1<<20 {
		errs = append(errs, errors.New("segment_bytes: must be at least 1 MiB"))
	}
	if c.RetainBytes < c.SegmentBytes {
		errs = append(errs, errors.New("retain_bytes: must be at least segment_bytes"))
	}
	if c.RetainAge <= 0 {
		errs = append(errs, errors.New("retain_age: must be positive"))
	}
	return errors.Join(errs...)
}

// Options returns the Writer's options for c, writing under dir.
func (c Config) Options(dir string) Options {
	return Options{
		Dir: dir, QueueSize: c.Queue, QueueBytes: c.QueueBytes,
		SegmentBytes: c.SegmentBytes, RetainBytes: c.RetainBytes, RetainAge: c.RetainAge,
	}
}
