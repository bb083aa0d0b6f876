// Package purchaseorder is the push_purchase_order command: it loads the
// purchase orders of a batch of started jobs and sends each to a provider
// that can take purchase orders. The push worker (internal/push) does the
// rest: claims, credentials, outcomes, the fence.
package purchaseorder

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/document"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/push"
	"integration-outbox/internal/sqlfile"
)

// CommandType is the command_type of a purchase-order push (contract).
const CommandType = "push_purchase_order"

// EntityType is the local_entity_type of its rows.
const EntityType = "purchase_order"

// Querier is what loading and remembering documents need of a pool or
// connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Command is push_purchase_order, for push.New.
type Command struct {
	db Querier
}

// NewCommand returns the command; it loads orders through db.
func NewCommand(db Querier) *Command { return &Command{db: db} }

// Type returns CommandType.
func (*Command) Type() string { return CommandType }

// Supports reports whether p can push purchase orders.
func (*Command) Supports(p provider.Provider) bool {
	_, ok := p.(provider.PurchaseOrderPusher)
	return ok
}

// Load loads the jobs' orders in one statement, each scoped to the job's
// organization and to its connection's location when it has one, and
// returns each job's delivery. A job whose order is not in that scope is
// refused as entity_not_found; one whose payload_json lacks a usable
// externalSupplierId as payload_invalid. Each push carries the provider's
// document an earlier push of the order created through the same
// connection, and a push whose provider answers with a document remembers
// it (integration_outbox_provider_documents).
func (c *Command) Load(ctx context.Context, jobs []outbox.Job) ([]push.Delivery, error) {
	n := len(jobs)
	ids, orgs, orders, locations := make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
	conns, providers := make([]*string, n), make([]string, n)
	for i, j := range jobs {
		ids[i], orgs[i], orders[i] = j.ID, j.OrganizationID, pgtx.Nullable(j.LocalEntityID)
		conns[i] = pgtx.Nullable(j.ConnectionID)
		if j.Connection != nil {
			locations[i] = pgtx.Nullable(j.Connection.LocationID)
			providers[i] = j.Connection.Provider
		}
	}
	rows, err := c.db.Query(ctx, loadSQL, pgx.NamedArgs{"outbox_ids": ids, "organization_ids": orgs, "order_ids": orders,
		"location_ids": locations, "connection_ids": conns, "providers": providers})
	if err != nil {
		return nil, fmt.Errorf("loading %d purchase orders: %w", n, sqlfile.Wrap("purchaseorder/load", err))
	}
	found := make(map[string]loadedOrder, n)
	var id string
	var row, items []byte
	var docID, syncToken *string
	_, err = pgx.ForEachRow(rows, []any{&id, &row, &items, &docID, &syncToken}, func() error {
		doc, err := purchaseOrderDocument(row, items)
		o := loadedOrder{doc: doc}
		if docID != nil {
			o.known = &provider.Document{ID: *docID}
			if syncToken != nil {
				o.known.SyncToken = *syncToken
			}
		}
		found[id] = o
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("loading %d purchase orders: %w", n, sqlfile.Wrap("purchaseorder/load", err))
	}
	out := make([]push.Delivery, n)
	for i, j := range jobs {
		out[i] = c.delivery(j, found[j.ID])
	}
	return out, nil
}

// loadedOrder is a job's order document and the provider's document an
// earlier push of it created through the job's connection (nil: none).
type loadedOrder struct {
	doc   []byte
	known *provider.Document
}

// delivery is the job's push, or why it cannot be made.
func (c *Command) delivery(j outbox.Job, o loadedOrder) push.Delivery {
	if o.doc == nil {
		return push.Refuse(outbox.ConflictEntityNotFound, fmt.Sprintf(
			"purchase order %s not found for the organization and the connection's location", j.LocalEntityID))
	}
	supplier, err := externalSupplierID(j.Payload)
	if err != nil {
		return push.Refuse(outbox.ConflictPayloadInvalid, err.Error())
	}
	cmd := provider.PurchaseOrderPush{CommandType: j.CommandType, IdempotencyKey: j.IdempotencyKey,
		ExternalSupplierID: supplier, PurchaseOrder: o.doc, Payload: j.Payload, Document: o.known}
	return push.Delivery{Send: func(ctx context.Context, p provider.Provider, conn provider.Connection,
		cred credential.Credential) (provider.Result, error) {
		res, err := p.(provider.PurchaseOrderPusher).PushPurchaseOrder(ctx, conn, cred, cmd)
		if err != nil || res.Document == nil {
			return res, err
		}
		if err := c.remember(ctx, j, conn.Provider, *res.Document); err != nil {
			return provider.Result{}, err
		}
		return res, nil
	}, Check: func(p provider.Provider, conn provider.Connection, cred credential.Credential) error {
		if c, ok := p.(provider.PurchaseOrderChecker); ok {
			return c.CheckPurchaseOrder(conn, cred, cmd)
		}
		return nil
	}}
}

// remember stores the document the provider answered with
// (document.Remember).
func (c *Command) remember(ctx context.Context, j outbox.Job, providerName string, doc provider.Document) error {
	return document.Remember(ctx, c.db, document.Key{ConnectionID: j.ConnectionID, EntityType: EntityType,
		EntityID: j.LocalEntityID, Provider: providerName}, doc)
}
