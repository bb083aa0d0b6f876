// Command push-purchase-order is the SQS-triggered Lambda that pushes purchase
// orders to their providers.
package main

import "integration-outbox/internal/app"

func main() {
	app.Start("push-purchase-order", 0, func(a *app.App) (any, error) {
		w, err := a.PushWorker()
		return w.Handle, err
	})
}
