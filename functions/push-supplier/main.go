// Command push-supplier is the SQS-triggered Lambda that pushes the host's
// suppliers to their providers (Xero contacts, QuickBooks vendors, webhook
// events).
package main

import "integration-outbox/internal/app"

func main() {
	app.Start("push-supplier", 0, func(a *app.App) (any, error) {
		w, err := a.PushSupplierWorker()
		return w.Handle, err
	})
}
