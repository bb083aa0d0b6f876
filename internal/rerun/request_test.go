package rerun_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"integration-outbox/internal/message"
	"integration-outbox/internal/rerun"
	"integration-outbox/internal/strictjson"
)

const (
	orgA = "11111111-1111-4111-8111-111111111111"
	idA  = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	idB  = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
)

func TestParseAcceptsTheContractPayloadAndAppliesDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want rerun.Request
	}{
		{"ids with defaults",
			`{"organizationId":"` + orgA + `","outboxIds":["` + idA + `"],"reason":"provider outage fixed"}`,
			rerun.Request{OrganizationID: orgA, OutboxIDs: []string{idA}, Limit: 100, Reason: "provider outage fixed"}},
		{"ids upper-case, duplicated, every flag",
			`{"organizationId":"` + strings.ToUpper(orgA) + `","outboxIds":["` + strings.ToUpper(idA) + `","` + idB + `","` + idA + `"],
			  "limit":2,"resetAttempts":true,"dispatchNow":true,"dryRun":true,"reason":"  r  ","requestedBy":" ops@example.com "}`,
			rerun.Request{OrganizationID: orgA, OutboxIDs: []string{idA, idB}, Limit: 2, ResetAttempts: true,
				DispatchNow: true, DryRun: true, Reason: "r", RequestedBy: "ops@example.com"}},
		{"filter without statuses takes every requeueable status",
			`{"organizationId":"` + orgA + `","filter":{},"reason":"r","limit":1000}`,
			rerun.Request{OrganizationID: orgA, Filter: &rerun.Filter{Statuses: []string{"dead_letter", "failed", "uncertain"}},
				Limit: 1000, Reason: "r"}},
		{"full filter",
			`{"organizationId":"` + orgA + `","filter":{"statuses":["failed","failed","uncertain"],"connectionId":"` + idB + `",
			  "commandType":"push_purchase_order","createdAfter":"2024-05-01T00:00:00Z","createdBefore":"2024-05-02T00:00:00.5+02:00"},
			  "limit":1,"reason":"r"}`,
			rerun.Request{OrganizationID: orgA, Limit: 1, Reason: "r", Filter: &rerun.Filter{
				Statuses: []string{"failed", "uncertain"}, ConnectionID: idB, CommandType: "push_purchase_order",
				CreatedAfter:  time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC),
				CreatedBefore: time.Date(2024, 5, 1, 22, 0, 0, 500_000_000, time.UTC)}}},
		{"enableConnection",
			`{"organizationId":"` + orgA + `","enableConnection":"` + strings.ToUpper(idB) + `","reason":" provider fixed ","requestedBy":"ops"}`,
			rerun.Request{OrganizationID: orgA, EnableConnection: idB, Reason: "provider fixed", RequestedBy: "ops"}},
		{"null means absent",
			`{"organizationId":"` + orgA + `","outboxIds":["` + idA + `"],"filter":null,"limit":null,"requestedBy":null,"reason":"r"}`,
			rerun.Request{OrganizationID: orgA, OutboxIDs: []string{idA}, Limit: 100, Reason: "r"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rerun.Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !equalRequest(got, tc.want) {
				t.Fatalf("got  %+v %+v\nwant %+v %+v", got, got.Filter, tc.want, tc.want.Filter)
			}
		})
	}
}

func equalRequest(a, b rerun.Request) bool { return reflect.DeepEqual(a, b) }

// badPayload is a payload the contract rejects and the field its error
// must name.
type badPayload struct {
	name  string
	in    string
	field string // the error reads "rerun payload: <field>: ..."
}

// badPayloads covers every payload rule; the database tests run them too.
func badPayloads(org, id string) []badPayload {
	ids := `"outboxIds":["` + id + `"]`
	base := `"organizationId":"` + org + `",` + ids
	return []badPayload{
		{"missing organizationId", `{` + ids + `,"reason":"r"}`, "organizationId"},
		{"empty organizationId", `{"organizationId":"",` + ids + `,"reason":"r"}`, "organizationId"},
		{"malformed organizationId", `{"organizationId":"org-1",` + ids + `,"reason":"r"}`, "organizationId"},
		{"organizationId not a string", `{"organizationId":7,` + ids + `,"reason":"r"}`, "organizationId"},
		{"missing reason", `{` + base + `}`, "reason"},
		{"blank reason", `{` + base + `,"reason":"  \t"}`, "reason"},
		{"reason too long", `{` + base + `,"reason":"` + strings.Repeat("x", 1001) + `"}`, "reason"},
		{"reason with NUL", `{` + base + `,"reason":"a\u0000b"}`, "reason"},
		{"requestedBy too long", `{` + base + `,"reason":"r","requestedBy":"` + strings.Repeat("x", 201) + `"}`, "requestedBy"},
		{"malformed uuid in outboxIds", `{"organizationId":"` + org + `","outboxIds":["` + id + `","` + id + `x"],"reason":"r"}`, "outboxIds[1]"},
		{"sql in outboxIds", `{"organizationId":"` + org + `","outboxIds":["1; drop table x"],"reason":"r"}`, "outboxIds[0]"},
		{"outboxIds not an array", `{"organizationId":"` + org + `","outboxIds":"` + id + `","reason":"r"}`, "outboxIds"},
		{"empty outboxIds", `{"organizationId":"` + org + `","outboxIds":[],"reason":"r"}`, "outboxIds"},
		{"more ids than the limit", `{"organizationId":"` + org + `","outboxIds":["` + id + `","` + idB + `"],"limit":1,"reason":"r"}`, "outboxIds"},
		{"both outboxIds and filter", `{` + base + `,"filter":{"statuses":["failed"]},"reason":"r"}`, "outboxIds"},
		{"neither outboxIds nor filter", `{"organizationId":"` + org + `","reason":"r"}`, "outboxIds"},
		{"unknown status", `{"organizationId":"` + org + `","filter":{"statuses":["failed","done"]},"reason":"r"}`, "filter.statuses[1]"},
		{"completed is not requeueable", `{"organizationId":"` + org + `","filter":{"statuses":["completed"]},"reason":"r"}`, "filter.statuses[0]"},
		{"queued is not requeueable", `{"organizationId":"` + org + `","filter":{"statuses":["queued"]},"reason":"r"}`, "filter.statuses[0]"},
		{"processing is not requeueable", `{"organizationId":"` + org + `","filter":{"statuses":["processing"]},"reason":"r"}`, "filter.statuses[0]"},
		{"status case matters", `{"organizationId":"` + org + `","filter":{"statuses":["FAILED"]},"reason":"r"}`, "filter.statuses[0]"},
		{"empty statuses", `{"organizationId":"` + org + `","filter":{"statuses":[]},"reason":"r"}`, "filter.statuses"},
		{"malformed connectionId", `{"organizationId":"` + org + `","filter":{"connectionId":"c1"},"reason":"r"}`, "filter.connectionId"},
		{"empty commandType", `{"organizationId":"` + org + `","filter":{"commandType":""},"reason":"r"}`, "filter.commandType"},
		{"createdAfter not RFC 3339", `{"organizationId":"` + org + `","filter":{"createdAfter":"2024-05-01"},"reason":"r"}`, "filter.createdAfter"},
		{"createdBefore not RFC 3339", `{"organizationId":"` + org + `","filter":{"createdBefore":"yesterday"},"reason":"r"}`, "filter.createdBefore"},
		{"createdBefore not after createdAfter", `{"organizationId":"` + org + `","filter":{"createdAfter":"2024-05-02T00:00:00Z","createdBefore":"2024-05-01T00:00:00Z"},"reason":"r"}`, "filter.createdBefore"},
		{"unknown filter key", `{"organizationId":"` + org + `","filter":{"status":["failed"]},"reason":"r"}`, "filter.status"},
		{"filter not an object", `{"organizationId":"` + org + `","filter":["failed"],"reason":"r"}`, "filter"},
		{"limit 0", `{` + base + `,"limit":0,"reason":"r"}`, "limit"},
		{"limit 1001", `{` + base + `,"limit":1001,"reason":"r"}`, "limit"},
		{"negative limit", `{` + base + `,"limit":-5,"reason":"r"}`, "limit"},
		{"limit as a string", `{` + base + `,"limit":"5","reason":"r"}`, "limit"},
		{"fractional limit", `{` + base + `,"limit":2.5,"reason":"r"}`, "limit"},
		{"unknown field", `{` + base + `,"reason":"r","force":true}`, "force"},
		{"empty key", `{` + base + `,"reason":"r","":0}`, `""`},
		{"keys are case-sensitive", `{` + base + `,"Reason":"r"}`, "Reason"},
		{"camelCase only", `{"organization_id":"` + org + `",` + ids + `,"reason":"r"}`, "organization_id"},
		{"dryRun not a boolean", `{` + base + `,"reason":"r","dryRun":"yes"}`, "dryRun"},
		{"enableConnection empty", `{"organizationId":"` + org + `","enableConnection":"","reason":"r"}`, "enableConnection"},
		{"enableConnection not a uuid", `{"organizationId":"` + org + `","enableConnection":"c1","reason":"r"}`, "enableConnection"},
		{"enableConnection not a string", `{"organizationId":"` + org + `","enableConnection":7,"reason":"r"}`, "enableConnection"},
		{"enableConnection without reason", `{"organizationId":"` + org + `","enableConnection":"` + id + `"}`, "reason"},
		{"enableConnection without organizationId", `{"enableConnection":"` + id + `","reason":"r"}`, "organizationId"},
		{"enableConnection with outboxIds", `{` + base + `,"enableConnection":"` + id + `","reason":"r"}`, "outboxIds"},
		{"enableConnection with filter", `{"organizationId":"` + org + `","filter":{},"enableConnection":"` + id + `","reason":"r"}`, "filter"},
		{"enableConnection with dryRun", `{"organizationId":"` + org + `","dryRun":true,"enableConnection":"` + id + `","reason":"r"}`, "dryRun"},
		{"enableConnection with dispatchNow", `{"organizationId":"` + org + `","dispatchNow":true,"enableConnection":"` + id + `","reason":"r"}`, "dispatchNow"},
		{"not an object", `[]`, "payload"},
		{"empty", ``, "payload"},
		{"malformed JSON", `{"organizationId":`, "payload"},
	}
}

func TestParseRejectsBadPayloadsNamingTheField(t *testing.T) {
	for _, tc := range badPayloads(orgA, idA) {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rerun.Parse([]byte(tc.in))
			checkPayloadError(t, err, tc.field)
		})
	}
}

func checkPayloadError(t *testing.T, err error, field string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	var fe *strictjson.FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Fatalf("error %q names field %+v, want %q", err, fe, field)
	}
	if !strings.HasPrefix(err.Error(), "rerun payload: "+field+": ") {
		t.Fatalf("error %q does not start with the field %q", err, field)
	}
}

// The sample console events shipped with the function are valid payloads.
func TestSampleEventsParse(t *testing.T) {
	files, err := filepath.Glob("../../functions/rerun/events/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample events: %v", err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rerun.Parse(raw); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// FuzzParse checks that any input either parses into a request that keeps
// every rule, or fails with an error naming a field; it never panics.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`{"organizationId":"` + orgA + `","outboxIds":["` + idA + `"],"reason":"r"}`,
		`{"organizationId":"` + orgA + `","filter":{"statuses":["dead_letter","failed","uncertain"],"connectionId":"` + idB +
			`","commandType":"push_purchase_order","createdAfter":"2024-05-01T00:00:00Z","createdBefore":"2024-06-01T00:00:00Z"},` +
			`"limit":1000,"resetAttempts":true,"dispatchNow":true,"dryRun":true,"reason":"r","requestedBy":"me"}`,
		`{"organizationId":"` + orgA + `","filter":{},"reason":"r"}`,
		`{"organizationId":"` + orgA + `","outboxIds":[],"reason":"r"}`,
		`{"organizationId":"` + orgA + `","outboxIds":["x"],"filter":{},"reason":"r","limit":0}`,
		`{"Reason":"r"}`, `{"filter":{"statuses":[null]}}`, `{"outboxIds":[null]}`, `null`, `{}`, `[]`, ``, `"x"`,
		`{"organizationId":"` + orgA + `","outboxIds":["` + idA + `"],"reason":"\u0000"}`,
	} {
		f.Add([]byte(seed))
	}
	for _, tc := range badPayloads(orgA, idA) {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := rerun.Parse(raw)
		if err != nil {
			var fe *strictjson.FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Msg == "" {
				t.Fatalf("error %q does not name a field", err)
			}
			return
		}
		if !message.IsUUID(req.OrganizationID) || req.OrganizationID != strings.ToLower(req.OrganizationID) {
			t.Fatalf("organizationId %q", req.OrganizationID)
		}
		if strings.TrimSpace(req.Reason) == "" || !utf8.ValidString(req.Reason) || strings.ContainsRune(req.Reason, 0) {
			t.Fatalf("reason %q", req.Reason)
		}
		if req.Limit < 1 || req.Limit > rerun.MaxLimit {
			t.Fatalf("limit %d", req.Limit)
		}
		if (req.OutboxIDs == nil) == (req.Filter == nil) {
			t.Fatalf("ids %v and filter %+v: want exactly one", req.OutboxIDs, req.Filter)
		}
		if req.OutboxIDs != nil {
			if len(req.OutboxIDs) == 0 || len(req.OutboxIDs) > req.Limit {
				t.Fatalf("%d ids with limit %d", len(req.OutboxIDs), req.Limit)
			}
			for _, id := range req.OutboxIDs {
				if !message.IsUUID(id) {
					t.Fatalf("id %q", id)
				}
			}
		}
		if f := req.Filter; f != nil {
			if len(f.Statuses) == 0 {
				t.Fatal("empty statuses")
			}
			for _, s := range f.Statuses {
				if !slices.Contains(rerun.Requeueable, s) {
					t.Fatalf("status %q", s)
				}
			}
			if f.ConnectionID != "" && !message.IsUUID(f.ConnectionID) {
				t.Fatalf("connectionId %q", f.ConnectionID)
			}
		}
	})
}
