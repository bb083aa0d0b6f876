package appbase

import (
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/retention"
)

// Sweeper builds the retention handler (RETENTION_AGE; unset: off).
func (a *App) Sweeper() (*retention.Sweeper, error) {
	return retention.New(a.Pool, retention.Config{Age: a.Config.RetentionAge, Logger: a.Logger,
		Metrics: metrics.NewEmitter(a.Out, "retention")})
}
