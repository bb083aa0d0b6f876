package lambdatest_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// inspectResult is the inspect function's answer.
type inspectResult struct {
	OrganizationID string          `json:"organizationId"`
	OutboxID       string          `json:"outboxId"`
	Found          bool            `json:"found"`
	Message        string          `json:"message"`
	Row            json.RawMessage `json:"row"`
	Attempts       []struct {
		Attempt        int    `json:"attempt"`
		Outcome        string `json:"outcome"`
		ProviderCalled bool   `json:"providerCalled"`
		HTTPStatus     *int   `json:"httpStatus"`
		Error          string `json:"error"`
	} `json:"attempts"`
	Conflicts []struct {
		ID           string `json:"id"`
		ConflictType string `json:"conflictType"`
		Status       string `json:"status"`
	} `json:"conflicts"`
	Reruns  []json.RawMessage `json:"reruns"`
	Preview *struct {
		Provider string `json:"provider"`
		Method   string `json:"method"`
		Refusal  *struct {
			ConflictType string `json:"conflictType"`
			Message      string `json:"message"`
		} `json:"refusal"`
	} `json:"preview"`
	Stuck *struct {
		ExpiredLeases, AcceptedWaiting, OverdueQueued, Failed struct {
			Total int `json:"total"`
			Rows  []struct {
				ID string `json:"id"`
			} `json:"rows"`
		}
	} `json:"stuck"`
}

// seedInspect: the rerun seed and two attempts of Acme's dead-lettered row.
func (s *stack) seedInspect(t *testing.T) {
	t.Helper()
	s.seedRerun(t)
	s.exec(t, `insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at, finished_at,
			outcome, provider_called, http_status, error_excerpt)
		values ($1, $2, 9, now() - interval '2 hours', now() - interval '2 hours', 'failed', true, 503, 'webhook answered 503'),
			($1, $2, 10, now() - interval '1 hour', now() - interval '1 hour', 'dead_letter', true, 422, 'provider answered 422: unknown supplier')`,
		rerunDeadLetter, orgA)
}

func TestRIEInspectFunction(t *testing.T) {
	const folder, logicalID = "inspect", "InspectFunction"
	requireLogicalID(t, folder, logicalID)
	bin := bootstrap(t, folder)
	s := newStack(t, folder)
	// No queue: the function neither needs nor gets one.
	env := functionEnv(s.DatabaseURL, "")
	delete(env, "PUSH_PURCHASE_ORDER_QUEUE_URL")
	emu := startEmulator(t, logicalID, bin, env)

	invoke := func(t *testing.T, payload []byte) inspectResult {
		t.Helper()
		inv := emu.invoke(t, payload)
		if msg := inv.FunctionError(); msg != "" {
			t.Fatalf("function error: %s", msg)
		}
		// Only the fields checked here are decoded; the answer has more.
		var got inspectResult
		if err := json.Unmarshal(inv.Body, &got); err != nil {
			t.Fatalf("response %s: %v", inv.Body, err)
		}
		var keys map[string]json.RawMessage
		json.Unmarshal(inv.Body, &keys)
		if _, ok := keys["found"]; !ok || got.OrganizationID == "" {
			t.Errorf("response %s lacks organizationId or found", inv.Body)
		}
		return got
	}

	// Every sample event answers without a function error on an empty
	// migrated database: nothing found, nothing stuck.
	for i, ev := range events(t, folder) {
		t.Run("empty database/"+ev.Name, func(t *testing.T) {
			s.reset(t)
			got := invoke(t, ev.Payload)
			if i == 0 {
				logFirstInvoke(t, emu, bin, ev.Name)
			}
			if got.Found || (got.Stuck == nil && got.Message == "") {
				t.Errorf("on an empty database: %+v", got)
			}
			if st := got.Stuck; st != nil && st.ExpiredLeases.Total+st.AcceptedWaiting.Total+st.OverdueQueued.Total+st.Failed.Total != 0 {
				t.Errorf("stuck rows on an empty database: %+v", st)
			}
		})
	}

	s.reset(t)
	s.seedInspect(t)
	before := s.state(t)
	for _, ev := range events(t, folder) {
		t.Run("seeded/"+ev.Name, func(t *testing.T) {
			got := invoke(t, ev.Payload)
			switch ev.Name {
			case "by-id.json":
				var row map[string]any
				if err := json.Unmarshal(got.Row, &row); err != nil || !got.Found || row["id"] != rerunDeadLetter ||
					row["status"] != "dead_letter" || row["organization_id"] != orgA {
					t.Fatalf("by id: %+v (row %v)", got, err)
				}
				if len(got.Attempts) != 2 || got.Attempts[0].Attempt != 9 || got.Attempts[1].Outcome != "dead_letter" ||
					got.Attempts[1].HTTPStatus == nil || *got.Attempts[1].HTTPStatus != 422 {
					t.Errorf("attempts: %+v", got.Attempts)
				}
				if len(got.Conflicts) != 1 || got.Conflicts[0].ConflictType != "provider_rejected" || got.Conflicts[0].Status != "open" {
					t.Errorf("conflicts: %+v", got.Conflicts)
				}
				if got.Reruns == nil || len(got.Reruns) != 0 {
					t.Errorf("reruns: want an empty list, got %v", got.Reruns)
				}
			case "preview.json":
				// The seeded row's purchase order is not in the host's
				// tables: the push would refuse it before any call.
				pv := got.Preview
				if !got.Found || pv == nil || pv.Provider != "webhook" || pv.Method != "" || pv.Refusal == nil ||
					pv.Refusal.ConflictType != "entity_not_found" || !strings.Contains(pv.Refusal.Message, "purchase order") {
					t.Errorf("preview: %+v (preview %+v)", got, pv)
				}
			case "other-organization.json":
				// Acme's row read with Globex's id: not found, and nothing of it shown.
				if got.Found || got.Row != nil || got.Attempts != nil || !strings.Contains(got.Message, "not found") {
					t.Errorf("another organization's row: %+v", got)
				}
			case "stuck.json":
				st := got.Stuck
				if st == nil || st.Failed.Total != 1 || len(st.Failed.Rows) != 1 || st.Failed.Rows[0].ID != rerunFailed {
					t.Errorf("stuck: %+v", got)
				}
			default:
				t.Logf("no expectation for %s: checked that it answers", ev.Name)
			}
		})
	}
	if diffs := diffOutside(before, s.state(t), nil); len(diffs) > 0 {
		t.Errorf("inspection changed the database:\n%s", strings.Join(diffs, "\n"))
	}

	// A bad payload is a function error naming the field.
	for _, bad := range []struct{ payload, field string }{
		{`{"organizationId": "` + orgA + `", "outboxID": "` + rerunFailed + `"}`, "outboxID"},
		{`{"organizationId": "` + orgA + `", "outboxId": "not-a-uuid"}`, "outboxId"},
		{`{"outboxId": "` + rerunFailed + `"}`, "organizationId"},
		{`{"organizationId": "` + orgA + `", "stuck": true, "outboxId": "` + rerunFailed + `"}`, "stuck"},
	} {
		t.Run("rejects "+bad.field, func(t *testing.T) {
			inv := emu.invoke(t, []byte(bad.payload))
			if msg := inv.FunctionError(); msg == "" || !strings.Contains(msg, bad.field) {
				t.Errorf("response %s: want a function error naming %q", inv.Body, bad.field)
			}
		})
	}
}
