// Package logging builds the JSON slog logger every function writes to stdout
// and scopes it to a Lambda request.
//
// The lines follow what Lambda's JSON log format reads when it filters by
// ApplicationLogLevel: a "level" of DEBUG, INFO, WARN or ERROR and an RFC 3339
// "timestamp" (slog's "time" key is renamed). A line Lambda cannot read a
// level from counts as INFO.
package logging

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// New returns a JSON logger at level writing to w.
func New(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: lambdaKeys}))
}

// lambdaKeys names the record's time "timestamp", the key Lambda's log-level
// filtering reads.
func lambdaKeys(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		a.Key = "timestamp"
	}
	return a
}

// traceIDKey is the context key aws-lambda-go stores the invocation's
// X-Ray trace header under (it also sets _X_AMZN_TRACE_ID).
const traceIDKey = "x-amzn-trace-id"

// ForRequest returns log with the Lambda request id and the X-Ray trace
// header of ctx, when there are some, so every line about a job of this
// invocation carries both.
func ForRequest(ctx context.Context, log *slog.Logger) *slog.Logger {
	var attrs []any
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		attrs = append(attrs, "requestId", lc.AwsRequestID)
	}
	if id := traceID(ctx); id != "" {
		attrs = append(attrs, "traceId", id)
	}
	if len(attrs) == 0 {
		return log
	}
	return log.With(attrs...)
}

// traceID is the X-Ray trace header of the invocation ctx belongs to
// ("Root=1-…;Parent=…;Sampled=…"), or "" outside Lambda. The context value
// is per invocation; the environment variable is the runtime's fallback.
func traceID(ctx context.Context) string {
	if id, ok := ctx.Value(traceIDKey).(string); ok && id != "" {
		return id
	}
	if _, ok := lambdacontext.FromContext(ctx); ok {
		return os.Getenv("_X_AMZN_TRACE_ID")
	}
	return ""
}
