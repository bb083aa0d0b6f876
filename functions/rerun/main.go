// Command rerun is the console-invoked Lambda that requeues a tenant's
// failed, dead_letter and uncertain outbox rows (the payload is in
// internal/rerun), optionally dispatching them at once.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"integration-outbox/internal/app"
	"integration-outbox/internal/config"
)

func main() {
	ctx := context.Background()
	a, err := app.New(ctx, os.Getenv, os.Stdout, config.NeedQueue)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rerun: start-up failed:", err)
		os.Exit(1)
	}
	r, err := a.Rerunner(a.SQS())
	if err != nil {
		fmt.Fprintln(os.Stderr, "rerun: start-up failed:", err)
		os.Exit(1)
	}
	lambda.Start(r.Handle)
}
