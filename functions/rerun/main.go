// Command rerun is the console-invoked Lambda that requeues a tenant's
// failed, dead_letter and uncertain outbox rows (the payload is in
// internal/rerun), optionally dispatching them at once.
package main

import (
	"integration-outbox/internal/app"
	"integration-outbox/internal/config"
)

func main() {
	app.Start("rerun", config.NeedQueue, func(a *app.App) (any, error) {
		r, err := a.Rerunner(a.SQS())
		return r.Handle, err
	})
}
