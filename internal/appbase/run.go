package appbase

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"integration-outbox/internal/config"
)

// Start is every function's main: it builds the App from the environment
// (requiring what need names), asks build for the handler and hands it to
// lambda.Start, which serves invocations until the container ends. A
// start-up failure is printed to stderr after the function's name and ends
// the process with status 1, so Lambda reports a failed init with the
// reason in the function's log.
//
// build returns the handler lambda.Start takes, usually a method value
// such as d.Handle; it is not called when err is set.
func Start(name string, need config.Need, build func(*App) (handler any, err error)) {
	a, err := New(context.Background(), os.Getenv, os.Stdout, need)
	var handler any
	if err == nil {
		handler, err = build(a)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: start-up failed: %v\n", name, err)
		os.Exit(1)
	}
	lambda.Start(handler)
}
