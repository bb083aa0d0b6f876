package lambdatest_test

import (
	"slices"
	"strings"
	"testing"
)

// Events: the EventBusName parameter (default "default"; empty turns events
// off) reaches every function as EVENT_BUS_NAME, and only the functions that
// publish (dispatch, the push functions push-purchase-order and
// push-supplier right after their record, and rerun for its dispatchNow)
// may call
// events:PutEvents, on that bus's ARN only, and only when it is set. No
// other role names an events: action.
func TestEventBusParameterAndPutEventsPermission(t *testing.T) {
	tmpl := loadTemplateMap(t)
	p := at(t, tmpl, "Parameters", "EventBusName").(map[string]any)
	if str(p["Default"]) != "default" || p["Type"] != "String" {
		t.Errorf("EventBusName %v, want a String defaulting to the account's default bus", p)
	}
	if got := str(at(t, tmpl, "Globals", "Function", "Environment", "Variables", "EVENT_BUS_NAME")); got != str(map[string]any{"Ref": "EventBusName"}) {
		t.Errorf("EVENT_BUS_NAME = %s, want the EventBusName parameter", got)
	}
	if got := str(at(t, tmpl, "Conditions", "HasEventBus")); !strings.Contains(got, "EventBusName") {
		t.Errorf("HasEventBus = %s", got)
	}
	wantARN := str(map[string]any{"Fn::Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:event-bus/${EventBusName}"})
	publishers := []string{"DispatchRole", "PushPurchaseOrderRole", "PushSupplierRole", "RerunRole"}
	for id, r := range at(t, tmpl, "Resources").(map[string]any) {
		if str(at(t, r, "Type")) != "AWS::IAM::Role" {
			continue
		}
		var found int
		for _, st := range statements(t, tmpl, id) {
			for _, a := range actions(st) {
				if !strings.HasPrefix(a, "events:") {
					continue
				}
				found++
				if a != "events:PutEvents" || str(st["Resource"]) != wantARN || st["Effect"] != "Allow" {
					t.Errorf("%s: %s on %s, want events:PutEvents on the EventBusName bus only", id, a, str(st["Resource"]))
				}
			}
		}
		if want := slices.Contains(publishers, id); (found == 1) != want {
			t.Errorf("%s has %d events: statements; want %v", id, found, map[bool]string{true: "one", false: "none"}[want])
		}
	}
	// The statement is conditional: with EventBusName empty no role may
	// publish at all.
	for _, role := range publishers {
		conditional := false
		for _, p := range at(t, tmpl, "Resources", role, "Properties", "Policies").([]any) {
			for _, s := range at(t, p, "PolicyDocument", "Statement").([]any) {
				if c, ok := s.(map[string]any)["Fn::If"].([]any); ok && c[0] == "HasEventBus" {
					conditional = true
				}
			}
		}
		if !conditional {
			t.Errorf("%s: the PutEvents statement is not under HasEventBus", role)
		}
	}
}
