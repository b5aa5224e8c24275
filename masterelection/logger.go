package masterelection

import (
	"github.com/rs/zerolog"

	"github.com/herdkit/herd/internal/slogzero"
)

// logger is the logger the election writes to: Slog through an adapter
// when it is set, else Logger.
func (c Config) logger() zerolog.Logger {
	if c.Slog != nil {
		return slogzero.Logger(c.Slog)
	}
	return c.Logger
}
