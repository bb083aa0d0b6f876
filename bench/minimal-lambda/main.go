// Command minimal-lambda is the reference of the cold-start comparison: the
// smallest aws-lambda-go function, built with the functions' flags and
// started under the same emulator, so that a function's cold start is
// reported as a ratio to what any Go Lambda pays on this machine.
package main

import (
	"context"
	"encoding/json"

	"github.com/aws/aws-lambda-go/lambda"
)

func main() {
	lambda.Start(func(context.Context, json.RawMessage) (string, error) { return "ok", nil })
}
