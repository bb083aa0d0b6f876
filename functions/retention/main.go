// Command retention is the scheduled Lambda that deletes completed and
// unsupported outbox rows older than RETENTION_AGE, with their attempt
// history, in bounded batches (internal/retention). Unset, it deletes
// nothing.
package main

import "integration-outbox/internal/appbase"

func main() {
	appbase.Start("retention", 0, func(a *appbase.App) (any, error) {
		s, err := a.Sweeper()
		return s.Handle, err
	})
}
