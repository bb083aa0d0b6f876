package inspect

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/supplier"
	"integration-outbox/internal/testenv"
)

// TestInspectAnswersThePreview: {"organizationId", "outboxId", "preview":
// true} answers, beside the row, "preview" with the contract's keys: the
// provider, method, URL, headers (Authorization "<redacted>") and the body
// as a JSON document; without "preview" there is none. The Xero connection
// points at a port nothing listens on: the preview sends nothing.
func TestInspectAnswersThePreview(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	ids := f.PurchaseOrderCommand(t, testenv.PurchaseOrderCommandOpts{Lines: 2,
		Connection: testenv.ConnectionOpts{OrganizationID: org, Provider: "xero", CredentialReference: "integrations/xero-1",
			Config: map[string]string{"tenantId": "tenant-7", "accountCode": "300", "apiBaseUrl": "http://127.0.0.1:9/api.xro/2.0"}},
		Command: testenv.CommandOpts{Payload: map[string]string{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}}})
	pv := push.NewPreviewer(push.Config{Providers: provider.NewRegistry(
		provider.NewXero(provider.AccountingConfig{AllowPrivateNetworks: true, Transport: push.PreviewTransport()}))},
		map[string]func(pgx.Tx) push.Command{
			purchaseorder.CommandType: func(tx pgx.Tx) push.Command { return purchaseorder.NewCommand(tx) },
			supplier.CommandType:      func(tx pgx.Tx) push.Command { return supplier.NewCommand(tx) },
		})
	i := New(f.Pool, Config{Logger: slog.New(slog.DiscardHandler), Previewer: pv})

	plain, err := i.Handle(context.Background(), json.RawMessage(`{"organizationId":"`+org+`","outboxId":"`+ids.CommandID+`"}`))
	if err != nil || plain.Preview != nil {
		t.Fatalf("without preview: %+v, %v", plain.Preview, err)
	}
	resp, err := i.Handle(context.Background(), json.RawMessage(`{"organizationId":"`+org+`","outboxId":"`+ids.CommandID+`","preview":true}`))
	if err != nil || !resp.Found {
		t.Fatalf("preview: %+v, %v", resp, err)
	}
	raw, err := json.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Found   bool            `json:"found"`
		Row     json.RawMessage `json:"row"`
		Preview struct {
			Provider string            `json:"provider"`
			Method   string            `json:"method"`
			URL      string            `json:"url"`
			Headers  map[string]string `json:"headers"`
			Body     struct {
				PurchaseOrders []struct {
					Contact   struct{ ContactID string }
					LineItems []json.RawMessage
				}
			} `json:"body"`
		} `json:"preview"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		t.Fatalf("%v in %s", err, raw)
	}
	p := answer.Preview
	if !answer.Found || answer.Row == nil || p.Provider != "xero" || p.Method == "" ||
		!strings.HasPrefix(p.URL, "http://127.0.0.1:9/api.xro/2.0/PurchaseOrders") {
		t.Fatalf("answer %s", raw)
	}
	if p.Headers["Authorization"] != "<redacted>" || p.Headers["Xero-Tenant-Id"] != "tenant-7" {
		t.Errorf("headers %v", p.Headers)
	}
	if len(p.Body.PurchaseOrders) != 1 || p.Body.PurchaseOrders[0].Contact.ContactID != "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d" ||
		len(p.Body.PurchaseOrders[0].LineItems) != 2 {
		t.Errorf("body is not the purchase order document: %s", raw)
	}
}
