// Command inspect is the console-invoked, read-only Lambda that shows one
// organization's outbox row with its attempts, conflicts and reruns, or
// that organization's stuck rows (the payload is in internal/inspect).
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
		fmt.Fprintln(os.Stderr, "inspect: start-up failed:", err)
		os.Exit(1)
	}
	lambda.Start(a.Inspector().Handle)
}
