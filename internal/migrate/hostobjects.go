package migrate

import (
	"fmt"
	"strings"
)

// HostObjects is what one migration adds to the host application's tables:
// columns, check constraints and indexes, and which indexes of an earlier
// migration it drops. Up adds each one the host lacks, then drops those
// indexes where they are ours, before the migration's SQL file runs, without
// blocking the host's writes (see Installer); the migration's down step
// builds again the indexes it dropped and drops exactly those it added.
// To change which indexes a migration owns, edit its list here (a new
// migration version for an installed schema: see docs/deploy.md).
type HostObjects struct {
	Columns     []Column
	Constraints []Constraint
	Indexes     []Index
	Drops       []DroppedIndex
	// NullForNewRows are columns of ours, added by an earlier migration,
	// that rows inserted without them read as NULL from this migration on.
	NullForNewRows []NullForNewRows
	// ClockDefaults are host columns whose default, where it is the
	// transaction's start (now()), becomes the time of the insert.
	ClockDefaults []ClockDefault
}

// ClockDefault makes the default of a host timestamp column, where it is
// now(), CURRENT_TIMESTAMP or transaction_timestamp() (all three the
// transaction's start), clock_timestamp(): rows inserted one after another
// in one transaction then read times in the order of their inserts. A
// catalog change under a brief lock: no scan, no rewrite, and the rows
// already there keep their values. Any other default (or none) stays as the
// host has it. The replaced default is recorded, and the down step puts it
// back.
type ClockDefault struct {
	Table, Column string
}

// NullForNewRows drops the NOT NULL and the default of a column of ours: a
// catalog change under a brief lock, no scan, no rewrite. The rows already
// there keep what they read (the value they store, or the default the
// column was added with, which PostgreSQL keeps as their missing value);
// only rows inserted afterwards without the column read NULL. The down step
// sets Default back; NOT NULL stays dropped, since setting it again would
// scan the table under an exclusive lock.
type NullForNewRows struct {
	Table, Name, Default string
}

// DroppedIndex names an index that an earlier migration (Version) declares
// and a later one drops. Its definition stays with the earlier migration: a
// run that applies both never builds it, and the later one's down step builds
// it again, recorded as the earlier migration's. An index of that name the
// host created itself is never recorded as ours, so it is never dropped.
type DroppedIndex struct {
	Version int64
	Name    string
}

// Column is a column of ours on a host table. Type is a PostgreSQL type
// name; Extra follows it in "add column" (not null, default). A column the
// host already has with the same type is the host's and stays.
type Column struct {
	Table, Name, Type, Extra string
}

// Constraint is a check constraint of ours on a host table; Check is its
// "check (...)" clause. It is added NOT VALID, then validated.
type Constraint struct {
	Table, Name, Check string
}

// Index is an index of ours on a host table, built and dropped
// CONCURRENTLY. Definition is everything after "on <table>": the column list,
// any include and where clauses.
type Index struct {
	Table, Name, Definition string
	Unique                  bool
	// MixedTimestamps, when set, replaces Definition on a host table whose
	// created_at and next_attempt_at are not of one type (a timestamp
	// without time zone beside a timestamptz): comparing the two depends on
	// the session's TimeZone, which PostgreSQL refuses in an index. It must
	// be implied by every query's condition that Definition is implied by,
	// so that the same queries use either.
	MixedTimestamps string
}

const (
	outbox    = "external_integration_outbox"
	conflicts = "external_integration_conflicts"
)

// hostObjects maps a migration version to what it adds to the host's
// tables. Versions without host objects are absent.
var hostObjects = map[int64]HostObjects{
	1: {
		// Lease and fencing: a claim sets a fresh claim_token and a lease;
		// starting the job consumes the claim (started_at); only the current
		// token records a result. now() is stable: existing rows take the
		// install's time without a table rewrite.
		Columns: []Column{
			{outbox, "claim_token", "uuid", ""},
			{outbox, "claimed_at", "timestamptz", ""},
			{outbox, "lease_expires_at", "timestamptz", ""},
			{outbox, "started_at", "timestamptz", ""},
			{outbox, "updated_at", "timestamptz", "not null default now()"},
			{conflicts, "outbox_id", "uuid", ""},
			{conflicts, "resolved_at", "timestamptz", ""},
			{conflicts, "resolution_reason", "text", ""},
		},
		Constraints: []Constraint{
			{outbox, statusCheck, "check (status in (" + quoteLiterals(statuses) + "))"},
		},
		Indexes: []Index{
			// Claim cost stays flat as terminal rows pile up: the claim scans
			// only these partial indexes, whose size is the number of
			// claimable / in-flight rows.
			{Table: outbox, Name: "external_integration_outbox_claimable_idx",
				Definition: "(created_at) where status in ('queued', 'failed')"},
			{Table: outbox, Name: "external_integration_outbox_leased_idx",
				Definition: "(lease_expires_at) where status = 'processing' and provider_status is null"},
			{Table: outbox, Name: "external_integration_outbox_follow_up_idx",
				Definition: "(next_attempt_at) where status = 'processing' and provider_status is not null"},
			// Operators' views and reruns by tenant. Completed rows, the bulk
			// of the table, are left out.
			{Table: outbox, Name: "external_integration_outbox_org_status_idx",
				Definition: "(organization_id, status, created_at) where status <> 'completed'"},
			// One open conflict per outbox row.
			{Table: conflicts, Name: "external_integration_conflicts_open_outbox_idx",
				Definition: "(outbox_id) where status = 'open' and outbox_id is not null", Unique: true},
			{Table: conflicts, Name: "external_integration_conflicts_org_idx",
				Definition: "(organization_id, status, created_at)"},
		},
	},
	2: {
		// Rows inserted by integration_outbox_enqueue carry
		// idempotency_enforced = true and only those are unique on
		// (organization_id, idempotency_key); the host's older rows may repeat
		// a key. A constant default needs no table rewrite.
		Columns: []Column{
			{outbox, "idempotency_enforced", "boolean", "not null default false"},
		},
		// Together the two indexes hold one entry per row with a key.
		Indexes: []Index{
			{Table: outbox, Name: "external_integration_outbox_enqueue_key_idx",
				Definition: "(organization_id, idempotency_key) where idempotency_enforced", Unique: true},
			// The keys of the host's own rows, looked up by the enqueue. Since
			// migration 10 only rows inserted before it read false (newer
			// ones read NULL), so the host's inserts no longer enter it.
			{Table: outbox, Name: "external_integration_outbox_legacy_key_idx",
				Definition: "(organization_id, idempotency_key, created_at) where not idempotency_enforced and idempotency_key is not null"},
		},
	},
	4: {
		Indexes: []Index{
			// The claim's walk over (organization, connection) pairs with
			// claimable rows; the included columns tell a due row from a
			// waiting one without the heap.
			{Table: outbox, Name: "external_integration_outbox_claim_walk_idx",
				Definition: "(organization_id, integration_connection_id, created_at) include (next_attempt_at, attempt_count) where status in ('queued', 'failed') and integration_connection_id is not null"},
			// Claimable rows without a connection.
			{Table: outbox, Name: "external_integration_outbox_claim_orphan_idx",
				Definition: "(created_at) where status in ('queued', 'failed') and integration_connection_id is null"},
			// Leased rows per connection, counted against its in-flight limit.
			{Table: outbox, Name: "external_integration_outbox_connection_leased_idx",
				Definition: "(integration_connection_id, lease_expires_at) where status = 'processing' and provider_status is null"},
		},
	},
	7: {
		Indexes: []Index{
			// Per-entity order: the claim's probe for another command of the
			// same connection and entity in flight or older and waiting. Only
			// the live rows: completed ones cost it nothing.
			{Table: outbox, Name: "external_integration_outbox_entity_idx",
				Definition: "(integration_connection_id, local_entity_id) where status in ('queued', 'failed', 'processing')"},
		},
	}, 8: {
		// Fewer index entries per host insert. A queued row a host inserts
		// no longer enters the operators' tenant index: its replacement holds
		// only the rows a rerun can requeue. The global partial indexes go:
		// no statement reads the claimable one (the claim walks claim_walk_idx
		// and claim_orphan_idx), and connection_leased_idx has the leased
		// one's condition and answers its global reads too.
		Indexes: []Index{
			// Reruns by filter (internal/rerun/sql/lock_by_filter.sql) and the
			// operators' failed view of one organization.
			{Table: outbox, Name: "external_integration_outbox_org_requeueable_idx",
				Definition: "(organization_id, status, created_at) where status in ('failed', 'dead_letter', 'uncertain')"},
		},
		Drops: []DroppedIndex{
			{1, "external_integration_outbox_claimable_idx"},
			{1, "external_integration_outbox_leased_idx"},
			{1, "external_integration_outbox_org_status_idx"},
		},
	},
	10: {
		// The host's own inserts stop paying for the legacy key index: a row
		// the host inserts from now on reads idempotency_enforced NULL, so it
		// enters neither key index (both conditions are false for NULL). The
		// rows already there keep false, and the enqueue still honours their
		// keys; the index shrinks as the host's retention deletes them.
		NullForNewRows: []NullForNewRows{
			{Table: outbox, Name: "idempotency_enforced", Default: "false"},
		},
	},
	11: {
		// The host's own inserts stop paying for the per-entity order's
		// index. A queued row with no next_attempt_at after its created_at
		// (what a host inserts, and a released row) is due from the start:
		// the claim's walk of its connection, oldest first, meets it before
		// any newer command of its entity, so the claim orders such rows
		// among its own candidates. The index holds only the rows the walk
		// may pass by: failed ones, queued ones due later, and the ones in
		// flight or reclaimable (processing).
		//
		// The claim's walk index loses its included columns: every
		// statement that reads it reads the row too (its entity, its id),
		// and an entry of 48 bytes instead of 64 fills fewer pages, so a
		// host insert writes fewer full-page images after a checkpoint.
		Indexes: []Index{
			{Table: outbox, Name: "external_integration_outbox_walk_idx",
				Definition: "(organization_id, integration_connection_id, created_at) where status in ('queued', 'failed') and integration_connection_id is not null"},
			// On a host whose created_at is a timestamp without time zone
			// and next_attempt_at a timestamptz (or the other way round),
			// every queued row with a next_attempt_at is in it: the host's
			// inserts that set next_attempt_at pay for an entry there. The
			// claim's condition, next_attempt_at > created_at, implies
			// next_attempt_at is not null, so the claim reads it all the same.
			{Table: outbox, Name: "external_integration_outbox_entity_order_idx",
				Definition:      "(integration_connection_id, local_entity_id) where local_entity_id is not null and (status in ('failed', 'processing') or (status = 'queued' and next_attempt_at > created_at))",
				MixedTimestamps: "(integration_connection_id, local_entity_id) where local_entity_id is not null and (status in ('failed', 'processing') or (status = 'queued' and next_attempt_at is not null))"},
		},
		// And a row the host inserts from now on reads updated_at NULL (it
		// stores 8 bytes less) until a step of ours writes it: the
		// operators' views read coalesce(updated_at, created_at).
		NullForNewRows: []NullForNewRows{
			{Table: outbox, Name: "updated_at", Default: "now()"},
		},
		Drops: []DroppedIndex{
			{4, "external_integration_outbox_claim_walk_idx"},
			{7, "external_integration_outbox_entity_idx"},
		},
	},
	12: {
		// Commands inserted in one transaction go in the order they were
		// inserted: integration_outbox_enqueue gives each call a created_at
		// later than the call before it in the transaction (its one
		// definition, which migration 12 applies to older installs), and
		// the host's own inserts take the time of their insert, where
		// created_at's default was the transaction's start, instead of all
		// the same one.
		ClockDefaults: []ClockDefault{
			{Table: outbox, Column: "created_at"},
		},
	},
	19: {
		// A command may wait for another (a purchase order for its
		// supplier's push_supplier): the waiting row names the one it
		// waits for, and the record of that one's end makes the waiting
		// rows due at once. Only waiting rows enter the index.
		Columns: []Column{
			{outbox, "waiting_for_outbox_id", "uuid", ""},
		},
		Indexes: []Index{
			{Table: outbox, Name: "external_integration_outbox_waiting_idx",
				Definition: "(waiting_for_outbox_id) where waiting_for_outbox_id is not null"},
			// A purchase order without its supplier's contact looks for
			// that supplier's push_supplier still to be delivered. Only
			// push_supplier rows that are not done enter the index: the
			// host's other inserts pay nothing but its condition.
			{Table: outbox, Name: "external_integration_outbox_supplier_push_idx",
				Definition: "(integration_connection_id, local_entity_id) where command_type = 'push_supplier' and status in ('queued', 'failed', 'processing')"},
		},
	},
	21: {
		// Followers parked. A due command that per-entity order holds back
		// behind another of its entity (the one in flight, or an older one
		// parked already) is parked by the claim that met it: it names the
		// command it waits for (waiting_for_outbox_id, status still
		// queued), and leaves the claim's walk index, so a later claim no
		// longer reads it; the record of that command's end makes it due
		// again (record.sql's woken step). The walk index becomes this one,
		// which holds no parked row; a row waiting for a supplier's push is
		// failed, not queued, and stays in it (it is due again at its retry
		// time). The host's inserts write the same one entry as before.
		Indexes: []Index{
			{Table: outbox, Name: "external_integration_outbox_walk_unparked_idx",
				Definition: "(organization_id, integration_connection_id, created_at) where status in ('queued', 'failed') and integration_connection_id is not null and (waiting_for_outbox_id is null or status <> 'queued')"},
		},
		Drops: []DroppedIndex{
			{11, "external_integration_outbox_walk_idx"},
		},
	},
}

// declaredIndex is the definition migration d.Version declares for d.Name.
func declaredIndex(d DroppedIndex) (Index, error) {
	for _, ix := range hostObjects[d.Version].Indexes {
		if ix.Name == d.Name {
			return ix, nil
		}
	}
	return Index{}, fmt.Errorf("migration %d declares no index %s", d.Version, d.Name)
}

// upTo is what version installs when a run goes up to target: its indexes
// that a migration after it, up to target, drops are left out.
func upTo(version, target int64) HostObjects {
	objs := hostObjects[version]
	dropped := map[string]bool{}
	for v, later := range hostObjects {
		if v <= version || v > target {
			continue
		}
		for _, d := range later.Drops {
			if d.Version == version {
				dropped[d.Name] = true
			}
		}
	}
	if len(dropped) == 0 {
		return objs
	}
	kept := objs
	kept.Indexes = nil
	for _, ix := range objs.Indexes {
		if !dropped[ix.Name] {
			kept.Indexes = append(kept.Indexes, ix)
		}
	}
	return kept
}

// quoteLiterals is values as a list of SQL string literals.
func quoteLiterals(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = quoteLiteral(v)
	}
	return strings.Join(quoted, ", ")
}
