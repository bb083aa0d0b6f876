// Command dispatch is the scheduled Lambda that claims due outbox rows and
// sends one SQS message per command.
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
		fmt.Fprintln(os.Stderr, "dispatch: start-up failed:", err)
		os.Exit(1)
	}
	d, err := a.Dispatcher(a.SQS())
	if err != nil {
		fmt.Fprintln(os.Stderr, "dispatch: start-up failed:", err)
		os.Exit(1)
	}
	lambda.Start(d.Handle)
}
