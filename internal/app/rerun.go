package app

import (
	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/report"
	"integration-outbox/internal/rerun"
)

// Rerunner builds the rerun handler. Its dispatchNow runs the same
// dispatcher as functions/dispatch, sending through sender (a.SQS() in
// Lambda); without PUSH_PURCHASE_ORDER_QUEUE_URL there is nowhere to send,
// so the rerunner refuses dispatchNow and only requeues.
func (a *App) Rerunner(sender dispatch.Sender) (*rerun.Rerunner, error) {
	var d rerun.Dispatcher // stays a nil interface without a queue
	if a.Config.PushPurchaseOrderQueueURL != "" {
		disp, err := a.dispatcher(sender, "rerun")
		if err != nil {
			return nil, err
		}
		d = disp
	}
	return rerun.New(a.Pool, d, rerun.Config{MaxAttempts: a.Config.MaxAttempts, Logger: a.Logger})
}

// Report builds the operator's read views of the outbox.
func (a *App) Report() *report.Reader {
	return report.New(a.Pool, a.Config.MaxAttempts)
}
