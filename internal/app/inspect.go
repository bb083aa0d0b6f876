package app

import "integration-outbox/internal/inspect"

// Inspector builds the console's read-only inspection handler.
func (a *App) Inspector() *inspect.Inspector {
	return inspect.New(a.Pool, inspect.Config{MaxAttempts: a.Config.MaxAttempts, Logger: a.Logger})
}
