package dispatch_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/message"
)

// FuzzParseEvent feeds the dispatch function's input (the scheduler's Input,
// a console test event, an EventBridge envelope) to ParseEvent. Its seeds
// run as ordinary tests; `go test -fuzz FuzzParseEvent ./internal/dispatch/`
// explores.
func FuzzParseEvent(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, ` {} `, `[]`, `"x"`, `1`, `{`, `{"limit":10}`, `{"limit":5000}`, `{"limit":5001}`,
		`{"limit":0}`, `{"limit":-1}`, `{"limit":1.5}`, `{"limit":"10"}`, `{"limit":null}`, `{"Limit":10}`,
		`{"limit":1e3}`, `{"limit":10,"limit":null}`,
		`{"organizationId":"11111111-1111-4111-8111-111111111111"}`, `{"organizationId":"x' or '1'='1"}`,
		`{"organizationId":1}`, `{"organizationid":"11111111-1111-4111-8111-111111111111"}`,
		`{"limit":1,"unknown":true}`, `{"detail-type":"Scheduled Event","source":"aws.scheduler","detail":{}}`,
		`{"detail-type":"Scheduled Event","limit":5}`, `{"detail-type":null}`, `{"detail-type":"Object Created"}`,
		"{\"limit\":1}\x00", `{"limit":1} {"limit":2}`, `{"organizationId":"` + strings.Repeat("a", 5000) + `"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := dispatch.ParseEvent(raw)
		again, err2 := dispatch.ParseEvent(raw)
		if !reflect.DeepEqual(req, again) || (err == nil) != (err2 == nil) {
			t.Fatalf("ParseEvent(%q) is not deterministic", raw)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "dispatch event: ") || req.Limit != 0 || req.OrganizationID != "" {
				t.Fatalf("ParseEvent(%q) = %+v, %v: want a zero request and an error saying where", raw, req, err)
			}
			return
		}
		if req.Limit < 0 || req.Limit > dispatch.MaxLimit || req.IDs != nil ||
			(req.OrganizationID != "" && !message.IsUUID(req.OrganizationID)) {
			t.Fatalf("ParseEvent(%q) accepted %+v", raw, req)
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) != nil {
			if !reflect.DeepEqual(req, dispatch.Request{}) {
				t.Fatalf("ParseEvent(%q) = %+v from a non-object", raw, req)
			}
			return
		}
		if _, envelope := fields["detail-type"]; envelope {
			if !reflect.DeepEqual(req, dispatch.Request{}) {
				t.Fatalf("an EventBridge envelope asked for %+v", req)
			}
			return
		}
		for k := range fields {
			if k != "limit" && k != "organizationId" {
				t.Fatalf("ParseEvent(%q) accepted the key %q", raw, k)
			}
		}
	})
}
