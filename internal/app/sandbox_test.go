package app_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"integration-outbox/internal/app"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.WithPostgres(&pg))
}

// TestSandboxProviderOnlyWhereSwitchedOn: the push function built by app
// runs the sandbox only with SANDBOX_PROVIDER_ENABLED=true; elsewhere (unset
// is production's default) a sandbox connection's row ends unsupported,
// saying why, and is never marked completed.
func TestSandboxProviderOnlyWhereSwitchedOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		enabled, wantStatus string
	}{
		{"", "unsupported"},
		{"false", "unsupported"},
		{"true", "completed"},
	} {
		t.Run("SANDBOX_PROVIDER_ENABLED="+tc.enabled, func(t *testing.T) {
			t.Parallel()
			f := pg.NewDB(t)
			env := map[string]string{"DATABASE_URL": f.URL, "SANDBOX_PROVIDER_ENABLED": tc.enabled,
				"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
			a, err := app.New(context.Background(), func(k string) string { return env[k] }, io.Discard, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(a.Close)
			w, err := a.PushWorker()
			if err != nil {
				t.Fatal(err)
			}

			org := f.NewID(t)
			conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "sandbox"})
			id := f.Command(t, testenv.CommandOpts{OrganizationID: org, ConnectionID: conn, Provider: "sandbox",
				EntityID: f.PurchaseOrder(t, org, "", 1)})
			claims, err := outbox.NewStore(f.Pool).Claim(context.Background(), outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: 15 * time.Minute})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim: %d rows, %v", len(claims), err)
			}
			c := claims[0]
			body, err := message.Message{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
				CommandType: c.CommandType, ClaimToken: c.ClaimToken}.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: body}}}); err != nil {
				t.Fatal(err)
			}

			r := f.Row(t, id)
			if r.Status != tc.wantStatus {
				t.Fatalf("row %s, want %s (last_error %q)", r.Status, tc.wantStatus, deref(r.LastError))
			}
			if tc.wantStatus == "unsupported" {
				if r.LastError == nil || !strings.Contains(*r.LastError, "SANDBOX_PROVIDER_ENABLED") {
					t.Errorf("last_error %q does not say the sandbox is switched off", deref(r.LastError))
				}
				if n := f.Count(t, `select count(*) from external_integration_conflicts where outbox_id = $1`, id); n != 0 {
					t.Errorf("%d conflicts for an unsupported row", n)
				}
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
