package lambdatest_test

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// commandQueue is one command type's deployment: its queue, the function
// consuming it and the queue's dead-letter queue.
type commandQueue struct {
	queue, deadLetters, function, role, logGroup, folder string
}

// commandQueues finds every command queue of the template: a queue that a
// function consumes and that has a dead-letter queue (a dead-letter queue's
// own consumer, release-dead-letters, is not a command function).
func commandQueues(t *testing.T) []commandQueue {
	t.Helper()
	c := loadTemplate(t)
	tmpl := loadTemplateMap(t)
	dlqs := c.deadLetterSources()
	var out []commandQueue
	for _, queue := range c.resourcesOfType("AWS::SQS::Queue") {
		dlq, ok := c.redriveTarget(queue)
		if !ok || len(dlqs[queue]) > 0 {
			continue
		}
		for _, ev := range c.sqsEventSources()[queue] {
			props := at(t, tmpl, "Resources", ev.function, "Properties")
			role, _, _ := strings.Cut(str(at(t, props, "Role").(map[string]any)["Fn::GetAtt"]), ".")
			logGroup := str(at(t, props, "LoggingConfig", "LogGroup").(map[string]any)["Ref"])
			folder, _ := strings.CutPrefix(str(at(t, props, "CodeUri")), "functions/")
			out = append(out, commandQueue{queue: queue, deadLetters: dlq, function: ev.function, role: role,
				logGroup: logGroup, folder: folder})
		}
	}
	return out
}

// Each command type is deployed like the first: push_purchase_order and
// push_supplier are found, and every command queue
//   - is named to the dispatch and rerun functions (an environment
//     variable holding its URL) and theirs to send to (sqs:SendMessage);
//   - has the purchase-order queue's properties (only its dead-letter
//     target differs), and its dead-letter queue the purchase-order one's;
//   - is consumed by its own function with ReportBatchItemFailures and a
//     ScalingConfig, whose role has the purchase-order function's grants
//     (the same statements) on its own log group and queue;
//   - has its dead-letter queue consumed by release-dead-letters, whose
//     role may poll it;
//   - has the purchase-order function's alarms (Lambda errors and
//     throttles, queue age, dead-letter depth and age, malformed messages,
//     refused results, schema errors), its queues and function on the
//     dashboard, and its function and queue URLs as outputs.
func TestTemplateEveryCommandIsDeployedLikeTheFirst(t *testing.T) {
	tmpl := loadTemplateMap(t)
	cmds := commandQueues(t)
	byQueue := map[string]commandQueue{}
	for _, q := range cmds {
		byQueue[q.queue] = q
	}
	first, ok := byQueue["PushPurchaseOrderQueue"]
	if !ok || byQueue["PushSupplierQueue"].function != "PushSupplierFunction" || byQueue["PushSupplierQueue"].folder != "push-supplier" {
		t.Fatalf("command queues %v: want PushPurchaseOrderQueue and PushSupplierQueue (PushSupplierFunction, functions/push-supplier)", cmds)
	}
	resource := func(id string) map[string]any { return at(t, tmpl, "Resources", id).(map[string]any) }
	props := func(id string) map[string]any { return at(t, tmpl, "Resources", id, "Properties").(map[string]any) }
	getAttArn := func(id string) string { return str(map[string]any{"Fn::GetAtt": id + ".Arn"}) }
	allows := func(role, action, res string) bool {
		for _, st := range statements(t, tmpl, role) {
			if st["Effect"] != "Allow" || !slices.Contains(actions(st), action) {
				continue
			}
			rs, ok := st["Resource"].([]any)
			if !ok {
				rs = []any{st["Resource"]}
			}
			for _, r := range rs {
				if str(r) == res {
					return true
				}
			}
		}
		return false
	}
	globalsEnv := at(t, tmpl, "Globals", "Function", "Environment", "Variables").(map[string]any)
	alarms := map[string]string{} // "metric dimension=value" → alarm
	for id, r := range at(t, tmpl, "Resources").(map[string]any) {
		res := r.(map[string]any)
		if str(res["Type"]) != "AWS::CloudWatch::Alarm" {
			continue
		}
		p := res["Properties"].(map[string]any)
		if p["MetricName"] == nil {
			continue
		}
		key := str(p["Namespace"]) + "/" + str(p["MetricName"])
		for _, d := range p["Dimensions"].([]any) {
			key += " " + str(d.(map[string]any)["Name"]) + "=" + str(d.(map[string]any)["Value"])
		}
		alarms[key] = id
	}
	dashboard := str(at(t, tmpl, "Resources", "OperationsDashboard", "Properties", "DashboardBody").(map[string]any)["Fn::Sub"])
	outputs := map[string]bool{}
	for _, o := range at(t, tmpl, "Outputs").(map[string]any) {
		outputs[str(o.(map[string]any)["Value"])] = true
	}
	renamed := func(q commandQueue, v any) string { // first's names → q's, to compare grants and properties
		s := str(v)
		for _, pair := range [][2]string{{first.deadLetters, q.deadLetters}, {first.queue, q.queue}, {first.logGroup, q.logGroup},
			{first.function, q.function}, {first.role, q.role}, {first.folder, q.folder}} {
			s = strings.ReplaceAll(s, pair[0], pair[1])
		}
		return s
	}

	for _, q := range cmds {
		t.Run(q.function, func(t *testing.T) {
			// Routed: dispatch and rerun get its URL and may send to it.
			var envVars []string
			for name, v := range globalsEnv {
				if str(v) == str(map[string]any{"Ref": q.queue}) {
					envVars = append(envVars, name)
				}
			}
			if len(envVars) != 1 || !strings.HasPrefix(envVars[0], "PUSH_") || !strings.HasSuffix(envVars[0], "_QUEUE_URL") {
				t.Errorf("Globals environment names %s as %v, want one PUSH_<COMMAND>_QUEUE_URL", q.queue, envVars)
			}
			for _, role := range []string{"DispatchRole", "RerunRole"} {
				if !allows(role, "sqs:SendMessage", getAttArn(q.queue)) {
					t.Errorf("%s may not send to %s", role, q.queue)
				}
			}

			// The queues: the first command's properties.
			for _, pair := range [][2]string{{first.queue, q.queue}, {first.deadLetters, q.deadLetters}} {
				if got, want := str(resource(pair[1])), renamed(q, resource(pair[0])); got != want {
					t.Errorf("%s:\n%s\nwant %s's:\n%s", pair[1], got, pair[0], want)
				}
			}

			// Its function: its own log group and role, the first's grants.
			fp := props(q.function)
			ev := at(t, fp, "Events").(map[string]any)
			var event map[string]any
			for _, e := range ev {
				if ep := e.(map[string]any)["Properties"].(map[string]any); str(ep["Queue"]) == getAttArn(q.queue) {
					event = ep
				}
			}
			if event == nil || !slices.ContainsFunc(event["FunctionResponseTypes"].([]any), func(v any) bool { return v == "ReportBatchItemFailures" }) ||
				event["ScalingConfig"] == nil || event["BatchSize"] == nil {
				t.Errorf("%s's SQS event %v: want ReportBatchItemFailures, ScalingConfig and BatchSize", q.function, event)
			}
			for _, other := range cmds {
				if other.function != q.function && (other.role == q.role || other.logGroup == q.logGroup) {
					t.Errorf("%s shares its role or log group with %s", q.function, other.function)
				}
			}
			if got, want := str(props(q.role)), renamed(q, props(first.role)); got != want {
				t.Errorf("%s grants:\n%s\nwant %s's on its own log group and queue:\n%s", q.role, got, first.role, want)
			}
			fpWithout, firstWithout := maps.Clone(fp), maps.Clone(props(first.function))
			delete(fpWithout, "Description")
			delete(firstWithout, "Description")
			if got, want := str(fpWithout), renamed(q, firstWithout); got != want {
				t.Errorf("%s:\n%s\nwant %s's:\n%s", q.function, got, first.function, want)
			}

			// Its dead letters are released.
			released := false
			for _, e := range at(t, tmpl, "Resources", "ReleaseDeadLettersFunction", "Properties", "Events").(map[string]any) {
				released = released || str(e.(map[string]any)["Properties"].(map[string]any)["Queue"]) == getAttArn(q.deadLetters)
			}
			if !released || !allows("ReleaseDeadLettersRole", "sqs:ReceiveMessage", getAttArn(q.deadLetters)) ||
				!allows("ReleaseDeadLettersRole", "sqs:DeleteMessage", getAttArn(q.deadLetters)) {
				t.Errorf("release-dead-letters does not consume %s (event %v)", q.deadLetters, released)
			}

			// Alarms, dashboard, outputs.
			queueName := str(map[string]any{"Fn::GetAtt": q.queue + ".QueueName"})
			dlqName := str(map[string]any{"Fn::GetAtt": q.deadLetters + ".QueueName"})
			fnRef := str(map[string]any{"Ref": q.function})
			for _, want := range []string{
				"AWS/Lambda/Errors FunctionName=" + fnRef,
				"AWS/Lambda/Throttles FunctionName=" + fnRef,
				"AWS/SQS/ApproximateAgeOfOldestMessage QueueName=" + queueName,
				"AWS/SQS/ApproximateNumberOfMessagesVisible QueueName=" + dlqName,
				"AWS/SQS/ApproximateAgeOfOldestMessage QueueName=" + dlqName,
				"IntegrationOutbox/MalformedMessages Function=" + q.folder,
				"IntegrationOutbox/ResultsNotRecorded Function=" + q.folder,
				"IntegrationOutbox/SchemaErrors Function=" + q.folder,
				"IntegrationOutbox/DeadLettered Function=" + q.folder + " Provider=webhook",
			} {
				if alarms[want] == "" {
					t.Errorf("no alarm on %s", want)
				}
			}
			for _, want := range []string{"${" + q.queue + ".QueueName}", "${" + q.deadLetters + ".QueueName}", "${" + q.function + "}"} {
				if !strings.Contains(dashboard, want) {
					t.Errorf("the dashboard does not show %s", want)
				}
			}
			for _, want := range []any{map[string]any{"Fn::GetAtt": q.function + ".Arn"}, map[string]any{"Ref": q.queue},
				map[string]any{"Ref": q.deadLetters}} {
				if !outputs[str(want)] {
					t.Errorf("no output of %s", str(want))
				}
			}
		})
	}
}
