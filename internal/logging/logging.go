// Package logging builds the JSON slog logger every function writes to stdout
// and scopes it to a Lambda request.
package logging

import (
	"context"
	"io"
	"log/slog"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// New returns a JSON logger at level writing to w.
func New(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// ForRequest returns log with the Lambda request id of ctx, when there is one.
func ForRequest(ctx context.Context, log *slog.Logger) *slog.Logger {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		return log.With("requestId", lc.AwsRequestID)
	}
	return log
}
