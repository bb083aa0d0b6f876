// Command retention is the scheduled Lambda that deletes completed and
// unsupported outbox rows older than RETENTION_AGE, with their attempt
// history, in bounded batches (internal/retention). Unset, it deletes
// nothing.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"integration-outbox/internal/app"
)

func main() {
	a, err := app.New(context.Background(), os.Getenv, os.Stdout, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "retention: start-up failed:", err)
		os.Exit(1)
	}
	s, err := a.Sweeper()
	if err != nil {
		fmt.Fprintln(os.Stderr, "retention: start-up failed:", err)
		os.Exit(1)
	}
	lambda.Start(s.Handle)
}
