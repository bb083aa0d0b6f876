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
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/push"
)

// CommandType is the command_type of a purchase-order push (contract).
const CommandType = "push_purchase_order"

// Querier is what loading needs of a pool or connection.
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
// externalSupplierId as payload_invalid.
func (c *Command) Load(ctx context.Context, jobs []outbox.Job) ([]push.Delivery, error) {
	n := len(jobs)
	ids, orgs, orders, locations := make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
	for i, j := range jobs {
		ids[i], orgs[i], orders[i] = j.ID, j.OrganizationID, pgtx.Nullable(j.LocalEntityID)
		if j.Connection != nil {
			locations[i] = pgtx.Nullable(j.Connection.LocationID)
		}
	}
	rows, err := c.db.Query(ctx, loadSQL, ids, orgs, orders, locations)
	if err != nil {
		return nil, fmt.Errorf("loading %d purchase orders: %w", n, err)
	}
	docs := make(map[string][]byte, n)
	var id string
	var row, items []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &row, &items}, func() error {
		doc, err := purchaseOrderDocument(row, items)
		docs[id] = doc
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("loading %d purchase orders: %w", n, err)
	}
	out := make([]push.Delivery, n)
	for i, j := range jobs {
		out[i] = delivery(j, docs[j.ID])
	}
	return out, nil
}

// delivery is the job's push, or why it cannot be made.
func delivery(j outbox.Job, doc []byte) push.Delivery {
	if doc == nil {
		return push.Refuse(outbox.ConflictEntityNotFound, fmt.Sprintf(
			"purchase order %s not found for the organization and the connection's location", j.LocalEntityID))
	}
	supplier, err := externalSupplierID(j.Payload)
	if err != nil {
		return push.Refuse(outbox.ConflictPayloadInvalid, err.Error())
	}
	cmd := provider.PurchaseOrderPush{CommandType: j.CommandType, IdempotencyKey: j.IdempotencyKey,
		ExternalSupplierID: supplier, PurchaseOrder: doc}
	return push.Delivery{Send: func(ctx context.Context, p provider.Provider, conn provider.Connection,
		cred credential.Credential) (provider.Result, error) {
		return p.(provider.PurchaseOrderPusher).PushPurchaseOrder(ctx, conn, cred, cmd)
	}}
}
