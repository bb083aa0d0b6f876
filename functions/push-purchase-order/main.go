// Command push-purchase-order is the SQS-triggered Lambda that pushes purchase
// orders to their providers.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"integration-outbox/internal/app"
)

func main() {
	ctx := context.Background()
	a, err := app.New(ctx, os.Getenv, os.Stdout, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "push-purchase-order: start-up failed:", err)
		os.Exit(1)
	}
	w, err := a.PushWorker()
	if err != nil {
		fmt.Fprintln(os.Stderr, "push-purchase-order: start-up failed:", err)
		os.Exit(1)
	}
	lambda.Start(w.Handle)
}
