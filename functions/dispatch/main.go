// Command dispatch is the scheduled Lambda that claims due outbox rows and
// sends one SQS message per command.
package main

import (
	"integration-outbox/internal/app"
	"integration-outbox/internal/config"
)

func main() {
	app.Start("dispatch", config.NeedQueue, func(a *app.App) (any, error) {
		d, err := a.Dispatcher(a.SQS())
		return d.Handle, err
	})
}
