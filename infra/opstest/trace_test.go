package opstest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Every line the push function writes about a job carries the invocation's
// X-Ray trace header (from the context aws-lambda-go builds per invocation)
// and the request id; "job finished" also names the provider, which the
// README's Logs Insights query filters on.
func TestJobLinesCarryTraceIDAndProvider(t *testing.T) {
	t.Parallel()
	const trace = "Root=1-67891233-abcdef012345678912345678;Parent=53995c3f42cd8ad8;Sampled=1"
	p := newPipeline(t)
	conn := p.webhook(t, provider(t, func() int { return 503 }).URL)
	id := p.command(t, conn)
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-trace"})
	//lint:ignore SA1029 aws-lambda-go stores the trace header under this plain string key
	ctx = context.WithValue(ctx, "x-amzn-trace-id", trace)
	p.tickIn(t, ctx)
	jobLines := 0
	for _, l := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
		var doc map[string]any
		if json.Unmarshal([]byte(l), &doc) != nil || doc["outboxId"] != id || doc["_aws"] != nil {
			continue
		}
		if doc["msg"] == "dispatch run finished" {
			continue
		}
		jobLines++
		if doc["traceId"] != trace || doc["requestId"] != "req-trace" {
			t.Errorf("job line without the invocation's traceId/requestId: %s", l)
		}
		if doc["msg"] == "job finished" && (doc["provider"] != "webhook" || doc["status"] != "failed" || doc["level"] != "WARN") {
			t.Errorf("job finished line: %s", l)
		}
	}
	if jobLines == 0 {
		t.Fatalf("no log line about job %s:\n%s", id, p.out.String())
	}
}
