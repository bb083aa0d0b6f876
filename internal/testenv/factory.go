package testenv

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Fixture is a migrated test database with a factory for its rows.
type Fixture struct {
	Pool *pgxpool.Pool
	URL  string
}

// NewID returns a random uuid from the database.
func (f *Fixture) NewID(t testing.TB) string {
	t.Helper()
	var id string
	if err := f.Pool.QueryRow(context.Background(), `select gen_random_uuid()::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// ConnectionOpts describes an integration connection.
type ConnectionOpts struct {
	OrganizationID      string
	LocationID          string // empty: not location scoped
	Provider            string // default "sandbox"
	CredentialReference string
	Config              any // marshalled to config_json; default {}
}

// Connection inserts an integration connection and returns its id.
func (f *Fixture) Connection(t testing.TB, o ConnectionOpts) string {
	t.Helper()
	if o.Provider == "" {
		o.Provider = "sandbox"
	}
	cfg := []byte("{}")
	if o.Config != nil {
		var err error
		if cfg, err = json.Marshal(o.Config); err != nil {
			t.Fatal(err)
		}
	}
	var id string
	err := f.Pool.QueryRow(context.Background(), `
		insert into integration_connections (organization_id, location_id, provider, credential_reference, config_json)
		values ($1, nullif($2, '')::uuid, $3, nullif($4, ''), $5) returning id::text`,
		o.OrganizationID, o.LocationID, o.Provider, o.CredentialReference, cfg).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// PurchaseOrder inserts a purchase order with n lines and returns its id.
func (f *Fixture) PurchaseOrder(t testing.TB, organizationID, locationID string, lines int) string {
	t.Helper()
	ctx := context.Background()
	var id string
	err := f.Pool.QueryRow(ctx, `
		insert into purchase_orders (organization_id, location_id, order_number, status, currency_code)
		values ($1, nullif($2, '')::uuid, 'PO-' || substr(md5(random()::text), 1, 6), 'approved', 'EUR')
		returning id::text`, organizationID, locationID).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	for i := range lines {
		_, err := f.Pool.Exec(ctx, `
			insert into purchase_order_lines (purchase_order_id, stock_item_id, ordered_quantity, purchase_unit_code,
				normalized_unit_code, units_per_purchase_unit_snapshot, unit_price_minor_snapshot, created_at)
			values ($1, gen_random_uuid(), $2::int, 'case', 'each', 12, 1999, now() + make_interval(secs => $2::int))`, id, i+1)
		if err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// CommandOpts describes an outbox row. Zero fields get seed-like defaults.
type CommandOpts struct {
	OrganizationID string
	ConnectionID   string
	Provider       string // default "sandbox"
	CommandType    string // default push_purchase_order
	EntityType     string // default purchase_order (supplier for push_supplier)
	EntityID       string // the purchase order (supplier)
	Payload        any    // default {"externalSupplierId": "SUP-1"}
	IdempotencyKey string // default a random one
	Status         string // default queued
	AttemptCount   int
	NextAttemptAt  *time.Time
	CreatedAt      time.Time // default now()
}

// Command inserts an outbox row and returns its id.
func (f *Fixture) Command(t testing.TB, o CommandOpts) string {
	t.Helper()
	if o.Provider == "" {
		o.Provider = "sandbox"
	}
	if o.CommandType == "" {
		o.CommandType = "push_purchase_order"
	}
	if o.EntityType == "" {
		o.EntityType = "purchase_order"
		if o.CommandType == "push_supplier" {
			o.EntityType = "supplier"
		}
	}
	if o.Payload == nil {
		o.Payload = map[string]any{"externalSupplierId": "SUP-1"}
	}
	if o.Status == "" {
		o.Status = "queued"
	}
	payload, err := json.Marshal(o.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var created any
	if !o.CreatedAt.IsZero() {
		created = o.CreatedAt
	}
	var id string
	err = f.Pool.QueryRow(context.Background(), `
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
			local_entity_type, local_entity_id, payload_json, idempotency_key, status, attempt_count, next_attempt_at, created_at)
		values ($1, $2, $3, $4, $12, nullif($5, '')::uuid, $6,
			coalesce(nullif($7, ''), 'idem-' || gen_random_uuid()), $8, $9, $10, coalesce($11, now()))
		returning id::text`,
		o.OrganizationID, o.ConnectionID, o.Provider, o.CommandType, o.EntityID, payload, o.IdempotencyKey,
		o.Status, o.AttemptCount, o.NextAttemptAt, created, o.EntityType).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Row is an outbox row as tests inspect it.
type Row struct {
	ID                string
	Status            string
	AttemptCount      int
	NextAttemptAt     *time.Time
	LastError         *string
	ProviderReference *string
	ProviderStatus    *string
	CompletedAt       *time.Time
	ClaimToken        *string
	LeaseExpiresAt    *time.Time
	StartedAt         *time.Time
	// RetryInSeconds is next_attempt_at - now() in seconds, when set.
	RetryInSeconds *float64
}

// Row reads one outbox row.
func (f *Fixture) Row(t testing.TB, id string) Row {
	t.Helper()
	var r Row
	err := f.Pool.QueryRow(context.Background(), `
		select id::text, status, attempt_count, next_attempt_at, last_error, provider_reference, provider_status,
			completed_at, claim_token::text, lease_expires_at, started_at,
			extract(epoch from next_attempt_at - now())::float8
		from external_integration_outbox where id = $1`, id).Scan(
		&r.ID, &r.Status, &r.AttemptCount, &r.NextAttemptAt, &r.LastError, &r.ProviderReference, &r.ProviderStatus,
		&r.CompletedAt, &r.ClaimToken, &r.LeaseExpiresAt, &r.StartedAt, &r.RetryInSeconds)
	if err != nil {
		t.Fatalf("reading outbox row %s: %v", id, err)
	}
	return r
}

// Count runs a count(*) query.
func (f *Fixture) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// PurchaseOrderCommandOpts describes the trio most push tests start from:
// a connection, a purchase order and one command pushing it.
type PurchaseOrderCommandOpts struct {
	// Connection is the connection to insert; its OrganizationID is the
	// tenant of all three rows, its LocationID the order's location.
	Connection ConnectionOpts
	Lines      int // lines of the order; default 1
	// Command describes the outbox row. OrganizationID, ConnectionID and
	// EntityID are filled in; Provider defaults to the connection's, and
	// IdempotencyKey to "idem-<order id>".
	Command CommandOpts
}

// PurchaseOrderCommandIDs are the ids of the rows PurchaseOrderCommand
// inserted.
type PurchaseOrderCommandIDs struct {
	ConnectionID, PurchaseOrderID, CommandID string
}

// PurchaseOrderCommand inserts a connection, a purchase order and the
// command pushing it, and returns their ids.
func (f *Fixture) PurchaseOrderCommand(t testing.TB, o PurchaseOrderCommandOpts) PurchaseOrderCommandIDs {
	t.Helper()
	var ids PurchaseOrderCommandIDs
	ids.ConnectionID = f.Connection(t, o.Connection)
	ids.PurchaseOrderID = f.PurchaseOrder(t, o.Connection.OrganizationID, o.Connection.LocationID, max(o.Lines, 1))
	c := o.Command
	c.OrganizationID, c.ConnectionID, c.EntityID = o.Connection.OrganizationID, ids.ConnectionID, ids.PurchaseOrderID
	if c.Provider == "" {
		c.Provider = o.Connection.Provider
	}
	if c.IdempotencyKey == "" {
		c.IdempotencyKey = "idem-" + ids.PurchaseOrderID
	}
	ids.CommandID = f.Command(t, c)
	return ids
}
