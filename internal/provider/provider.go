// Package provider defines what an external provider can do, a registry keyed
// by the connection's provider name, and the shipped providers: webhook,
// xero, quickbooks and sandbox.
package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"integration-outbox/internal/credential"
)

// Connection is the integration connection a command goes through.
type Connection struct {
	ID             string
	OrganizationID string
	LocationID     string // empty when the connection is not location scoped
	Provider       string
	Config         json.RawMessage // config_json
}

// PurchaseOrderPush is one push_purchase_order command.
type PurchaseOrderPush struct {
	CommandType        string
	IdempotencyKey     string
	ExternalSupplierID string
	// PurchaseOrder is the order's columns in camelCase plus "items" (its
	// line objects, docs/receivers.md), ready to be sent as JSON.
	PurchaseOrder json.RawMessage
	// Payload is the command's payload_json: the accounting providers read
	// their item and account mapping from it (docs/providers.md).
	Payload json.RawMessage
	// Document is the provider's document an earlier push of the same order
	// through the same connection created, nil when there is none: a
	// provider that keeps documents updates it instead of creating another.
	Document *Document
	// Unknown, when set, says that an earlier attempt of the same row
	// may have created the document without our hearing of it: an
	// accounting provider looks it up before creating again, once its
	// replay of the idempotency key may have lapsed.
	Unknown *UnknownOutcome
}

// UnknownOutcome is what the attempt history of a row says about its
// earlier attempts whose outcome is unknown: a create that timed out, lost
// its connection, was answered 5xx or was never recorded.
type UnknownOutcome struct {
	// Since is when the first such attempt started: the provider's replay
	// of the key runs from there.
	Since time.Time
	// Rerun is set when an operator reran the row after that attempt: the
	// push looks up first, whatever the time.
	Rerun bool
}

// ActionReconciled is the Action of a create that was not sent again
// because the provider already had its document: an earlier attempt whose
// answer was lost had made it. The row completes with that document.
const ActionReconciled = "reconciled"

// Document is a provider's document for one local entity through one
// connection (integration_outbox_provider_documents).
type Document struct {
	// ID is the provider's id of the document (Xero's PurchaseOrderID,
	// QuickBooks' Id).
	ID string
	// SyncToken is the document's version where the provider wants it on an
	// update (QuickBooks); empty otherwise.
	SyncToken string
}

// Result statuses as a provider reports them. Anything other than completed
// or uncertain (e.g. accepted) leaves the row processing with its
// provider_status recorded.
const (
	StatusCompleted = "completed"
	StatusAccepted  = "accepted"
	StatusUncertain = "uncertain"
)

// Result is a provider's answer to a command it took.
type Result struct {
	Status     string
	ExternalID string // provider_reference; may be empty
	// StatusCode is the HTTP status of the answer, 0 for a provider that
	// does not answer over HTTP (the sandbox). Kept in the attempt history.
	StatusCode int
	// Document, when set, is the provider's document the call created or
	// updated: the command remembers it, and the next push of the same
	// entity through the same connection gets it as PurchaseOrderPush.Document.
	Document *Document
	// Action, when set on a completed answer, says what the provider did
	// (SupplierCreated, SupplierUpdated, SupplierLinked): it is recorded as
	// the row's provider_status in place of "completed".
	Action string
}

// Provider is one external system. The commands it takes are the
// capability interfaces it implements (PurchaseOrderPusher, …): a command
// asks for its own with a type assertion, and a provider without it leaves
// the row unsupported. A new command type brings its own capability
// interface; this one does not change.
type Provider interface {
	// Name is the integration_connections.provider value it serves.
	Name() string
}

// PurchaseOrderPusher is the capability of push_purchase_order.
type PurchaseOrderPusher interface {
	Provider
	PushPurchaseOrder(ctx context.Context, conn Connection, cred credential.Credential, cmd PurchaseOrderPush) (Result, error)
}

// PurchaseOrderChecker is a PurchaseOrderPusher that can tell, without
// calling anyone, that PushPurchaseOrder would refuse the push before any
// call (bad config_json, a payload it can never send, no access token):
// the push worker asks it before it takes a call slot of the connection,
// so a refused command uses none. A nil error says nothing more than that
// the call would be made.
type PurchaseOrderChecker interface {
	CheckPurchaseOrder(conn Connection, cred credential.Credential, cmd PurchaseOrderPush) error
}

// ErrorKind classifies a provider failure where it is born.
type ErrorKind int

const (
	// Retryable: 408/429/5xx, network errors, timeouts.
	Retryable ErrorKind = iota + 1
	// Rejected: a 4xx other than 408/409/429 — permanent, conflict provider_rejected.
	Rejected
	// ConfigInvalid: the connection's config_json is unusable — permanent,
	// conflict configuration_invalid.
	ConfigInvalid
	// PayloadInvalid: the command's payload cannot be sent — permanent,
	// conflict payload_invalid.
	PayloadInvalid
	// Duplicate: the provider holds more than one document an earlier
	// create of the command may have made; which is ours is a person's
	// decision — permanent, conflict provider_duplicate.
	Duplicate
)

func (k ErrorKind) String() string {
	switch k {
	case Retryable:
		return "retryable"
	case Rejected:
		return "rejected"
	case ConfigInvalid:
		return "config_invalid"
	case PayloadInvalid:
		return "payload_invalid"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is a classified provider failure.
type Error struct {
	Kind ErrorKind
	// StatusCode is the HTTP status when there was a response, else 0.
	StatusCode int
	// RetryAfter is the provider's Retry-After, when it sent one.
	RetryAfter time.Duration
	// AuthFailed is set for 401/403 answers: the caller refreshes the
	// credential once and retries.
	AuthFailed bool
	// NeedsReauthorization is set, with AuthFailed, when the answer says
	// the grant itself is gone (a disconnected Xero tenant, a QuickBooks
	// 403): a fresh access token will not help until someone reconnects the
	// connection.
	NeedsReauthorization bool
	// PauseConnection is set when the provider told the whole connection to
	// slow down (a 429 of a provider that limits each connection): no
	// container calls it, and the claim takes none of its rows, until
	// RetryAfter has passed; the attempt is not charged.
	PauseConnection bool
	// DailyLimit is set, with PauseConnection, when the provider's daily
	// call limit of the connection is used up (Xero's X-Rate-Limit-Problem:
	// day): the pause lasts until it resets (RetryAfter, up to a day), and
	// the host is told with a connection_limit_reached conflict.
	DailyLimit bool
	// OutcomeUnknown is set when, after this failure, the provider may hold
	// a document the command created that we have not heard of: a create
	// that timed out, lost its connection or was answered 5xx, or a look-up
	// of such a create that failed. The next attempt looks it up first once
	// the provider's replay of the key may have lapsed.
	OutcomeUnknown bool
	// Message says what happened; it may quote the response body (truncated)
	// and must never contain a secret value.
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// ErrUnknownProvider is returned by Registry.Get for a name nobody registered.
var ErrUnknownProvider = errors.New("unknown provider")

// Registry maps a connection's provider name to its implementation.
type Registry map[string]Provider

// Provider names, as integration_connections.provider holds them.
const (
	NameWebhook    = "webhook"
	NameSandbox    = "sandbox"
	NameXero       = "xero"
	NameQuickBooks = "quickbooks"
)

// NewRegistry returns the providers keyed by their names.
func NewRegistry(providers ...Provider) Registry {
	r := make(Registry, len(providers))
	for _, p := range providers {
		r[p.Name()] = p
	}
	return r
}

// ErrProviderOff is returned by Registry.Get for the sandbox when it is not
// registered: SANDBOX_PROVIDER_ENABLED is off in this deployment.
var ErrProviderOff = errors.New("provider switched off")

// Get returns the provider registered under name.
func (r Registry) Get(name string) (Provider, error) {
	p, ok := r[name]
	switch {
	case !ok && name == NameSandbox:
		return nil, fmt.Errorf("provider %q: %w in this deployment (SANDBOX_PROVIDER_ENABLED is not true)", name, ErrProviderOff)
	case !ok:
		return nil, fmt.Errorf("provider %q: %w", name, ErrUnknownProvider)
	}
	return p, nil
}
