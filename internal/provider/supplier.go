package provider

import (
	"context"

	"integration-outbox/internal/credential"
)

// Supplier is the host's supplier as the push_supplier command sends it:
// the snapshot the host wrote into payload_json when it enqueued the
// command. Name is never empty; every other field may be.
type Supplier struct {
	// ID is the host's supplier id (the row's local_entity_id).
	ID           string
	Name         string
	Email        string
	Phone        string
	AddressLines []string
	City         string
	PostalCode   string
	Country      string
	TaxNumber    string
	CurrencyCode string
	// Code is the host's supplier code: Xero's ContactNumber, QuickBooks'
	// AcctNum, so that the contact or vendor can be found again.
	Code string
}

// SupplierPush is one push_supplier command.
type SupplierPush struct {
	CommandType    string
	IdempotencyKey string
	Supplier       Supplier
	// Document is the contact or vendor an earlier push of the same
	// supplier through the same connection created or linked to, nil when
	// there is none: the provider updates it instead of creating another.
	Document *Document
}

// Supplier actions a provider reports in Result.Action: which of create,
// update or link happened. The row is completed in each case, with the
// action as its provider_status.
const (
	SupplierCreated = "created"
	SupplierUpdated = "updated"
	// SupplierLinked: the provider already had a contact or vendor of that
	// name (or code), and the push linked the host's supplier to it.
	SupplierLinked = "linked"
)

// SupplierPusher is the capability of push_supplier: it creates or updates
// the supplier as the provider's contact (Xero), vendor (QuickBooks) or a
// signed event (webhook). A completed Result carries the provider's id as
// ExternalID and as Document (the mapping the purchase orders use), and
// says in Action which of create, update or link happened.
type SupplierPusher interface {
	Provider
	PushSupplier(ctx context.Context, conn Connection, cred credential.Credential, cmd SupplierPush) (Result, error)
}

// SupplierChecker is a SupplierPusher that can tell, without calling
// anyone, that PushSupplier would refuse the push before any call (bad
// config_json, a field the provider cannot take, no access token), as
// PurchaseOrderChecker does for purchase orders.
type SupplierChecker interface {
	CheckSupplier(conn Connection, cred credential.Credential, cmd SupplierPush) error
}
