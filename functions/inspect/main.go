// Command inspect is the console-invoked, read-only Lambda that shows one
// organization's outbox row with its attempts, conflicts and reruns, or
// that organization's stuck rows (the payload is in internal/inspect).
package main

import "integration-outbox/internal/app"

func main() {
	app.Start("inspect", 0, func(a *app.App) (any, error) {
		return a.Inspector().Handle, nil
	})
}
