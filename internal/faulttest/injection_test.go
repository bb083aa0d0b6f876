package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// injections are SQL injection attempts; each would drop, empty or widen
// something if it were ever spliced into SQL text.
var injections = []string{
	`'; drop table external_integration_outbox; --`,
	`x' or '1'='1`,
	`'); delete from purchase_orders; --`,
	`"; truncate purchase_order_lines cascade; --`,
	`$1); update integration_connections set organization_id = gen_random_uuid(); --`,
	`\'; drop table external_integration_conflicts; --`,
	`%' union select credential_reference from integration_connections --`,
}

// tableState is a fingerprint of every table's rows.
func tableState(t *testing.T, db outbox.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range []string{"external_integration_outbox", "integration_connections", "purchase_orders",
		"purchase_order_lines", "external_integration_conflicts", "external_integration_rerun_audit"} {
		var state string
		err := db.QueryRow(context.Background(), fmt.Sprintf(
			`select count(*)::text || ':' || coalesce(md5(string_agg(to_jsonb(t)::text, ',' order by t.id)), '') from %s t`,
			table)).Scan(&state)
		if err != nil {
			t.Fatalf("table %s: %v", table, err)
		}
		out[table] = state
	}
	return out
}

// TestSQLInjectionInEveryStringFieldIsData puts injection attempts in every
// string that reaches a query: payload_json values, idempotency keys, order
// numbers, config_json, credential_reference, provider and command type
// names, SQS body fields and the console's organizationId. None executes:
// the valid ones travel to the provider byte for byte, the invalid ones are
// refused with a clear error, and the tables stay intact.
func TestSQLInjectionInEveryStringFieldIsData(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	rc := testenv.NewReceiver(t, testenv.Reply(200, `{"id":"EXT"}`))
	org := e.f.NewID(t)

	type sent struct{ supplier, key, orderNumber, path string }
	delivered := map[string]sent{} // row -> what the provider must receive
	refused := map[string]expectRow{}
	what := map[string]string{}
	for i, inj := range injections {
		po := e.f.PurchaseOrder(t, org, "", 1)
		if _, err := e.f.Pool.Exec(ctx, `update purchase_orders set order_number = $1 where id = $2`, inj, po); err != nil {
			t.Fatal(err)
		}
		hookURL := rc.URL + "/hook?q=" + url.QueryEscape(inj)
		conn := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
			Config: map[string]string{"url": hookURL, inj: inj}})
		key := fmt.Sprintf("%s#%d", inj, i)
		id := e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "webhook", EntityID: po,
			IdempotencyKey: key, Payload: map[string]any{"externalSupplierId": inj, inj: inj}})
		delivered[id] = sent{supplier: inj, key: key, orderNumber: inj, path: "/hook?q=" + url.QueryEscape(inj)}
		what[id] = "valid row carrying " + inj

		bad := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook",
			CredentialReference: "integrations/" + inj, Config: map[string]string{"url": rc.URL}})
		id = e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: bad, Provider: "webhook", EntityID: e.f.PurchaseOrder(t, org, "", 1)})
		refused[id] = expectRow{"dead_letter", "credential_rejected", "credential_reference"}
		what[id] = "credential_reference " + inj

		other := e.f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: inj})
		id = e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: other, Provider: inj, EntityID: e.f.PurchaseOrder(t, org, "", 1)})
		refused[id] = expectRow{"unsupported", "", "is not supported"}
		what[id] = "provider " + inj

		id = e.f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, CommandType: inj, EntityID: e.f.PurchaseOrder(t, org, "", 1)})
		refused[id] = expectRow{"unsupported", "", "unsupported command type"}
		what[id] = "command_type " + inj
	}

	// Outside input that must change nothing at all: SQS bodies and console
	// events carrying the injections.
	before := tableState(t, e.f.Pool)
	w := e.worker(t, workerOpts{})
	valid := message.Message{OutboxID: e.f.NewID(t), OrganizationID: org, ConnectionID: e.f.NewID(t),
		CommandType: "push_purchase_order", ClaimToken: e.f.NewID(t)}
	var junk []events.SQSMessage
	for i, inj := range injections {
		for _, field := range []string{"outboxId", "organizationId", "connectionId", "commandType", "claimToken", inj} {
			body := map[string]string{"outboxId": valid.OutboxID, "organizationId": valid.OrganizationID,
				"connectionId": valid.ConnectionID, "commandType": valid.CommandType, "claimToken": valid.ClaimToken}
			body[field] = inj
			raw, _ := json.Marshal(body)
			junk = append(junk, events.SQSMessage{MessageId: fmt.Sprintf("junk-%d-%s", i, field), Body: string(raw)})
		}
		junk = append(junk, events.SQSMessage{MessageId: fmt.Sprintf("raw-%d", i), Body: inj})
	}
	if resp := e.handle(t, w, junk); len(resp.BatchItemFailures) != 0 {
		t.Errorf("junk bodies reported as failures: %v", resp.BatchItemFailures)
	}
	d := e.dispatcher(t, nil, 15*time.Minute, 50)
	for _, inj := range injections {
		for _, ev := range []string{
			fmt.Sprintf(`{"organizationId":%q}`, inj),
			fmt.Sprintf(`{"limit":1,%q:1}`, inj),
			fmt.Sprintf(`{"limit":%q}`, inj),
		} {
			s, err := d.Handle(ctx, json.RawMessage(ev))
			if err == nil || !strings.HasPrefix(err.Error(), "dispatch event: ") || s != (dispatch.Summary{}) {
				t.Errorf("console event %s: %+v, %v; want a clear error and nothing claimed", ev, s, err)
			}
		}
	}
	if after := tableState(t, e.f.Pool); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("junk input changed the tables:\nbefore %v\nafter  %v", before, after)
	}
	if rc.Calls() != 0 || e.q.len() != 0 {
		t.Fatalf("junk input reached the provider (%d) or the queue (%d)", rc.Calls(), e.q.len())
	}

	// The rows themselves.
	e.dispatch(t, 15*time.Minute)
	e.drain(t, w)
	checkRows(t, e, refused, what)
	all := checkEveryRow(t, e.f.Pool)
	got := map[string]testenv.Request{}
	for _, r := range rc.Requests() {
		got[r.Header.Get("Idempotency-Key")] = r
	}
	for id, s := range delivered {
		if r := all[id]; r.Status != "completed" {
			t.Errorf("%s: %s (%s)", what[id], r.Status, r.LastError)
		}
		req, ok := got[s.key]
		if !ok {
			t.Errorf("%s: the provider got no request with Idempotency-Key %q", what[id], s.key)
			continue
		}
		po, _ := req.Body["purchaseOrder"].(map[string]any)
		if req.Body["externalSupplierId"] != s.supplier || req.Body["idempotencyKey"] != s.key ||
			po["orderNumber"] != s.orderNumber || req.URI != s.path {
			t.Errorf("%s: the provider got %s %v", what[id], req.URI, req.Body)
		}
	}
	if n := rc.Calls(); n != len(delivered) {
		t.Errorf("provider got %d requests, want %d", n, len(delivered))
	}
	// Every table still there, with everything the test created.
	for table, state := range tableState(t, e.f.Pool) {
		if strings.HasPrefix(state, "0:") && table != "external_integration_rerun_audit" {
			t.Errorf("table %s is empty", table)
		}
	}
	var orgs int
	if err := e.f.Pool.QueryRow(ctx, `select count(distinct organization_id) from integration_connections`).Scan(&orgs); err != nil || orgs != 1 {
		t.Errorf("integration_connections span %d organizations (%v), want 1", orgs, err)
	}
}
