// Package purchaseorder is the push_purchase_order command: it loads the
// purchase orders of a batch of started jobs and sends each to a provider
// that can take purchase orders. The push worker (internal/push) does the
// rest: claims, credentials, outcomes, the fence.
package purchaseorder

import (
	"context"
	"fmt"
	"time"

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
// refused as entity_not_found. The supplier is payload_json's
// externalSupplierId; without it, the contact or vendor of the host's
// supplier (payload_json.supplierId, else the order's supplier_id) that a
// push_supplier created through the connection: while that push is still
// to be delivered the job waits for it, and without either it is refused as
// payload_invalid. Each push carries the provider's document an earlier
// push of the order created through the same connection, and a push whose
// provider answers with a document remembers it
// (integration_outbox_provider_documents).
func (c *Command) Load(ctx context.Context, jobs []outbox.Job) ([]push.Delivery, error) {
	n := len(jobs)
	ids, orgs, orders, locations := make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
	conns, providers := make([]*string, n), make([]string, n)
	wants, suppliers := make([]bool, n), make([]*string, n)
	refs, refErrs := make([]supplierRef, n), make([]error, n)
	for i, j := range jobs {
		ids[i], orgs[i], orders[i] = j.ID, j.OrganizationID, pgtx.Nullable(j.LocalEntityID)
		conns[i] = pgtx.Nullable(j.ConnectionID)
		if j.Connection != nil {
			locations[i] = pgtx.Nullable(j.Connection.LocationID)
			providers[i] = j.Connection.Provider
		}
		refs[i], refErrs[i] = readSupplierRef(j.Payload)
		wants[i] = refErrs[i] == nil && refs[i].External == ""
		suppliers[i] = pgtx.Nullable(refs[i].HostID)
	}
	rows, err := c.db.Query(ctx, loadSQL, pgx.NamedArgs{"outbox_ids": ids, "organization_ids": orgs, "order_ids": orders,
		"location_ids": locations, "connection_ids": conns, "providers": providers,
		"want_supplier": wants, "supplier_ids": suppliers})
	if err != nil {
		return nil, fmt.Errorf("loading %d purchase orders: %w", n, sqlfile.Wrap("purchaseorder/load", err))
	}
	found := make(map[string]loadedOrder, n)
	var id string
	var row, items []byte
	var docID, syncToken, supplierID, supplierDoc, supplierPush *string
	var supplierPushDue *time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &row, &items, &docID, &syncToken,
		&supplierID, &supplierDoc, &supplierPush, &supplierPushDue}, func() error {
		doc, err := purchaseOrderDocument(row, items)
		o := loadedOrder{doc: doc, supplier: loadedSupplier{id: deref(supplierID), external: deref(supplierDoc),
			push: deref(supplierPush)}}
		if supplierPushDue != nil {
			o.supplier.pushDue = *supplierPushDue
		}
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
		out[i] = c.delivery(j, found[j.ID], refs[i], refErrs[i])
	}
	return out, nil
}

// loadedOrder is a job's order document, the provider's document an
// earlier push of it created through the job's connection (nil: none), and
// its host supplier's.
type loadedOrder struct {
	doc      []byte
	known    *provider.Document
	supplier loadedSupplier
}

// loadedSupplier is the host's supplier of an order whose payload gives no
// externalSupplierId: its id (empty: none named), the provider's id of it
// through the job's connection (empty: none yet), and else its
// push_supplier still to be delivered (empty: none) and when that is due.
type loadedSupplier struct {
	id, external, push string
	pushDue            time.Time
}

// delivery is the job's push, or why it cannot be made, or what it waits for.
func (c *Command) delivery(j outbox.Job, o loadedOrder, ref supplierRef, refErr error) push.Delivery {
	if o.doc == nil {
		return push.Refuse(outbox.ConflictEntityNotFound, fmt.Sprintf(
			"purchase order %s not found for the organization and the connection's location", j.LocalEntityID))
	}
	if refErr != nil {
		return push.Refuse(outbox.ConflictPayloadInvalid, refErr.Error())
	}
	supplier := ref.External
	if supplier == "" {
		s := o.supplier
		switch {
		case s.id == "":
			return push.Refuse(outbox.ConflictPayloadInvalid, "payload_json.externalSupplierId: is required "+
				"(or payload_json.supplierId, or the order's supplier_id, naming the host's supplier pushed with push_supplier)")
		case s.external != "":
			supplier = s.external
		case s.push != "":
			return push.Delivery{Wait: &push.Wait{For: s.push, Recheck: max(time.Until(s.pushDue), 0) + push.WaitRecheck,
				Reason: fmt.Sprintf("waiting for supplier %s: its push_supplier %s is not delivered yet; "+
					"the order goes once it is, no attempt used", s.id, s.push)}}
		default:
			return push.Refuse(outbox.ConflictPayloadInvalid, fmt.Sprintf(
				"supplier %s has no contact through this connection and no push_supplier of it is waiting: "+
					"enqueue push_supplier for supplier %s (local_entity_type supplier), then rerun this command", s.id, s.id))
		}
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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// remember stores the document the provider answered with
// (document.Remember).
func (c *Command) remember(ctx context.Context, j outbox.Job, providerName string, doc provider.Document) error {
	return document.Remember(ctx, c.db, document.Key{ConnectionID: j.ConnectionID, EntityType: EntityType,
		EntityID: j.LocalEntityID, Provider: providerName}, doc)
}
