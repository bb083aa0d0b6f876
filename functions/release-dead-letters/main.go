// Command release-dead-letters is the Lambda that consumes the command
// queue's dead-letter queue: it releases the row of each message the push
// function failed to handle, fenced by the message's claim token, so that
// the next dispatch run claims it again instead of waiting for its lease
// (internal/deadletter).
package main

import "integration-outbox/internal/appbase"

func main() {
	appbase.Start("release-dead-letters", 0, func(a *appbase.App) (any, error) {
		r, err := a.DeadLetterReleaser()
		return r.Handle, err
	})
}
