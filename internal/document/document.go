// Package document keeps the provider documents of local entities
// (integration_outbox_provider_documents, a table of ours): which Xero or
// QuickBooks purchase order, contact or vendor a push created or linked for
// one host entity through one connection. The next push of the entity
// updates that document instead of creating another, and a purchase order
// finds its supplier's contact there. The commands read it in their own
// load statements; this package writes it.
package document

import (
	"context"
	"embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/provider"
	"integration-outbox/internal/sqlfile"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

var rememberSQL = sqlfile.Statement(sqlFiles, "document", "remember")

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "document") }

// Querier is what remembering a document needs of a pool or connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Key names one local entity through one connection of one provider.
type Key struct {
	ConnectionID string
	EntityType   string // local_entity_type: "purchase_order", "supplier"
	EntityID     string
	Provider     string
}

// rememberTimeout bounds the write of a provider's document: less than the
// push worker's default RecordReserve (3s), which it may run into.
const rememberTimeout = 2 * time.Second

// Remember stores the document the provider answered with, right after its
// answer and before the outcome is recorded: the document exists at the
// provider whether or not the job's claim is still current, and the next
// push of the entity must update it rather than create another. When the
// write fails, the push fails as retryable (a *provider.Error): its retry
// sends the same idempotency key, which the provider answers with the same
// document.
func Remember(ctx context.Context, db Querier, k Key, doc provider.Document) error {
	// The provider call may have used up the call's deadline; the write
	// gets its own few seconds.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rememberTimeout)
	defer cancel()
	rows, err := db.Query(ctx, rememberSQL, pgx.NamedArgs{"connection_id": k.ConnectionID, "entity_type": k.EntityType,
		"entity_id": k.EntityID, "provider": k.Provider, "external_id": doc.ID, "sync_token": doc.SyncToken})
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		return &provider.Error{Kind: provider.Retryable, Message: fmt.Sprintf(
			"%s answered with %s %s, but remembering it failed", k.Provider, k.EntityType, doc.ID),
			Err: sqlfile.Wrap("document/remember", err)}
	}
	return nil
}
