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
	TTL      time.Duration `toml:"ttl"`       // conversations idle this long are purged
	MaxBytes int64         `toml:"max_bytes"` // compact the file above this size
	Queue    int           `toml:"queue"`     // pending writes before new ones are dropped (and counted)
}

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
	return errors.Join(errs...)
}
