package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatalf("not JSON: %s", l)
		}
		out = append(out, m)
	}
	return out
}

// Lambda's log-level filtering reads "level" and an RFC 3339 "timestamp";
// a line without them counts as INFO and escapes a WARN filter.
func TestLinesCarryWhatLambdaFiltersOn(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := New(&buf, slog.LevelDebug)
	log.Debug("d")
	log.Info("i")
	log.Warn("w")
	log.Error("e")
	got := lines(t, &buf)
	for i, want := range []string{"DEBUG", "INFO", "WARN", "ERROR"} {
		if got[i]["level"] != want {
			t.Errorf("line %d level %v, want %s (one of Lambda's TRACE..FATAL)", i, got[i]["level"], want)
		}
		ts, _ := got[i]["timestamp"].(string)
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			t.Errorf("line %d timestamp %q is not RFC 3339", i, ts)
		}
		if _, ok := got[i]["time"]; ok {
			t.Errorf("line %d still has slog's time key", i)
		}
	}
}

// A job's lines carry the invocation's request id and X-Ray trace header,
// taken from the context aws-lambda-go builds per invocation.
func TestRequestLoggerCarriesRequestAndtraceIDs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	base := New(&buf, slog.LevelInfo)
	const trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	//lint:ignore SA1029 aws-lambda-go stores the trace header under this plain string key
	ctx = context.WithValue(ctx, "x-amzn-trace-id", trace)
	ForRequest(ctx, base).Info("job finished", "outboxId", "o-1")
	ForRequest(context.Background(), base).Info("outside Lambda")
	got := lines(t, &buf)
	if got[0]["requestId"] != "req-1" || got[0]["traceId"] != trace || got[0]["outboxId"] != "o-1" {
		t.Errorf("job line %v: want requestId req-1 and traceId %s", got[0], trace)
	}
	if _, ok := got[1]["traceId"]; ok {
		t.Errorf("line outside an invocation has a traceId: %v", got[1])
	}
	if traceID(ctx) != trace {
		t.Errorf("traceID = %q", traceID(ctx))
	}
}
