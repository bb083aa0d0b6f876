// Package supplier is the push_supplier command: it sends the host's
// supplier (the snapshot in payload_json) to the connection's provider as a
// Xero contact, a QuickBooks vendor or a signed webhook event, and keeps the
// provider's id of it (internal/document), which the purchase orders of that
// supplier then name. The push worker (internal/push) does the rest.
package supplier

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/document"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/push"
	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
	suppliersql "integration-outbox/internal/supplier/sql"
)

// CommandType is the command_type of a supplier push (contract).
const CommandType = "push_supplier"

// EntityType is the local_entity_type of its rows: local_entity_id is the
// host's supplier id.
const EntityType = "supplier"

//go:embed sql/*.sql
var sqlFiles embed.FS

// load runs through its routine (internal/supplier/sql: suppliersql).
var load = suppliersql.Load

// Routines are the package's statements that make migrate installs as
// routines.
func Routines() []*sqlroutine.Statement { return suppliersql.Routines() }

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "supplier") }

// Command is push_supplier, for push.New.
type Command struct {
	db       document.Querier
	routines *sqlroutine.Catalog
}

// NewCommand returns the command; it reads and writes the suppliers'
// documents through db.
func NewCommand(db document.Querier) *Command {
	return &Command{db: db, routines: sqlroutine.NewCatalog(Routines()...)}
}

// Type returns CommandType.
func (*Command) Type() string { return CommandType }

// Supports reports whether p can push suppliers.
func (*Command) Supports(p provider.Provider) bool {
	_, ok := p.(provider.SupplierPusher)
	return ok
}

// Load reads, in one statement, the contact or vendor an earlier push of
// each job's supplier created through the job's connection, and returns
// each job's delivery: the supplier from payload_json, or a payload_invalid
// refusal naming the field that can never be sent.
func (c *Command) Load(ctx context.Context, jobs []outbox.Job) ([]push.Delivery, error) {
	out := make([]push.Delivery, len(jobs))
	suppliers := make([]provider.Supplier, len(jobs))
	var ids, entities, conns, providers []string
	for i, j := range jobs {
		s, err := c.supplier(j)
		if err != nil {
			out[i] = push.Refuse(outbox.ConflictPayloadInvalid, err.Error())
			continue
		}
		suppliers[i] = s
		ids, entities, conns = append(ids, j.ID), append(entities, j.LocalEntityID), append(conns, j.ConnectionID)
		providers = append(providers, j.Connection.Provider)
	}
	known := make(map[string]*provider.Document, len(ids))
	if len(ids) > 0 {
		rows, err := c.routines.Query(ctx, c.db, load, pgx.NamedArgs{"outbox_ids": ids, "supplier_ids": entities,
			"connection_ids": conns, "providers": providers})
		if err != nil {
			return nil, fmt.Errorf("loading %d suppliers' documents: %w", len(ids), sqlfile.Wrap("supplier/load", err))
		}
		var id, externalID string
		var syncToken *string
		_, err = pgx.ForEachRow(rows, []any{&id, &externalID, &syncToken}, func() error {
			d := &provider.Document{ID: externalID}
			if syncToken != nil {
				d.SyncToken = *syncToken
			}
			known[id] = d
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("loading %d suppliers' documents: %w", len(ids), sqlfile.Wrap("supplier/load", err))
		}
	}
	for i, j := range jobs {
		if out[i].Refusal == nil {
			out[i] = c.delivery(j, suppliers[i], known[j.ID])
		}
	}
	return out, nil
}

// supplier is the job's supplier, or why it can never be sent.
func (c *Command) supplier(j outbox.Job) (provider.Supplier, error) {
	if j.LocalEntityType != EntityType {
		return provider.Supplier{}, fmt.Errorf("local_entity_type: is %q, a push_supplier row's must be %q", j.LocalEntityType, EntityType)
	}
	if j.LocalEntityID == "" {
		return provider.Supplier{}, fmt.Errorf("local_entity_id: is required (the host's supplier id)")
	}
	return parseSupplier(j.LocalEntityID, j.Payload)
}

// delivery is the job's push: the provider call, then the document it
// answered with remembered before the outcome is recorded.
func (c *Command) delivery(j outbox.Job, s provider.Supplier, known *provider.Document) push.Delivery {
	cmd := provider.SupplierPush{CommandType: j.CommandType, IdempotencyKey: j.IdempotencyKey, Supplier: s, Document: known}
	return push.Delivery{Send: func(ctx context.Context, p provider.Provider, conn provider.Connection,
		cred credential.Credential) (provider.Result, error) {
		res, err := p.(provider.SupplierPusher).PushSupplier(ctx, conn, cred, cmd)
		if err != nil {
			return res, err
		}
		doc := res.Document
		if doc == nil && res.ExternalID != "" && res.Status == provider.StatusCompleted {
			doc = &provider.Document{ID: res.ExternalID} // a webhook receiver's id
		}
		if doc == nil {
			return res, nil
		}
		if err := document.Remember(ctx, c.db, document.Key{ConnectionID: j.ConnectionID, EntityType: EntityType,
			EntityID: j.LocalEntityID, Provider: conn.Provider}, *doc); err != nil {
			return provider.Result{}, err
		}
		return res, nil
	}, Check: func(p provider.Provider, conn provider.Connection, cred credential.Credential) error {
		if c, ok := p.(provider.SupplierChecker); ok {
			return c.CheckSupplier(conn, cred, cmd)
		}
		return nil
	}}
}
