package push_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/supplier"
	"integration-outbox/internal/testenv"
)

// previewer is the inspect function's previewer: the push's own commands
// and providers, on the transport that sends nothing.
func previewer() *push.Previewer {
	return push.NewPreviewer(push.Config{Logger: slog.New(slog.DiscardHandler), ProviderTimeout: 2 * time.Second,
		Providers: provider.NewRegistry(
			provider.NewWebhook(provider.WebhookConfig{AllowPrivateNetworks: true, Transport: push.PreviewTransport()}),
			provider.NewXero(provider.AccountingConfig{AllowPrivateNetworks: true, Transport: push.PreviewTransport()}),
			provider.NewQuickBooks(provider.AccountingConfig{AllowPrivateNetworks: true, Transport: push.PreviewTransport()}),
			provider.NewSandbox(provider.SandboxConfig{}))},
		map[string]func(pgx.Tx) push.Command{
			purchaseorder.CommandType: func(tx pgx.Tx) push.Command { return purchaseorder.NewCommand(tx) },
			supplier.CommandType:      func(tx pgx.Tx) push.Command { return supplier.NewCommand(tx) },
		})
}

// preview previews a row in a read-only transaction, as inspect does.
func (b bundle) preview(t *testing.T, org, id string) (push.Preview, error) {
	t.Helper()
	var pv push.Preview
	err := pgx.BeginTxFunc(context.Background(), b.f.Pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		pv, err = previewer().Preview(context.Background(), tx, org, id)
		return err
	})
	return pv, err
}

// rowVersion is the row's xmin: any write to it changes it.
func (b bundle) rowVersion(t *testing.T, id string) string {
	t.Helper()
	var v string
	if err := b.f.Pool.QueryRow(context.Background(), `select xmin::text from external_integration_outbox where id = $1`, id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestThePreviewIsTheRequestThePushSends: for a Xero order (OAuth2 bearer)
// and a signed webhook, the preview's method, URL, headers and body are
// those of the request the push then sends, byte for byte, but for the
// Authorization value and the signatures, which read "<redacted>" (and
// the webhook's timestamp, taken at each call). The preview reads no
// secret, calls nothing and leaves the row as it was.
func TestThePreviewIsTheRequestThePushSends(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, secret string
		conn         func(url string) testenv.ConnectionOpts
		varying      []string // headers that differ from call to call
	}{
		{name: "xero", secret: `{"token":"xero-access-token"}`, conn: func(u string) testenv.ConnectionOpts {
			return testenv.ConnectionOpts{Provider: "xero",
				Config: map[string]string{"tenantId": "tenant-7", "accountCode": "300", "apiBaseUrl": u}}
		}},
		{name: "webhook", secret: `{"token":"hook-token","signingSecret":"whsec_c2VjcmV0LWtleS1ieXRlcw=="}`,
			conn: func(u string) testenv.ConnectionOpts {
				return testenv.ConnectionOpts{Provider: "webhook", Config: map[string]string{"url": u + "/orders"}}
			}, varying: []string{"Webhook-Timestamp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := documented(t, "200 xero/created.json")
			c := tc.conn(rc.URL)
			c.OrganizationID, c.CredentialReference = b.org, secret(t, tc.secret, b.org)
			ids := b.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 2, Connection: c,
				Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}}})
			before := b.rowVersion(t, ids.CommandID)

			pv, err := b.preview(t, b.org, ids.CommandID)
			if err != nil {
				t.Fatal(err)
			}
			if pv.Request == nil || pv.Refusal != nil || pv.Provider != tc.name {
				t.Fatalf("preview %+v, want a %s request", pv, tc.name)
			}
			if n := len(rc.Requests()); n != 0 {
				t.Fatalf("the preview made %d calls", n)
			}
			if got := b.secrets.gets.Load(); got != 0 {
				t.Errorf("the preview read the secret %d times", got)
			}
			if after := b.rowVersion(t, ids.CommandID); after != before {
				t.Errorf("the preview wrote the row (xmin %s → %s)", before, after)
			}

			b.handle(t, b.claim(t, 10))
			reqs := rc.Requests()
			if len(reqs) != 1 {
				t.Fatalf("the push made %d calls, want 1", len(reqs))
			}
			sent := reqs[0]
			u, err := url.Parse(pv.Request.URL)
			if err != nil {
				t.Fatal(err)
			}
			if pv.Request.Method != sent.Method || u.RequestURI() != sent.URI {
				t.Errorf("preview %s %s, push sent %s %s", pv.Request.Method, u.RequestURI(), sent.Method, sent.URI)
			}
			if !bytes.Equal(pv.Request.Body, sent.Raw) {
				t.Errorf("preview body\n%s\npush sent\n%s", pv.Request.Body, sent.Raw)
			}
			if pv.Request.Headers["Authorization"] != push.Redacted {
				t.Errorf("Authorization %q, want %q", pv.Request.Headers["Authorization"], push.Redacted)
			}
			for name, values := range sent.Header {
				got, ok := pv.Request.Headers[name]
				switch {
				case name == "Authorization" || strings.Contains(strings.ToLower(name), "signature"):
					if got != push.Redacted {
						t.Errorf("header %s %q, want %q", name, got, push.Redacted)
					}
				case name == "User-Agent" || name == "Accept-Encoding" || name == "Content-Length":
					// set by net/http as it writes the request
				case !ok:
					t.Errorf("header %s sent (%q) but not in the preview", name, values)
				case !contains(tc.varying, name) && got != strings.Join(values, ", "):
					t.Errorf("header %s: preview %q, sent %q", name, got, values)
				}
			}
			for name, v := range pv.Request.Headers {
				if strings.Contains(v, "xero-access-token") || strings.Contains(v, "hook-token") {
					t.Errorf("header %s shows a secret: %q", name, v)
				}
			}
		})
	}
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if http.CanonicalHeaderKey(n) == name {
			return true
		}
	}
	return false
}

// TestThePreviewShowsTheRefusalThePushWouldRecord: a line without an
// account and a supplier id that is not a GUID are refused before any
// call, as payload_invalid naming the field; another organization's row
// is not found; the preview's JSON has the contract's keys.
func TestThePreviewShowsTheRefusalThePushWouldRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 1,
		Connection: testenv.ConnectionOpts{OrganizationID: b.org, Provider: "xero", CredentialReference: "integrations/never-read",
			Config: map[string]string{"tenantId": "tenant-7", "apiBaseUrl": "http://127.0.0.1:9"}},
		Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}}})
	pv, err := b.preview(t, b.org, ids.CommandID)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Refusal == nil || pv.Refusal.ConflictType != "payload_invalid" || !strings.Contains(pv.Refusal.Message, "accountCode") {
		t.Fatalf("preview %+v, want a payload_invalid refusal naming accountCode", pv)
	}
	raw, _ := json.Marshal(pv)
	var shape map[string]json.RawMessage
	json.Unmarshal(raw, &shape)
	if _, ok := shape["refusal"]; !ok || shape["method"] != nil {
		t.Errorf("preview JSON %s, want refusal and no request", raw)
	}

	bad := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: ids.ConnectionID, Provider: "xero",
		EntityID: ids.PurchaseOrderID, Payload: map[string]string{"externalSupplierId": "SUP-1"}})
	if pv, err := b.preview(t, b.org, bad); err != nil || pv.Refusal == nil || !strings.Contains(pv.Refusal.Message, "externalSupplierId") {
		t.Errorf("a supplier id that is not a GUID: %+v, %v", pv, err)
	}
	if _, err := b.preview(t, b.f.NewID(t), ids.CommandID); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("another organization's row: %v, want outbox.ErrNotFound", err)
	}
}

// TestThePreviewShowsTheLookUpFirst: a Xero row whose earlier attempt's
// outcome is unknown, two hours ago: the preview's request is the look-up
// the push sends first (GET /PurchaseOrders of the order's date), with a
// note saying why; the push then sends exactly that, finds nothing, and
// creates.
func TestThePreviewShowsTheLookUpFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	rc := documented(t, "200 xero/purchase_orders_none.json", "200 xero/created.json")
	c := testenv.ConnectionOpts{Provider: "xero", OrganizationID: b.org, CredentialReference: secret(t, `{"token":"xero-access-token"}`, b.org),
		Config: map[string]string{"tenantId": "tenant-7", "accountCode": "300", "apiBaseUrl": rc.URL}}
	ids := b.f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 1, Connection: c,
		Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}}})
	if _, err := b.f.Pool.Exec(ctx, `insert into external_integration_attempts (outbox_id, organization_id, attempt, started_at,
		finished_at, outcome, provider_called, error_excerpt, outcome_unknown)
		values ($1, $2, 1, now() - interval '2 hours', now() - interval '2 hours', 'failed', true, 'xero: request failed: EOF', true)`,
		ids.CommandID, b.org); err != nil {
		t.Fatal(err)
	}
	// The row as that attempt's record left it.
	if _, err := b.f.Pool.Exec(ctx, `update external_integration_outbox set status = 'failed', attempt_count = 1,
		last_error = 'xero: request failed: EOF', next_attempt_at = now() where id = $1`, ids.CommandID); err != nil {
		t.Fatal(err)
	}
	pv, err := b.preview(t, b.org, ids.CommandID)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Request == nil || pv.Request.Method != http.MethodGet || !strings.Contains(pv.Request.URL, "/PurchaseOrders?DateFrom=") ||
		!strings.Contains(pv.Note, "looks it up first") {
		t.Fatalf("preview %+v (note %q), want the look-up with a note", pv.Request, pv.Note)
	}
	b.handle(t, b.claim(t, 10))
	reqs := rc.Requests()
	if len(reqs) != 2 || reqs[0].Method != http.MethodGet || reqs[1].Method != http.MethodPost {
		t.Fatalf("the push sent %d requests, want the look-up then the create", len(reqs))
	}
	if u, _ := url.Parse(pv.Request.URL); u.RequestURI() != reqs[0].URI {
		t.Errorf("preview %s, push sent %s", u.RequestURI(), reqs[0].URI)
	}
}
