package opstest

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"integration-outbox/internal/metrics"
	"integration-outbox/internal/metrics/metricstest"
)

// metricRef is a metric an alarm or a dashboard widget names: its
// namespace, name and dimensions (name → value; "*" where a SEARCH leaves
// the value open, "<Id>" or "<Id.Attr>" for a template reference).
type metricRef struct {
	Where     string
	Namespace string
	Name      string
	Dims      map[string]string
}

func (m metricRef) String() string {
	keys := make([]string, 0, len(m.Dims))
	for k, v := range m.Dims {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return fmt.Sprintf("%s %s/%s {%s}", m.Where, m.Namespace, m.Name, strings.Join(keys, ","))
}

// dimValue renders a dimension value of an alarm: a literal, or a
// reference as "<Id>" / "<Id.Attr>".
func dimValue(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	if id, attr := ref(v); id != "" {
		if attr != "" {
			return "<" + id + "." + attr + ">"
		}
		return "<" + id + ">"
	}
	return fmt.Sprint(v)
}

func dimsOf(v any) map[string]string {
	out := map[string]string{}
	for _, d := range anySlice(v) {
		if d == nil {
			continue
		}
		out[get(d, "Name").(string)] = dimValue(get(d, "Value"))
	}
	return out
}

// alarmMetrics lists the metrics every alarm of the template names.
func alarmMetrics(tp tmpl) []metricRef {
	var out []metricRef
	for id, p := range tp.ofType("AWS::CloudWatch::Alarm") {
		if name, ok := p["MetricName"].(string); ok {
			out = append(out, metricRef{Where: id, Namespace: p["Namespace"].(string), Name: name, Dims: dimsOf(p["Dimensions"])})
		}
		for _, m := range anySlice(p["Metrics"]) {
			if ms := get(m, "MetricStat", "Metric"); ms != nil {
				out = append(out, metricRef{Where: id + "/" + get(m, "Id").(string), Namespace: get(ms, "Namespace").(string),
					Name: get(ms, "MetricName").(string), Dims: dimsOf(get(ms, "Dimensions"))})
			}
		}
	}
	return out
}

var (
	searchRE = regexp.MustCompile(`^SEARCH\('\{([^}]*)\}\s+MetricName="([^"]+)"((?:\s+[A-Za-z]+="[^"]*")*)',\s*'[^']+',\s*\d+\)$`)
	filterRE = regexp.MustCompile(`([A-Za-z]+)="([^"]*)"`)
)

// dashboardBody is the dashboard's JSON with its ${...} substituted.
func dashboardBody(t *testing.T, tp tmpl) map[string]any {
	t.Helper()
	dashes := tp.ofType("AWS::CloudWatch::Dashboard")
	if len(dashes) != 1 {
		t.Fatalf("%d dashboards, want 1", len(dashes))
	}
	for _, p := range dashes {
		sub, ok := get(p, "DashboardBody", "Fn::Sub").(string)
		if !ok {
			t.Fatal("DashboardBody is not a !Sub string")
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(substitute(sub)), &body); err != nil {
			t.Fatalf("DashboardBody is not JSON once substituted: %v", err)
		}
		return body
	}
	return nil
}

// dashboardMetrics lists the metrics every widget names, as metric arrays
// [namespace, name, dim, value, ..., {options}] or SEARCH expressions.
func dashboardMetrics(t *testing.T, tp tmpl) []metricRef {
	t.Helper()
	var out []metricRef
	for i, w := range get(dashboardBody(t, tp), "widgets").([]any) {
		where := fmt.Sprintf("dashboard widget %d %q", i, get(w, "properties", "title"))
		for _, m := range anySlice(get(w, "properties", "metrics")) {
			switch x := m.(type) {
			case nil:
			case []any:
				var parts []string
				for _, e := range x {
					if s, ok := e.(string); ok {
						parts = append(parts, s)
					}
				}
				if len(parts) < 2 || len(parts)%2 != 0 || contains(parts, ".") {
					t.Errorf("%s: metric %v: want [namespace, name, dim, value, ...] without shorthand", where, x)
					continue
				}
				r := metricRef{Where: where, Namespace: parts[0], Name: parts[1], Dims: map[string]string{}}
				for j := 2; j < len(parts); j += 2 {
					r.Dims[parts[j]] = parts[j+1]
				}
				out = append(out, r)
			case map[string]any:
				expr, _ := x["expression"].(string)
				sm := searchRE.FindStringSubmatch(expr)
				if sm == nil {
					t.Errorf("%s: expression %q is not a SEARCH this test can read", where, expr)
					continue
				}
				schema := strings.Split(sm[1], ",")
				r := metricRef{Where: where, Namespace: strings.TrimSpace(schema[0]), Name: sm[2], Dims: map[string]string{}}
				for _, d := range schema[1:] {
					r.Dims[strings.TrimSpace(d)] = "*"
				}
				for _, f := range filterRE.FindAllStringSubmatch(sm[3], -1) {
					if _, ok := r.Dims[f[1]]; !ok {
						t.Errorf("%s: SEARCH filters on %s, which is not in its schema", where, f[1])
					}
					r.Dims[f[1]] = f[2]
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// awsMetrics are the AWS namespaces' metrics the template may name, with
// the one dimension each is published under and the resource type whose
// reference must fill it.
var awsMetrics = map[string]struct {
	names            []string
	dim, attr, rtype string
}{
	"AWS/Lambda": {[]string{"Errors", "Throttles", "Invocations", "Duration", "ConcurrentExecutions"}, "FunctionName", "", "AWS::Serverless::Function"},
	"AWS/SQS": {[]string{"ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible",
		"ApproximateAgeOfOldestMessage", "NumberOfMessagesSent", "NumberOfMessagesReceived"}, "QueueName", "QueueName", "AWS::SQS::Queue"},
}

// emitted runs the functions' real emitters through internal/app — a
// dispatch run, push batches with a completed, a failed and a dead-lettered
// webhook row and a malformed message, a push-supplier batch with a webhook
// supplier and a malformed message, a rerun with dispatchNow, a
// dead-letter batch — and returns the EMF they wrote.
func emitted(t *testing.T) []emfLine {
	t.Helper()
	ctx := context.Background()
	p := newPipeline(t)
	ok := p.webhook(t, provider(t, func() int { return 200 }).URL)
	down := p.webhook(t, provider(t, func() int { return 503 }).URL)
	p.command(t, ok)
	p.command(t, down)
	last := p.command(t, down)
	p.f.Pool.Exec(ctx, `update external_integration_outbox set attempt_count = 9 where id = $1`, last)
	// A connection that fails CIRCUIT_FAILURE_THRESHOLD (5) times in a row
	// opens its circuit: CircuitOpened.
	tripped := p.webhook(t, provider(t, func() int { return 503 }).URL)
	for range 5 {
		p.command(t, tripped)
	}
	// And one that fails as many push_supplier commands in a row.
	trippedBySuppliers := p.webhook(t, provider(t, func() int { return 503 }).URL)
	for range 5 {
		p.supplier(t, trippedBySuppliers)
	}
	p.supplier(t, ok)
	p.tick(t)
	p.drainSuppliers(t)
	sw, err := p.app.PushSupplierWorker()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "junk", Body: "{"}}}); err != nil {
		t.Fatal(err)
	}
	w, err := p.app.PushWorker()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "junk", Body: "{"}}}); err != nil {
		t.Fatal(err)
	}
	r, err := p.app.Rerunner(p.app.SQS())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(map[string]any{"organizationId": p.org, "outboxIds": []string{last}, "resetAttempts": true,
		"dispatchNow": true, "reason": "opstest", "requestedBy": "opstest"})
	if _, err := r.Handle(ctx, req); err != nil {
		t.Fatal(err)
	}
	// The dead-letter consumer: one batch writes all its counters.
	rel, err := p.app.DeadLetterReleaser()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rel.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "dead", Body: "{"}}}); err != nil {
		t.Fatal(err)
	}
	out := []byte(p.out.String())
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(l, `"_aws"`) {
			if err := metricstest.Validate([]byte(l)); err != nil {
				t.Errorf("invalid EMF %v: %s", err, l)
			}
		}
	}
	return emfLines(t, out)
}

// No widget or alarm that can never show data: every IntegrationOutbox
// metric the template names is emitted by the functions with exactly those
// dimension names (CloudWatch matches the whole set) and values, and every
// AWS metric is a known one under its dimension, filled by a reference to
// the right kind of resource.
func TestEveryMetricTheTemplateNamesIsEmitted(t *testing.T) {
	t.Parallel()
	tp := loadTemplate(t)
	refs := append(alarmMetrics(tp), dashboardMetrics(t, tp)...)
	lines := emitted(t)
	if len(lines) == 0 {
		t.Fatal("the emitters wrote no EMF")
	}
	resources := tp.resources()
	named := 0
	for _, r := range refs {
		if r.Namespace == metrics.Namespace {
			named++
			if !emittedMatch(lines, r) {
				t.Errorf("%v: no EMF line the functions write has this metric with exactly these dimensions", r)
			}
			continue
		}
		spec, ok := awsMetrics[r.Namespace]
		if !ok {
			t.Errorf("%v: namespace neither %s nor a known AWS one", r, metrics.Namespace)
			continue
		}
		if !contains(spec.names, r.Name) {
			t.Errorf("%v: %s is not a %s metric this test knows", r, r.Name, r.Namespace)
		}
		v, ok := r.Dims[spec.dim]
		if len(r.Dims) != 1 || !ok {
			t.Errorf("%v: want exactly the dimension %s", r, spec.dim)
			continue
		}
		id, attr, _ := strings.Cut(strings.Trim(v, "<>"), ".")
		if res, ok := resources[id]; !ok || res["Type"] != spec.rtype || attr != spec.attr {
			t.Errorf("%v: %s must reference a %s (%s)", r, spec.dim, spec.rtype, spec.attr)
		}
	}
	if named < 10 {
		t.Errorf("only %d references to %s metrics found: is the parser reading the template?", named, metrics.Namespace)
	}
}

func emittedMatch(lines []emfLine, r metricRef) bool {
	for _, l := range lines {
		if l.Namespace != r.Namespace || l.Values[r.Name] == nil || len(l.Dims) != len(r.Dims) {
			continue
		}
		match := true
		for k, v := range r.Dims {
			got, ok := l.Dims[k]
			if !ok || (v != "*" && got != v) {
				match = false
			}
		}
		if match {
			return true
		}
	}
	return false
}
