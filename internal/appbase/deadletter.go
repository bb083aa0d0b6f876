package appbase

import (
	"integration-outbox/internal/deadletter"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/outbox"
)

// ReleaseDeadLettersFunction names the dead-letter consumer in its metrics.
const ReleaseDeadLettersFunction = "release-dead-letters"

// DeadLetterReleaser builds the handler of the command queue's dead-letter
// queue: it releases the rows of messages the push function never managed
// to handle.
func (a *App) DeadLetterReleaser() (*deadletter.Releaser, error) {
	return deadletter.New(outbox.NewStore(a.Pool).WithHealth(a.Health()), deadletter.Config{MaxAttempts: a.Config.MaxAttempts,
		Logger: a.Logger, Metrics: metrics.NewEmitter(a.Out, ReleaseDeadLettersFunction)})
}
