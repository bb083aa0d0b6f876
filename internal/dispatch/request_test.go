package dispatch_test

import (
	"strings"
	"testing"

	"integration-outbox/internal/dispatch"
)

func TestParseEvent(t *testing.T) {
	const org = "11111111-1111-4111-8111-111111111111"
	for _, tc := range []struct {
		name    string
		in      string
		want    dispatch.Request
		wantErr string // the field the error names, when the event is rejected
	}{
		{name: "empty object: a scheduled run", in: `{}`},
		{name: "no payload", in: ``},
		{name: "null", in: `null`},
		{name: "limit", in: `{"limit": 25}`, want: dispatch.Request{Limit: 25}},
		{name: "limit 1", in: `{"limit": 1}`, want: dispatch.Request{Limit: 1}},
		{name: "limit at the maximum", in: `{"limit": 5000}`, want: dispatch.Request{Limit: 5000}},
		{name: "limit 0", in: `{"limit": 0}`, wantErr: "limit"},
		{name: "negative limit", in: `{"limit": -1}`, wantErr: "limit"},
		{name: "limit 5001", in: `{"limit": 5001}`, wantErr: "limit"},
		{name: "limit as a string", in: `{"limit": "5"}`, wantErr: "limit"},
		{name: "fractional limit", in: `{"limit": 2.5}`, wantErr: "limit"},
		{name: "organization", in: `{"limit": 10, "organizationId": "` + org + `"}`,
			want: dispatch.Request{Limit: 10, OrganizationID: org}},
		{name: "organization without limit", in: `{"organizationId": "` + org + `"}`,
			want: dispatch.Request{OrganizationID: org}},
		{name: "upper-case organization comes back canonical", in: `{"organizationId": "0B6E2C55-2B0C-4D8E-9A43-5F1F0C1D2E3F"}`,
			want: dispatch.Request{OrganizationID: "0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f"}},
		{name: "malformed organization", in: `{"organizationId": "acme"}`, wantErr: "organizationId"},
		{name: "organization as a number", in: `{"organizationId": 7}`, wantErr: "organizationId"},
		{name: "empty organization", in: `{"organizationId": ""}`, wantErr: "organizationId"},
		{name: "unknown key", in: `{"limit": 5, "dryRun": true}`, wantErr: "dryRun"},
		{name: "keys are case-sensitive: Limit", in: `{"Limit": 5}`, wantErr: "Limit"},
		{name: "keys are case-sensitive: organizationID", in: `{"organizationID": "` + org + `"}`, wantErr: "organizationID"},
		{name: "not an object", in: `[1]`, wantErr: "payload"},
		{name: "a bare number", in: `5`, wantErr: "payload"},
		{name: "malformed JSON", in: `{"limit": `, wantErr: "payload"},
		{name: "classic EventBridge scheduled event", in: `{
			"version": "0", "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa", "detail-type": "Scheduled Event",
			"source": "aws.events", "account": "123456789012", "time": "2024-05-01T00:00:00Z", "region": "us-east-1",
			"resources": ["arn:aws:events:us-east-1:123456789012:rule/outbox-dispatch"], "detail": {}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := dispatch.ParseEvent([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("accepted as %+v", got)
				}
				if !strings.HasPrefix(err.Error(), "dispatch event: "+tc.wantErr+": ") {
					t.Fatalf("error %q does not name %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Limit != tc.want.Limit || got.OrganizationID != tc.want.OrganizationID || got.IDs != nil {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEventBridgeEnvelopeIsCheckedNotTrusted(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"detail-type":"Object Created","source":"aws.s3"}`, "detail-type"},
		{`{"detail-type":"Scheduled Event","limit":5}`, "limit"},
		{`{"detail-type":"Scheduled Event","organizationId":"11111111-1111-4111-8111-111111111111"}`, "organizationId"},
		{`{"detail-type":7}`, "detail-type"},
	} {
		if _, err := dispatch.ParseEvent([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseEvent(%s) = %v, want an error naming %s", tc.in, err, tc.want)
		}
	}
}
