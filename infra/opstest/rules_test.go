package opstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// functionsWithRoles returns each function's merged properties (Globals
// under its own) and its role's properties.
func functionsWithRoles(t *testing.T, tp tmpl) map[string][2]map[string]any {
	t.Helper()
	globals, _ := get(tp, "Globals", "Function").(map[string]any)
	out := map[string][2]map[string]any{}
	for id, p := range tp.ofType("AWS::Serverless::Function") {
		merged := map[string]any{}
		for k, v := range globals {
			merged[k] = v
		}
		for k, v := range p {
			merged[k] = v
		}
		roleID, attr := ref(p["Role"])
		role, ok := tp.resources()[roleID]
		if !ok || attr != "Arn" || role["Type"] != "AWS::IAM::Role" {
			t.Fatalf("%s: Role must be !GetAtt <AWS::IAM::Role>.Arn", id)
		}
		out[id] = [2]map[string]any{merged, props(role)}
	}
	if len(out) < 3 {
		t.Fatalf("found %d functions", len(out))
	}
	return out
}

// Lambda's logging controls: ApplicationLogLevel and SystemLogLevel apply
// only with LogFormat JSON (AWS refuses them with Text); the log group is
// the template's own, and the function's role may write to exactly it.
// ApplicationLogLevel stays at INFO or below: the EMF metric lines carry no
// "level", Lambda files them as INFO, so WARN would drop every metric.
func TestLoggingConfigAgreesWithRolesAndMetrics(t *testing.T) {
	t.Parallel()
	tp := loadTemplate(t)
	for id, fr := range functionsWithRoles(t, tp) {
		fn, role := fr[0], fr[1]
		lc, _ := fn["LoggingConfig"].(map[string]any)
		if lc == nil {
			t.Errorf("%s: no LoggingConfig", id)
			continue
		}
		if lc["LogFormat"] != "JSON" {
			t.Errorf("%s: LogFormat %v, want JSON (ApplicationLogLevel and SystemLogLevel need it)", id, lc["LogFormat"])
		}
		app := tp.paramDefault(lc["ApplicationLogLevel"])
		if !contains([]string{"TRACE", "DEBUG", "INFO"}, app.(string)) {
			t.Errorf("%s: ApplicationLogLevel %v would drop the EMF lines (Lambda files them as INFO)", id, app)
		}
		if lid, _ := ref(lc["ApplicationLogLevel"]); lid != "" {
			for _, v := range strs(get(tp, "Parameters", lid, "AllowedValues")) {
				if !contains([]string{"TRACE", "DEBUG", "INFO"}, v) {
					t.Errorf("parameter %s allows %s, which would drop the EMF lines", lid, v)
				}
			}
		}
		if !contains([]string{"DEBUG", "INFO", "WARN"}, lc["SystemLogLevel"].(string)) {
			t.Errorf("%s: SystemLogLevel %v is not one of Lambda's (DEBUG, INFO, WARN)", id, lc["SystemLogLevel"])
		}
		lg, attr := ref(lc["LogGroup"])
		if r, ok := tp.resources()[lg]; !ok || attr != "" || r["Type"] != "AWS::Logs::LogGroup" {
			t.Errorf("%s: LoggingConfig.LogGroup must be !Ref of the template's AWS::Logs::LogGroup", id)
			continue
		}
		for _, action := range []string{"logs:CreateLogStream", "logs:PutLogEvents"} {
			if !allows(role, action, map[string]any{"Fn::GetAtt": lg + ".Arn"}) {
				t.Errorf("%s: its role does not allow %s on %s.Arn", id, action, lg)
			}
		}
		if env, _ := get(fn, "Environment", "Variables").(map[string]any); env["AWS_LAMBDA_LOG_LEVEL"] != nil {
			t.Errorf("%s: AWS_LAMBDA_LOG_LEVEL is Lambda's to set (reserved), not the template's", id)
		}
	}
}

// Tracing: Active needs xray:PutTraceSegments and xray:PutTelemetryRecords
// on "*" (X-Ray has no resource-level permissions) in each role.
func TestActiveTracingHasItsPermissions(t *testing.T) {
	t.Parallel()
	tp := loadTemplate(t)
	for id, fr := range functionsWithRoles(t, tp) {
		if fr[0]["Tracing"] != "Active" {
			t.Errorf("%s: Tracing %v, want Active", id, fr[0]["Tracing"])
		}
		for _, action := range []string{"xray:PutTraceSegments", "xray:PutTelemetryRecords"} {
			if !allows(fr[1], action, "*") {
				t.Errorf("%s: its role does not allow %s on *", id, action)
			}
		}
	}
}

// The schedule: FlexibleTimeWindow is required; its role is assumable by
// EventBridge Scheduler and allows invoking the target and sending to the
// dead-letter queue (the scheduler sends with this role, no queue policy);
// the retry policy is within the API's bounds; an alarm watches the queue.
func TestScheduleDeadLetterQueueIsWritableAndWatched(t *testing.T) {
	t.Parallel()
	tp := loadTemplate(t)
	schedules := tp.ofType("AWS::Scheduler::Schedule")
	if len(schedules) == 0 {
		t.Fatal("no AWS::Scheduler::Schedule")
	}
	for id, s := range schedules {
		if get(s, "FlexibleTimeWindow", "Mode") != "OFF" {
			t.Errorf("%s: FlexibleTimeWindow.Mode %v, want OFF", id, get(s, "FlexibleTimeWindow", "Mode"))
		}
		fnID, attr := ref(get(s, "Target", "Arn"))
		if tp.resources()[fnID]["Type"] != "AWS::Serverless::Function" || attr != "Arn" {
			t.Errorf("%s: Target.Arn must be a function's Arn", id)
		}
		dlq, attr := ref(get(s, "Target", "DeadLetterConfig", "Arn"))
		if tp.resources()[dlq]["Type"] != "AWS::SQS::Queue" || attr != "Arn" {
			t.Fatalf("%s: Target.DeadLetterConfig.Arn must be a queue's Arn", id)
		}
		roleID, _ := ref(get(s, "Target", "RoleArn"))
		role := props(tp.resources()[roleID])
		if get(role, "AssumeRolePolicyDocument", "Statement", 0, "Principal", "Service") != "scheduler.amazonaws.com" {
			t.Errorf("%s: role %s is not assumable by scheduler.amazonaws.com", id, roleID)
		}
		if !allows(role, "lambda:InvokeFunction", get(s, "Target", "Arn")) {
			t.Errorf("%s: role %s cannot invoke %s", id, roleID, fnID)
		}
		if !allows(role, "sqs:SendMessage", get(s, "Target", "DeadLetterConfig", "Arn")) {
			t.Errorf("%s: role %s cannot send to its dead-letter queue %s", id, roleID, dlq)
		}
		age, _ := get(s, "Target", "RetryPolicy", "MaximumEventAgeInSeconds").(int)
		retries, _ := get(s, "Target", "RetryPolicy", "MaximumRetryAttempts").(int)
		if age < 60 || age > 86400 || retries < 0 || retries > 185 {
			t.Errorf("%s: RetryPolicy age %d (60..86400) retries %d (0..185)", id, age, retries)
		}
		if !watched(tp, dlq) {
			t.Errorf("%s: no alarm watches its dead-letter queue %s", id, dlq)
		}
	}
	// Every dead-letter queue of the template is watched.
	for id, q := range tp.ofType("AWS::SQS::Queue") {
		if dl, _ := ref(get(q, "RedrivePolicy", "deadLetterTargetArn")); dl != "" && !watched(tp, dl) {
			t.Errorf("%s's dead-letter queue %s has no alarm", id, dl)
		}
	}
}

func watched(tp tmpl, queue string) bool {
	for _, a := range tp.ofType("AWS::CloudWatch::Alarm") {
		if a["Namespace"] == "AWS/SQS" && a["MetricName"] == "ApproximateNumberOfMessagesVisible" {
			if id, attr := ref(get(a, "Dimensions", 0, "Value")); id == queue && attr == "QueueName" {
				return true
			}
		}
	}
	return false
}

var idRE = regexp.MustCompile(`^[a-z][a-zA-Z0-9_]*$`)

// Alarm shapes AWS accepts and operators can act on: a metric-math alarm
// has Metrics and none of MetricName, Namespace, Statistic, Period, exactly
// one ReturnData expression and ids starting lower case; a single-metric
// alarm has a Statistic and a Period that is a multiple of 60. Every alarm
// says what to do, treats missing data as not breaching (no traffic is not
// an incident) and notifies the topic both ways.
func TestAlarmsAreWellFormedAndActionable(t *testing.T) {
	t.Parallel()
	tp := loadTemplate(t)
	alarms := tp.ofType("AWS::CloudWatch::Alarm")
	for id, a := range alarms {
		if d, _ := a["AlarmDescription"].(string); len(d) < 80 || len(d) > 1024 {
			t.Errorf("%s: AlarmDescription of %d characters: want what to do, within CloudWatch's 1024", id, len(d))
		}
		if a["TreatMissingData"] != "notBreaching" || a["AlarmActions"] == nil || a["OKActions"] == nil {
			t.Errorf("%s: want TreatMissingData notBreaching, AlarmActions and OKActions", id)
		}
		if ms, ok := a["Metrics"].([]any); ok {
			for _, k := range []string{"MetricName", "Namespace", "Statistic", "ExtendedStatistic", "Period", "Dimensions"} {
				if a[k] != nil {
					t.Errorf("%s: a metric-math alarm must not set %s", id, k)
				}
			}
			returned := 0
			for _, m := range ms {
				if !idRE.MatchString(get(m, "Id").(string)) {
					t.Errorf("%s: metric id %v must start with a lower-case letter", id, get(m, "Id"))
				}
				if get(m, "ReturnData") == true {
					returned++
				}
				if p, ok := get(m, "MetricStat", "Period").(int); ok && p%60 != 0 {
					t.Errorf("%s: period %d", id, p)
				}
			}
			if returned != 1 || len(ms) > 10 {
				t.Errorf("%s: %d ReturnData metrics of %d, want exactly 1 of at most 10", id, returned, len(ms))
			}
			continue
		}
		if p, ok := a["Period"].(int); !ok || p%60 != 0 || a["Statistic"] == nil {
			t.Errorf("%s: want a Statistic and a Period multiple of 60", id)
		}
	}
	for _, want := range []string{"WebhookDeadLetteredAlarm", "WebhookFailureRatioAlarm", "MalformedMessagesAlarm",
		"ResultsRefusedAlarm", "DispatchScheduleDeadLetterAlarm", "ConnectionsHeldAlarm"} {
		if alarms[want] == nil {
			t.Errorf("no %s", want)
		}
	}
}

// The stack outputs the dashboard's URL.
func TestDashboardURLIsAnOutput(t *testing.T) {
	t.Parallel()
	tp := loadTemplate(t)
	var dash string
	for id := range tp.ofType("AWS::CloudWatch::Dashboard") {
		dash = id
	}
	url, _ := get(tp, "Outputs", "DashboardUrl", "Value", "Fn::Sub").(string)
	if !strings.Contains(url, "console.aws.amazon.com/cloudwatch/home") || !strings.Contains(url, "${"+dash+"}") {
		t.Errorf("Outputs.DashboardUrl %q does not link dashboard %s", url, dash)
	}
	// The alarm widget lists every alarm.
	var listed []string
	for _, w := range get(dashboardBody(t, tp), "widgets").([]any) {
		if get(w, "type") == "alarm" {
			for _, a := range strs(get(w, "properties", "alarms")) {
				listed = append(listed, strings.TrimSuffix(strings.TrimPrefix(a, "<"), ".Arn>"))
			}
		}
	}
	sort.Strings(listed)
	if got, want := strings.Join(listed, " "), strings.Join(sortedKeys(tp.ofType("AWS::CloudWatch::Alarm")), " "); got != want {
		t.Errorf("alarm widget lists %s\nthe template has %s", got, want)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var readmeAlarmRow = regexp.MustCompile("(?m)^\\| `([A-Za-z0-9]+Alarm)` \\|")

// docs/operations.md's alarm table has one row per alarm of the template, no more.
func TestReadmeAlarmTableMatchesTemplate(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, m := range readmeAlarmRow.FindAllStringSubmatch(string(raw), -1) {
		rows = append(rows, m[1])
	}
	sort.Strings(rows)
	if got, want := strings.Join(rows, " "), strings.Join(sortedKeys(loadTemplate(t).ofType("AWS::CloudWatch::Alarm")), " "); got != want {
		t.Errorf("docs/operations.md alarm table rows:\n%s\ntemplate alarms:\n%s", got, want)
	}
}

// Only the operator tools link the SDK's default configuration chain (SSO,
// STS, IMDS, shared files); the functions' bootstraps stay lean.
func TestFunctionsDoNotLinkTheDefaultConfigChain(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps", "-tags", "lambda.norpc", "./functions/...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "github.com/aws/aws-sdk-go-v2/config" || strings.HasPrefix(pkg, "github.com/aws/aws-sdk-go-v2/credentials") ||
			strings.HasSuffix(pkg, "/internal/opsaws") || strings.Contains(pkg, "/service/sso") {
			t.Errorf("a function links %s", pkg)
		}
	}
	cmd = exec.Command("go", "list", "-deps", "./infra/outboxctl", "./infra/demo")
	cmd.Dir = repoRoot
	out, err = cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "github.com/aws/aws-sdk-go-v2/config\n") {
		t.Error("the operator tools do not use the default configuration chain")
	}
}

// The functions that consume the dead-letter queue and apply retention need
// none of the pipeline: they start on internal/appbase, and their
// bootstraps link neither internal/app nor what it brings (the providers,
// the credential resolver, EventBridge; 0.5 MiB of each bootstrap).
func TestLightFunctionsDoNotLinkThePipeline(t *testing.T) {
	t.Parallel()
	for _, fn := range []string{"release-dead-letters", "retention"} {
		cmd := exec.Command("go", "list", "-deps", "-tags", "lambda.norpc", "./functions/"+fn)
		cmd.Dir = repoRoot
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, "integration-outbox/internal/appbase") {
			t.Fatalf("functions/%s does not start on internal/appbase; its dependencies look wrong:\n%s", fn, out)
		}
		for _, pkg := range deps {
			if pkg == "integration-outbox/internal/app" || pkg == "integration-outbox/internal/provider" ||
				pkg == "integration-outbox/internal/credential" || strings.HasSuffix(pkg, "/service/eventbridge") {
				t.Errorf("functions/%s links %s", fn, pkg)
			}
		}
	}
}
