package originals

import (
	"errors"
	"time"
)

// DefaultQueue is the default number of pending writes of a Writer.
const DefaultQueue = 1024

// Config is the [originals] section of the configuration. Start from
// DefaultConfig.
type Config struct {
	TTL time.Duration `toml:"ttl"` // conversations idle this long are purged
	// MaxBytes bounds the file: it never grows past it (the conversations
	// idle longest make room), nor into more than a quarter of the free
	// disk (see Options.MaxBytes). Negative: no size bound.
	MaxBytes int64 `toml:"max_bytes"`
	Queue    int   `toml:"queue"` // pending writes before new ones are dropped (and counted)
}

// MinMaxBytes is the smallest MaxBytes Validate accepts: bbolt's smallest
// file is 32 KiB, and entries get half of the bound.
const MinMaxBytes = 256 << 10

// DefaultConfig holds the package defaults.
func DefaultConfig() Config {
	return Config{TTL: DefaultTTL, MaxBytes: DefaultMaxBytes, Queue: DefaultQueue}
}

// Validate checks every field; each error names its key (relative to the
// [originals] table).
func (c Config) Validate() error {
	var errs []error
	if c.TTL <= 0 {
		errs = append(errs, errors.New("ttl: must be positive"))
	}
	if c.Queue <= 0 {
		errs = append(errs, errors.New("queue: must be positive"))
	}
	if c.MaxBytes > 0 && c.MaxBytes < MinMaxBytes {
		errs = append(errs, errors.New("max_bytes: must be at least 262144 (256 KiB), or negative for no bound"))
	}
	return errors.Join(errs...)
}
