// Package hostschema declares what the worker needs of the host
// application's five tables, in one place: for each table, the columns it
// reads and writes, the types it accepts for each, and whether it inserts
// rows. The install checks the host's tables against it before it changes
// anything (internal/migrate), the schema check after (internal/schemacheck,
// outboxctl check), the stand-in of the host schema creates exactly it
// (migrations/standin), and docs/deploy.md's table is tested against it.
//
// What may vary (the contract's fifth round): statuses as text,
// varchar(n) or an enum type; json or jsonb; timestamps with or without time
// zone; text columns of any varchar(n) length, what the worker writes being
// cut to fit (integration_outbox_fit, migration 18). Ids are uuid.
package hostschema

import "slices"

// Kind is a family of PostgreSQL types a column may have.
type Kind string

const (
	// UUID: uuid only.
	UUID Kind = "uuid"
	// Text: text, varchar(n) or char(n); what the worker writes is cut to
	// the declared length.
	Text Kind = "text"
	// Status: text, varchar(n) or an enum type holding the values the
	// worker writes (the install adds the missing ones to the host's type).
	Status Kind = "status"
	// JSON: json or jsonb.
	JSON Kind = "json"
	// Timestamp: timestamp with or without time zone.
	Timestamp Kind = "timestamp"
	// Integer: smallint, integer or bigint.
	Integer Kind = "integer"
	// Any: read into a JSON document as it is (a purchase order line's
	// quantity, say): any type.
	Any Kind = "any"
)

// Owner says who puts a column on the table.
type Owner string

const (
	// Host: the host's table must have it; the install never adds it.
	Host Owner = "host"
	// Optional: read when the host's table has it (to_jsonb of the row);
	// the stand-in has it for the demo and the tests.
	Optional Owner = "optional"
	// Ours: the install adds it where the host's table lacks it
	// (internal/migrate's host objects); the down step drops it again.
	Ours Owner = "ours"
)

// Column is one column the worker uses.
type Column struct {
	Name  string
	Kind  Kind
	Owner Owner
	// Writes: the worker writes it (an insert or an update).
	Writes bool
	// Values are the values the worker writes into a Status column: an
	// enum must hold them, a varchar must be long enough for the longest.
	Values []string
	// StandIn is the column's type and constraints in the stand-in of the
	// host schema (migrations/standin): "uuid not null", say.
	StandIn string
}

// Table is one of the host's tables.
type Table struct {
	Name string
	// Inserts: the worker inserts rows, naming only Inserted columns, so
	// any other NOT NULL column needs a default.
	Inserts  bool
	Inserted []string
	Columns  []Column
}

// Column returns the column named name.
func (t Table) Column(name string) (Column, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// OutboxStatuses are the statuses the worker writes into the outbox.
var OutboxStatuses = []string{"queued", "processing", "completed", "failed", "uncertain", "unsupported", "dead_letter"}

// ConflictStatuses are those of a conflict.
var ConflictStatuses = []string{"open", "resolved"}

// ConflictTypes are the conflict_type values the worker writes.
var ConflictTypes = []string{"provider_rejected", "credential_rejected", "configuration_invalid", "entity_not_found",
	"payload_invalid", "connection_unauthorized", "connection_disabled", "connection_failing", "connection_limit_reached"}

// Severities are the severity values the worker writes.
var Severities = []string{"high", "medium"}

// The five tables, as named in the worker's statements (found through the
// search_path).
const (
	Outbox             = "external_integration_outbox"
	Connections        = "integration_connections"
	PurchaseOrders     = "purchase_orders"
	PurchaseOrderLines = "purchase_order_lines"
	Conflicts          = "external_integration_conflicts"
)

// Tables is the declaration: the host's tables in the order the stand-in
// creates them.
var Tables = []Table{
	{
		Name: Connections,
		Columns: []Column{
			{Name: "id", Kind: UUID, Owner: Host, StandIn: "uuid primary key default gen_random_uuid()"},
			{Name: "organization_id", Kind: UUID, Owner: Host, StandIn: "uuid not null"},
			{Name: "location_id", Kind: UUID, Owner: Host, StandIn: "uuid"},
			{Name: "provider", Kind: Text, Owner: Host, StandIn: "text not null"},
			{Name: "credential_reference", Kind: Text, Owner: Host, StandIn: "text"},
			{Name: "config_json", Kind: JSON, Owner: Host, StandIn: "jsonb not null default '{}'::jsonb"},
		},
	},
	{
		Name: PurchaseOrders,
		Columns: []Column{
			{Name: "id", Kind: UUID, Owner: Host, StandIn: "uuid primary key default gen_random_uuid()"},
			{Name: "organization_id", Kind: UUID, Owner: Host, StandIn: "uuid not null"},
			{Name: "location_id", Kind: UUID, Owner: Host, StandIn: "uuid"},
			// The rest of the row goes to the provider as it is (to_jsonb):
			// these are the columns the providers map when they are there.
			{Name: "supplier_id", Kind: Any, Owner: Optional, StandIn: "uuid"},
			{Name: "order_number", Kind: Any, Owner: Optional, StandIn: "text"},
			{Name: "currency_code", Kind: Any, Owner: Optional, StandIn: "text"},
			{Name: "status", Kind: Any, Owner: Optional, StandIn: "text"},
			{Name: "created_at", Kind: Any, Owner: Optional, StandIn: "timestamptz not null default now()"},
		},
	},
	{
		Name: PurchaseOrderLines,
		Columns: []Column{
			{Name: "id", Kind: UUID, Owner: Host, StandIn: "uuid primary key default gen_random_uuid()"},
			{Name: "purchase_order_id", Kind: UUID, Owner: Host, StandIn: "uuid not null"},
			{Name: "stock_item_id", Kind: Any, Owner: Host, StandIn: "uuid"},
			{Name: "ordered_quantity", Kind: Any, Owner: Host, StandIn: "numeric"},
			{Name: "purchase_unit_code", Kind: Any, Owner: Host, StandIn: "text"},
			{Name: "normalized_unit_code", Kind: Any, Owner: Host, StandIn: "text"},
			{Name: "units_per_purchase_unit_snapshot", Kind: Any, Owner: Host, StandIn: "numeric"},
			{Name: "unit_price_minor_snapshot", Kind: Any, Owner: Host, StandIn: "bigint"},
			{Name: "created_at", Kind: Timestamp, Owner: Host, StandIn: "timestamptz not null default now()"},
		},
	},
	{
		Name:    Outbox,
		Inserts: true,
		// integration_outbox_enqueue's insert.
		Inserted: []string{"organization_id", "integration_connection_id", "provider", "command_type",
			"local_entity_type", "local_entity_id", "payload_json", "idempotency_key", "idempotency_enforced",
			"status", "attempt_count", "next_attempt_at", "created_at"},
		Columns: []Column{
			{Name: "id", Kind: UUID, Owner: Host, StandIn: "uuid primary key default gen_random_uuid()"},
			{Name: "organization_id", Kind: UUID, Owner: Host, StandIn: "uuid not null"},
			{Name: "integration_connection_id", Kind: UUID, Owner: Host, StandIn: "uuid"},
			{Name: "provider", Kind: Text, Owner: Host, StandIn: "text"},
			{Name: "command_type", Kind: Text, Owner: Host, StandIn: "text"},
			{Name: "local_entity_type", Kind: Text, Owner: Host, StandIn: "text"},
			{Name: "local_entity_id", Kind: UUID, Owner: Host, StandIn: "uuid"},
			{Name: "payload_json", Kind: JSON, Owner: Host, StandIn: "jsonb not null default '{}'::jsonb"},
			{Name: "idempotency_key", Kind: Text, Owner: Host, StandIn: "text"},
			{Name: "status", Kind: Status, Owner: Host, Writes: true, Values: OutboxStatuses,
				StandIn: "text not null default 'queued'"},
			{Name: "attempt_count", Kind: Integer, Owner: Host, Writes: true, StandIn: "integer not null default 0"},
			{Name: "next_attempt_at", Kind: Timestamp, Owner: Host, Writes: true, StandIn: "timestamptz"},
			{Name: "last_error", Kind: Text, Owner: Host, Writes: true, StandIn: "text"},
			{Name: "provider_reference", Kind: Text, Owner: Host, Writes: true, StandIn: "text"},
			{Name: "provider_status", Kind: Text, Owner: Host, Writes: true, StandIn: "text"},
			{Name: "completed_at", Kind: Timestamp, Owner: Host, Writes: true, StandIn: "timestamptz"},
			{Name: "created_at", Kind: Timestamp, Owner: Host, StandIn: "timestamptz not null default now()"},
			// Lease and fencing (migration 1), the enqueue's key rule
			// (migration 2).
			{Name: "claim_token", Kind: UUID, Owner: Ours, Writes: true},
			{Name: "claimed_at", Kind: Timestamp, Owner: Ours, Writes: true},
			{Name: "lease_expires_at", Kind: Timestamp, Owner: Ours, Writes: true},
			{Name: "started_at", Kind: Timestamp, Owner: Ours, Writes: true},
			{Name: "updated_at", Kind: Timestamp, Owner: Ours, Writes: true},
			{Name: "idempotency_enforced", Kind: Any, Owner: Ours, Writes: true},
			// The row a waiting command waits for (migration 19).
			{Name: "waiting_for_outbox_id", Kind: UUID, Owner: Ours, Writes: true},
		},
	},
	{
		Name:    Conflicts,
		Inserts: true,
		// The worker's inserts name these (and some the id too).
		Inserted: []string{"organization_id", "location_id", "integration_connection_id", "conflict_type",
			"severity", "local_entity_type", "local_entity_id", "summary", "local_snapshot", "outbox_id", "status"},
		Columns: []Column{
			{Name: "id", Kind: UUID, Owner: Host, Writes: true, StandIn: "uuid primary key default gen_random_uuid()"},
			{Name: "organization_id", Kind: UUID, Owner: Host, Writes: true, StandIn: "uuid not null"},
			{Name: "location_id", Kind: UUID, Owner: Host, Writes: true, StandIn: "uuid"},
			{Name: "integration_connection_id", Kind: UUID, Owner: Host, Writes: true, StandIn: "uuid"},
			{Name: "conflict_type", Kind: Text, Owner: Host, Writes: true, Values: ConflictTypes, StandIn: "text not null"},
			{Name: "severity", Kind: Text, Owner: Host, Writes: true, Values: Severities, StandIn: "text not null default 'high'"},
			{Name: "local_entity_type", Kind: Text, Owner: Host, Writes: true, StandIn: "text"},
			{Name: "local_entity_id", Kind: UUID, Owner: Host, Writes: true, StandIn: "uuid"},
			{Name: "summary", Kind: Text, Owner: Host, Writes: true, StandIn: "text"},
			{Name: "local_snapshot", Kind: JSON, Owner: Host, Writes: true, StandIn: "jsonb"},
			{Name: "status", Kind: Status, Owner: Host, Writes: true, Values: ConflictStatuses,
				StandIn: "text not null default 'open'"},
			{Name: "created_at", Kind: Timestamp, Owner: Host, StandIn: "timestamptz not null default now()"},
			// Which outbox row a conflict is about, and how it was resolved
			// (migration 1).
			{Name: "outbox_id", Kind: UUID, Owner: Ours, Writes: true},
			{Name: "resolved_at", Kind: Timestamp, Owner: Ours, Writes: true},
			{Name: "resolution_reason", Kind: Text, Owner: Ours, Writes: true},
		},
	},
}

// Lookup returns the declared table named name.
func Lookup(name string) (Table, bool) {
	i := slices.IndexFunc(Tables, func(t Table) bool { return t.Name == name })
	if i < 0 {
		return Table{}, false
	}
	return Tables[i], true
}
