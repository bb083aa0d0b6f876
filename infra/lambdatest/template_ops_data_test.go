package lambdatest_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"integration-outbox/internal/testenv/cfntemplate"
)

// loadTemplateMap reads template.yaml into maps and lists, the short-form
// intrinsics (!Ref, !GetAtt, !If...) turned into their long form
// ({"Ref": …}, {"Fn::GetAtt": …}).
func loadTemplateMap(t *testing.T) map[string]any {
	t.Helper()
	return cfntemplate.Load(t, filepath.Join(repoRoot, "template.yaml")).Map(t)
}

// at walks a path of keys through the template.
func at(t *testing.T, v any, path ...string) any {
	t.Helper()
	for i, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s is not a mapping", strings.Join(path[:i], "."))
		}
		if v, ok = m[k]; !ok {
			t.Fatalf("template.yaml has no %s", strings.Join(path[:i+1], "."))
		}
	}
	return v
}

func str(v any) string { return fmt.Sprint(v) }

// statements returns a role's inline policy statements, the conditional
// ones (!If [cond, statement, NoValue]) unwrapped.
func statements(t *testing.T, tmpl map[string]any, role string) []map[string]any {
	t.Helper()
	policies := at(t, tmpl, "Resources", role, "Properties", "Policies").([]any)
	var out []map[string]any
	for _, p := range policies {
		for _, s := range at(t, p, "PolicyDocument", "Statement").([]any) {
			st := s.(map[string]any)
			if cond, ok := st["Fn::If"].([]any); ok {
				st = cond[1].(map[string]any)
			}
			out = append(out, st)
		}
	}
	return out
}

func actions(st map[string]any) []string {
	switch a := st["Action"].(type) {
	case []any:
		var out []string
		for _, x := range a {
			out = append(out, str(x))
		}
		return out
	default:
		return []string{str(a)}
	}
}

// The read-only inspect function and the retention function: each has its
// own role granting its logs, X-Ray tracing, the database secret and (with a customer key)
// decrypting it through Secrets Manager; nothing else, and never SQS or
// the provider credentials.
func TestInspectAndRetentionRolesAreLeastPrivilege(t *testing.T) {
	tmpl := loadTemplateMap(t)
	for _, fn := range []struct{ function, role, logGroup string }{
		{"InspectFunction", "InspectRole", "InspectLogGroup"},
		{"RetentionFunction", "RetentionRole", "RetentionLogGroup"},
	} {
		t.Run(fn.function, func(t *testing.T) {
			props := at(t, tmpl, "Resources", fn.function, "Properties")
			if got := str(at(t, props, "Role")); got != str(map[string]any{"Fn::GetAtt": fn.role + ".Arn"}) {
				t.Errorf("%s.Role = %s, want its own %s", fn.function, got, fn.role)
			}
			if got := str(at(t, props, "LoggingConfig", "LogGroup")); got != str(map[string]any{"Ref": fn.logGroup}) {
				t.Errorf("%s logs to %s, want %s", fn.function, got, fn.logGroup)
			}
			if days := str(at(t, tmpl, "Resources", fn.logGroup, "Properties", "RetentionInDays")); days != str(map[string]any{"Ref": "LogRetentionInDays"}) {
				t.Errorf("%s retention %s", fn.logGroup, days)
			}
			want := map[string][]string{
				"Logs":           {"logs:CreateLogStream", "logs:PutLogEvents"},
				"DatabaseSecret": {"secretsmanager:GetSecretValue"},
				"DecryptSecrets": {"kms:Decrypt"}, // the push role alone adds kms:GenerateDataKey
				"Tracing":        {"xray:PutTraceSegments", "xray:PutTelemetryRecords"},
			}
			resources := map[string]string{
				"Logs":           str(map[string]any{"Fn::GetAtt": fn.logGroup + ".Arn"}),
				"DatabaseSecret": str(map[string]any{"Ref": "DatabaseSecretArn"}),
				"DecryptSecrets": str(map[string]any{"Ref": "SecretsKmsKeyArn"}),
				"Tracing":        "*", // X-Ray has no resource-level permissions
			}
			sts := statements(t, tmpl, fn.role)
			var sids []string
			for _, st := range sts {
				sid := str(st["Sid"])
				sids = append(sids, sid)
				if st["Effect"] != "Allow" {
					t.Errorf("%s: effect %v", sid, st["Effect"])
				}
				if !slices.Equal(actions(st), want[sid]) {
					t.Errorf("%s %s: actions %v, want %v", fn.role, sid, actions(st), want[sid])
				}
				if got := str(st["Resource"]); got != resources[sid] {
					t.Errorf("%s %s: resource %s, want %s", fn.role, sid, got, resources[sid])
				}
			}
			slices.Sort(sids)
			if !slices.Equal(sids, []string{"DatabaseSecret", "DecryptSecrets", "Logs", "Tracing"}) {
				t.Errorf("%s statements %v, want Logs, Tracing, DatabaseSecret, DecryptSecrets only", fn.role, sids)
			}
		})
	}
}

// Operators get a policy that invokes the inspect function and nothing else.
func TestInspectInvokePolicyAllowsOnlyInvokingInspect(t *testing.T) {
	tmpl := loadTemplateMap(t)
	sts := at(t, tmpl, "Resources", "InspectInvokePolicy", "Properties", "PolicyDocument", "Statement").([]any)
	if len(sts) != 1 {
		t.Fatalf("%d statements, want 1", len(sts))
	}
	st := sts[0].(map[string]any)
	if !slices.Equal(actions(st), []string{"lambda:InvokeFunction"}) || str(st["Resource"]) != str(map[string]any{"Fn::GetAtt": "InspectFunction.Arn"}) {
		t.Errorf("statement %v", st)
	}
	if _, ok := at(t, tmpl, "Resources", "InspectFunction", "Properties").(map[string]any)["Events"]; ok {
		t.Error("the inspect function is invoked by operators only: it has no event source")
	}
}

// Retention is off unless RetentionAge is set: the parameter defaults to
// empty, the function gets it as RETENTION_AGE, and its schedule is
// enabled only when it is set.
func TestRetentionIsOffUnlessConfigured(t *testing.T) {
	tmpl := loadTemplateMap(t)
	if d := str(at(t, tmpl, "Parameters", "RetentionAge", "Default")); d != "" {
		t.Errorf("RetentionAge defaults to %q, want empty (off)", d)
	}
	cond := str(at(t, tmpl, "Conditions", "RetentionEnabled"))
	if want := str(map[string]any{"Fn::Not": []any{map[string]any{"Fn::Equals": []any{map[string]any{"Ref": "RetentionAge"}, ""}}}}); cond != want {
		t.Errorf("RetentionEnabled = %s, want %s", cond, want)
	}
	props := at(t, tmpl, "Resources", "RetentionFunction", "Properties")
	if got := str(at(t, props, "Environment", "Variables", "RETENTION_AGE")); got != str(map[string]any{"Ref": "RetentionAge"}) {
		t.Errorf("RETENTION_AGE = %s", got)
	}
	sched := at(t, props, "Events", "Schedule")
	if str(at(t, sched, "Type")) != "ScheduleV2" ||
		str(at(t, sched, "Properties", "State")) != str(map[string]any{"Fn::If": []any{"RetentionEnabled", "ENABLED", "DISABLED"}}) {
		t.Errorf("retention schedule %v", sched)
	}
	if str(at(t, props, "ReservedConcurrentExecutions")) != "1" {
		t.Error("two retention runs could overlap")
	}
}

// Only the push functions (purchase orders, suppliers) write secrets back
// (refreshed OAuth2 tokens), and only the secrets they may already read:
// PutSecretValue has the resource and the conditions of the statement that
// grants it GetSecretValue on the provider credentials. No role may write the database secret.
func TestTemplateSecretWriteBackOnlyWhereThePushFunctionReads(t *testing.T) {
	tmpl := loadTemplateMap(t)
	resources := at(t, tmpl, "Resources").(map[string]any)
	for id, r := range resources {
		if str(r.(map[string]any)["Type"]) != "AWS::IAM::Role" {
			continue
		}
		var reads, writes []map[string]any
		for _, st := range statements(t, tmpl, id) {
			acts := actions(st)
			if slices.Contains(acts, "secretsmanager:PutSecretValue") || slices.Contains(acts, "secretsmanager:*") {
				writes = append(writes, st)
			}
			if slices.Contains(acts, "secretsmanager:GetSecretValue") && str(st["Resource"]) != str(map[string]any{"Ref": "DatabaseSecretArn"}) {
				reads = append(reads, st)
			}
		}
		if id != "PushPurchaseOrderRole" && id != "PushSupplierRole" {
			if len(writes) > 0 {
				t.Errorf("%s may write secrets: %v", id, writes)
			}
			continue
		}
		if len(writes) != 1 || len(reads) != 1 {
			t.Fatalf("%s: %d statements write secrets and %d read provider credentials, want 1 each", id, len(writes), len(reads))
		}
		w, rd := writes[0], reads[0]
		if !slices.Equal(actions(w), []string{"secretsmanager:PutSecretValue"}) {
			t.Errorf("the write-back statement grants %v, want secretsmanager:PutSecretValue only", actions(w))
		}
		if str(w["Resource"]) != str(rd["Resource"]) {
			t.Errorf("PutSecretValue on %s, but GetSecretValue on %s", str(w["Resource"]), str(rd["Resource"]))
		}
		if str(w["Condition"]) != str(rd["Condition"]) {
			t.Errorf("PutSecretValue under condition %s, but GetSecretValue under %s", str(w["Condition"]), str(rd["Condition"]))
		}
		if w["Effect"] != "Allow" || w["NotResource"] != nil || w["NotAction"] != nil {
			t.Errorf("write-back statement %v", w)
		}
	}
}

// The dispatch function checks whether the host reconnected a connection
// needing reauthorization: it may describe the provider credential secrets
// (their versions) and read none of their values, on the resource the push
// function reads them on.
func TestTemplateDispatchDescribesProviderSecretsButReadsNone(t *testing.T) {
	tmpl := loadTemplateMap(t)
	var describe, pushRead map[string]any
	for _, st := range statements(t, tmpl, "DispatchRole") {
		acts := actions(st)
		if slices.Contains(acts, "secretsmanager:GetSecretValue") && str(st["Resource"]) != str(map[string]any{"Ref": "DatabaseSecretArn"}) {
			t.Errorf("the dispatch role may read provider secret values: %v", st)
		}
		if slices.Contains(acts, "secretsmanager:DescribeSecret") {
			describe = st
		}
	}
	for _, st := range statements(t, tmpl, "PushPurchaseOrderRole") {
		if slices.Contains(actions(st), "secretsmanager:GetSecretValue") && str(st["Resource"]) != str(map[string]any{"Ref": "DatabaseSecretArn"}) {
			pushRead = st
		}
	}
	if describe == nil || pushRead == nil {
		t.Fatalf("dispatch DescribeSecret statement %v, push provider-secret read statement %v", describe, pushRead)
	}
	if !slices.Equal(actions(describe), []string{"secretsmanager:DescribeSecret"}) {
		t.Errorf("the dispatch statement grants %v, want secretsmanager:DescribeSecret only", actions(describe))
	}
	if str(describe["Resource"]) != str(pushRead["Resource"]) {
		t.Errorf("DescribeSecret on %s, the push function reads on %s", str(describe["Resource"]), str(pushRead["Resource"]))
	}
}
