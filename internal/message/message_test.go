package message

import (
	"strings"
	"testing"
)

const good = `{"outboxId":"0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f","organizationId":"11111111-1111-4111-8111-111111111111","connectionId":"22222222-2222-4222-8222-222222222222","commandType":"push_purchase_order","claimToken":"33333333-3333-4333-8333-333333333333"}`

func TestRoundTrip(t *testing.T) {
	m, err := Decode(good)
	if err != nil {
		t.Fatal(err)
	}
	body, err := m.Encode()
	if err != nil || body != good {
		t.Fatalf("Encode = %s, %v; want the same bytes back", body, err)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`not json`, "payload: must be a JSON object"},
		{strings.Replace(good, `"outboxId"`, `"OutboxId"`, 1), "OutboxId: unknown field"},
		{strings.Replace(good, `0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f`, `1; drop table x`, 1), "outboxId: must be a uuid"},
		{strings.Replace(good, `"claimToken":"33333333-3333-4333-8333-333333333333"`, `"claimToken":""`, 1), "claimToken: must be a uuid"},
		{strings.Replace(good, `push_purchase_order`, ``, 1), "commandType: is required"},
		{`{}`, "outboxId: must be a uuid"},
	} {
		if _, err := Decode(tc.body); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%s) error = %v, want %q", tc.body, err, tc.want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(good)
	f.Add(`{}`)
	f.Add(`{"outboxId":1}`)
	f.Fuzz(func(t *testing.T, body string) {
		m, err := Decode(body)
		if err != nil {
			return
		}
		if !IsUUID(m.OutboxID) || !IsUUID(m.ClaimToken) || m.CommandType == "" {
			t.Fatalf("Decode accepted an invalid message: %+v", m)
		}
	})
}

func TestIsUUID(t *testing.T) {
	for s, want := range map[string]bool{
		"0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f": true, "0B6E2C55-2B0C-4D8E-9A43-5F1F0C1D2E3F": true,
		"0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3": false, "0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f0": false,
		"0b6e2c55x2b0c-4d8e-9a43-5f1f0c1d2e3f": false, "0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3g": false,
		"": false, "0b6e2c552b0c4d8e9a435f1f0c1d2e3f": false,
	} {
		if got := IsUUID(s); got != want {
			t.Errorf("IsUUID(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestDecodeReturnsIdsInCanonicalLowerCase(t *testing.T) {
	upper := strings.NewReplacer(
		"0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f", "0B6E2C55-2B0C-4D8E-9A43-5F1F0C1D2E3F",
		"33333333-3333-4333-8333-333333333333", "33333333-3333-4333-8333-33333333333A",
	).Replace(good)
	m, err := Decode(upper)
	if err != nil {
		t.Fatal(err)
	}
	if m.OutboxID != "0b6e2c55-2b0c-4d8e-9a43-5f1f0c1d2e3f" || m.ClaimToken != "33333333-3333-4333-8333-33333333333a" {
		t.Fatalf("ids = %q, %q; want them lower-cased", m.OutboxID, m.ClaimToken)
	}
}
