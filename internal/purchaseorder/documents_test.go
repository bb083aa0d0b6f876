package purchaseorder_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/testenv"
)

// answers replays the provider package's documented answers in order, in
// process, and keeps each request's method, path and body.
type answers struct {
	mu    sync.Mutex
	files []string
	got   []request
}

type request struct {
	method, path string
	body         map[string]any
}

func replay(t *testing.T, files ...string) (*answers, string) {
	t.Helper()
	a := &answers{files: files}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		a.mu.Lock()
		a.got = append(a.got, request{method: r.Method, path: r.URL.Path, body: body})
		n := len(a.got)
		a.mu.Unlock()
		if n > len(a.files) {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			w.WriteHeader(http.StatusTeapot)
			return
		}
		b, err := os.ReadFile(filepath.Join("..", "provider", "testdata", a.files[n-1]))
		if err != nil {
			t.Error(err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return a, srv.URL
}

func (a *answers) requests() []request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]request(nil), a.got...)
}

// pushOrder loads one job of order po through connection conn and sends it to p.
func pushOrder(t *testing.T, f *testenv.Fixture, p provider.Provider, org, po, key string, conn provider.Connection, payload string) provider.Result {
	t.Helper()
	j := outbox.Job{ID: key + "-job", OrganizationID: org, ConnectionID: conn.ID, CommandType: purchaseorder.CommandType,
		LocalEntityType: "purchase_order", LocalEntityID: po, Payload: json.RawMessage(payload), IdempotencyKey: key,
		Connection: &outbox.Connection{ID: conn.ID, Provider: conn.Provider, Config: conn.Config}}
	ds, err := purchaseorder.NewCommand(f.Pool).Load(context.Background(), []outbox.Job{j})
	if err != nil || ds[0].Send == nil {
		t.Fatalf("Load = %+v, %v", ds, err)
	}
	res, err := ds[0].Send(context.Background(), p, conn, credential.Credential{Token: credential.NewSecret("access-token")})
	if err != nil {
		t.Fatalf("push %s: %v", key, err)
	}
	return res
}

// document is the remembered document of order po through connection conn.
func document(t *testing.T, f *testenv.Fixture, conn, po, providerName string) (id, syncToken string) {
	t.Helper()
	var token *string
	err := f.Pool.QueryRow(context.Background(), `
		select external_id, sync_token from integration_outbox_provider_documents
		where integration_connection_id = $1 and local_entity_type = 'purchase_order' and local_entity_id = $2 and provider = $3`,
		conn, po, providerName).Scan(&id, &token)
	if err != nil {
		t.Fatalf("remembered document of %s: %v", po, err)
	}
	if token != nil {
		syncToken = *token
	}
	return id, syncToken
}

func connection(t *testing.T, f *testenv.Fixture, org, name string, config map[string]any) provider.Connection {
	t.Helper()
	id := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: name, Config: config})
	raw, _ := json.Marshal(config)
	return provider.Connection{ID: id, OrganizationID: org, Provider: name, Config: raw}
}

// TestSecondXeroPushUpdatesTheFirstPurchaseOrder: the PurchaseOrderID of
// the first push is remembered, and the second push of the same order
// through the same connection updates that purchase order; through another
// connection the order is created there.
func TestSecondXeroPushUpdatesTheFirstPurchaseOrder(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	po := f.PurchaseOrder(t, org, "", 2)
	api, url := replay(t, "xero/created.json", "xero/updated.json", "xero/created.json")
	x := provider.NewXero(provider.AccountingConfig{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
	t.Cleanup(x.CloseIdleConnections)
	cfg := map[string]any{"tenantId": "tenant-7", "accountCode": "300", "apiBaseUrl": url}
	conn := connection(t, f, org, provider.NameXero, cfg)
	const payload = `{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}`
	const poID = "8c1b7e52-3d4f-4a6b-9c8d-7e6f5a4b3c2d"

	if res := pushOrder(t, f, x, org, po, "key-1", conn, payload); res.ExternalID != poID {
		t.Fatalf("first push = %+v", res)
	}
	if id, _ := document(t, f, conn.ID, po, provider.NameXero); id != poID {
		t.Fatalf("remembered %q, want %s", id, poID)
	}
	if res := pushOrder(t, f, x, org, po, "key-2", conn, payload); res.ExternalID != poID {
		t.Fatalf("second push = %+v", res)
	}
	other := connection(t, f, org, provider.NameXero, cfg)
	pushOrder(t, f, x, org, po, "key-3", other, payload)

	got := api.requests()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	if got[0].path != "/PurchaseOrders" || got[1].path != "/PurchaseOrders/"+poID || got[2].path != "/PurchaseOrders" {
		t.Errorf("paths %s, %s, %s: want create, update of %s, create through the other connection", got[0].path, got[1].path, got[2].path, poID)
	}
	if orders, _ := got[1].body["PurchaseOrders"].([]any); len(orders) != 1 || orders[0].(map[string]any)["PurchaseOrderID"] != poID {
		t.Errorf("update body = %v", got[1].body)
	}
}

// TestSecondQuickBooksPushUpdatesTheFirstPurchaseOrder: Id and SyncToken of
// the first push are remembered; the second push sends a sparse update with
// them and remembers the new SyncToken. Both go to the QuickBooks stand-in,
// which takes only bodies valid in Intuit's data model.
func TestSecondQuickBooksPushUpdatesTheFirstPurchaseOrder(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	po := f.PurchaseOrder(t, org, "", 1)
	qb, err := testenv.StartQuickBooksStandIn("9130", "access-token")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qb.Close)
	vendor := qb.AddVendor("Acme Supplies")
	q := provider.NewQuickBooks(provider.AccountingConfig{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
	t.Cleanup(q.CloseIdleConnections)
	conn := connection(t, f, org, provider.NameQuickBooks, map[string]any{"realmId": "9130", "expenseAccountId": "80", "apiBaseUrl": qb.URL})
	payload := `{"externalSupplierId": "` + vendor + `"}`

	first := pushOrder(t, f, q, org, po, "key-1", conn, payload)
	if id, token := document(t, f, conn.ID, po, provider.NameQuickBooks); id != first.ExternalID || id == "" || token != "0" {
		t.Fatalf("remembered %q/%q, want %s/0 (refusals %v)", id, token, first.ExternalID, qb.Refusals())
	}
	if res := pushOrder(t, f, q, org, po, "key-2", conn, payload); res.ExternalID != first.ExternalID {
		t.Fatalf("second push = %+v (refusals %v)", res, qb.Refusals())
	}
	if id, token := document(t, f, conn.ID, po, provider.NameQuickBooks); id != first.ExternalID || token != "1" {
		t.Errorf("remembered %q/%q after the update, want %s/1", id, token, first.ExternalID)
	}
	if got := qb.PurchaseOrders(); len(got) != 1 || got[0].SyncToken != "1" || got[0].Fields["sparse"] != true {
		t.Errorf("QuickBooks holds %+v, want one purchase order sparsely updated once", got)
	}
	if r := qb.Refusals(); len(r) != 0 {
		t.Errorf("refused: %v", r)
	}
}

// failingWrites loads through the pool but fails every insert.
type failingWrites struct{ purchaseorder.Querier }

func (f failingWrites) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if strings.Contains(sql, "insert into") {
		return nil, errors.New("connection reset by peer")
	}
	return f.Querier.Query(ctx, sql, args...)
}

// TestAFailedDocumentWriteIsRetryable: a document the provider answered
// with but that could not be remembered fails the push as retryable, so
// that its retry (same key, same answer) remembers it.
func TestAFailedDocumentWriteIsRetryable(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	po := f.PurchaseOrder(t, org, "", 1)
	_, url := replay(t, "xero/created.json")
	x := provider.NewXero(provider.AccountingConfig{AllowPrivateNetworks: true, Timeout: 5 * time.Second})
	t.Cleanup(x.CloseIdleConnections)
	conn := connection(t, f, org, provider.NameXero, map[string]any{"tenantId": "t", "accountCode": "300", "apiBaseUrl": url})
	j := outbox.Job{ID: "job-1", OrganizationID: org, ConnectionID: conn.ID, CommandType: purchaseorder.CommandType,
		LocalEntityID: po, Payload: json.RawMessage(`{"externalSupplierId": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}`),
		IdempotencyKey: "key-1", Connection: &outbox.Connection{ID: conn.ID, Provider: conn.Provider, Config: conn.Config}}
	ds, err := purchaseorder.NewCommand(failingWrites{f.Pool}).Load(context.Background(), []outbox.Job{j})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ds[0].Send(context.Background(), x, conn, credential.Credential{Token: credential.NewSecret("access-token")})
	var perr *provider.Error
	if !errors.As(err, &perr) || perr.Kind != provider.Retryable || !strings.Contains(err.Error(), "remembering it failed") {
		t.Errorf("Send = %v, want a retryable error saying the document was not remembered", err)
	}
}
