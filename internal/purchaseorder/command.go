// Package purchaseorder is the push_purchase_order command: it loads the
// purchase orders of a batch of started jobs and sends each to a provider
// that can take purchase orders. The push worker (internal/push) does the
// rest: claims, credentials, outcomes, the fence.
package purchaseorder

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/document"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/push"
	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
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
	db       Querier
	routines *sqlroutine.Catalog
}

// NewCommand returns the command; it loads orders through db.
func NewCommand(db Querier) *Command {
	return &Command{db: db, routines: sqlroutine.NewCatalog(Routines()...)}
}

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
// push_supplier created through the connection, looked up in a second
// statement only for the batches that have such orders (lookUpSuppliers):
// while that push is still to be delivered the job waits for it, and
// without either it is refused as payload_invalid. Each push carries the
// provider's document an earlier push of the order created through the
// same connection, and a push whose provider answers with a document
// remembers it (integration_outbox_provider_documents).
func (c *Command) Load(ctx context.Context, jobs []outbox.Job) ([]push.Delivery, error) {
	n := len(jobs)
	ids, orgs, orders, locations := make([]string, n), make([]string, n), make([]*string, n), make([]*string, n)
	conns, providers := make([]*string, n), make([]string, n)
	refs, refErrs := make([]supplierRef, n), make([]error, n)
	for i, j := range jobs {
		ids[i], orgs[i], orders[i] = j.ID, j.OrganizationID, pgtx.Nullable(j.LocalEntityID)
		conns[i] = pgtx.Nullable(j.ConnectionID)
		if j.Connection != nil {
			locations[i] = pgtx.Nullable(j.Connection.LocationID)
			providers[i] = j.Connection.Provider
		}
		refs[i], refErrs[i] = readSupplierRef(j.Payload)
	}
	rows, err := c.routines.Query(ctx, c.db, load, pgx.NamedArgs{"outbox_ids": ids, "organization_ids": orgs, "order_ids": orders,
		"location_ids": locations, "connection_ids": conns, "providers": providers})
	if err != nil {
		return nil, fmt.Errorf("loading %d purchase orders: %w", n, sqlfile.Wrap("purchaseorder/load", err))
	}
	found := make(map[string]loadedOrder, n)
	wants := make(map[string]bool, n) // jobs whose payload names no externalSupplierId
	for i, j := range jobs {
		wants[j.ID] = refErrs[i] == nil && refs[i].External == ""
	}
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
		if err == nil && wants[id] {
			o.supplier.id, err = orderSupplierID(row)
		}
		found[id] = o
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("loading %d purchase orders: %w", n, sqlfile.Wrap("purchaseorder/load", err))
	}
	for i, j := range jobs {
		if o, ok := found[j.ID]; ok && wants[j.ID] && refs[i].HostID != "" {
			o.supplier.id = refs[i].HostID // the payload's before the order's
			found[j.ID] = o
		}
	}
	if err := c.lookUpSuppliers(ctx, jobs, found); err != nil {
		return nil, err
	}
	out := make([]push.Delivery, n)
	for i, j := range jobs {
		out[i] = c.delivery(j, found[j.ID], refs[i], refErrs[i])
	}
	return out, nil
}

// orderSupplierID is the order row's supplier_id (to_jsonb of the row), as
// text; empty when the host's table has none or it is null.
func orderSupplierID(row []byte) (string, error) {
	var r struct {
		SupplierID json.RawMessage `json:"supplier_id"`
	}
	if err := json.Unmarshal(row, &r); err != nil {
		return "", fmt.Errorf("decoding purchase order row: %w", err)
	}
	var s string
	switch {
	case len(r.SupplierID) == 0 || string(r.SupplierID) == "null":
		return "", nil
	case json.Unmarshal(r.SupplierID, &s) == nil:
		return s, nil
	}
	return string(r.SupplierID), nil // a number: its digits
}

// lookUpSuppliers reads, in one statement, the contact (and else the push
// still to be delivered) of every host supplier the found orders name; no
// statement when none does. A supplier id that is not a uuid is looked up
// nowhere: no push_supplier can have it.
func (c *Command) lookUpSuppliers(ctx context.Context, jobs []outbox.Job, found map[string]loadedOrder) error {
	var ids, orgs, conns, providers, suppliers []string
	for _, j := range jobs {
		o, ok := found[j.ID]
		if !ok || !message.IsUUID(o.supplier.id) || j.Connection == nil {
			continue
		}
		ids, orgs, conns = append(ids, j.ID), append(orgs, j.OrganizationID), append(conns, j.ConnectionID)
		providers, suppliers = append(providers, j.Connection.Provider), append(suppliers, o.supplier.id)
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := c.routines.Query(ctx, c.db, supplierLookUp, pgx.NamedArgs{"outbox_ids": ids, "organization_ids": orgs,
		"connection_ids": conns, "providers": providers, "supplier_ids": suppliers})
	if err != nil {
		return fmt.Errorf("looking up %d suppliers: %w", len(ids), sqlfile.Wrap("purchaseorder/suppliers", err))
	}
	var id string
	var external *string
	var pending []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &external, &pending}, func() error {
		o := found[id]
		o.supplier.external = deref(external)
		if pending != nil {
			var p struct {
				ID  string     `json:"id"`
				Due *time.Time `json:"due"`
			}
			if err := json.Unmarshal(pending, &p); err != nil {
				return fmt.Errorf("the supplier's push %s: %w", pending, err)
			}
			o.supplier.push = p.ID
			if p.Due != nil {
				o.supplier.pushDue = *p.Due
			}
		}
		found[id] = o
		return nil
	})
	if err != nil {
		return fmt.Errorf("looking up %d suppliers: %w", len(ids), sqlfile.Wrap("purchaseorder/suppliers", err))
	}
	return nil
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
	if !j.UnknownSince.IsZero() {
		cmd.Unknown = &provider.UnknownOutcome{Since: j.UnknownSince, Rerun: j.Rerun}
	}
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
