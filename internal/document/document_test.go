package document_test

import (
	"context"
	"errors"
	"testing"

	"integration-outbox/internal/document"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, testenv.WithPostgres(&pg)) }

// The latest answer wins per (connection, entity type, entity, provider);
// another entity type or provider of the same id is another document; a
// failed write is a retryable provider error naming the document.
func TestRememberKeepsTheLatestDocumentPerEntity(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	ctx := context.Background()
	conn, entity := f.NewID(t), f.NewID(t)
	supplier := document.Key{ConnectionID: conn, EntityType: "supplier", EntityID: entity, Provider: "quickbooks"}
	for _, d := range []provider.Document{{ID: "57", SyncToken: "0"}, {ID: "57", SyncToken: "1"}} {
		if err := document.Remember(ctx, f.Pool, supplier, d); err != nil {
			t.Fatal(err)
		}
	}
	order := supplier
	order.EntityType = "purchase_order"
	if err := document.Remember(ctx, f.Pool, order, provider.Document{ID: "PO-1"}); err != nil {
		t.Fatal(err)
	}
	read := func(k document.Key) (id string, token *string) {
		t.Helper()
		if err := f.Pool.QueryRow(ctx, `select external_id, sync_token from integration_outbox_provider_documents
			where integration_connection_id = $1 and local_entity_type = $2 and local_entity_id = $3 and provider = $4`,
			k.ConnectionID, k.EntityType, k.EntityID, k.Provider).Scan(&id, &token); err != nil {
			t.Fatal(err)
		}
		return id, token
	}
	if id, token := read(supplier); id != "57" || token == nil || *token != "1" {
		t.Errorf("supplier's document %s/%v, want 57/1", id, token)
	}
	if id, token := read(order); id != "PO-1" || token != nil {
		t.Errorf("order's document %s/%v, want PO-1 without a sync token", id, token)
	}

	bad := supplier
	bad.EntityID = "not a uuid"
	err := document.Remember(ctx, f.Pool, bad, provider.Document{ID: "58"})
	var perr *provider.Error
	if !errors.As(err, &perr) || perr.Kind != provider.Retryable || perr.Message != "quickbooks answered with supplier 58, but remembering it failed" {
		t.Errorf("a failed write = %v, want a retryable provider error naming the document", err)
	}
}
