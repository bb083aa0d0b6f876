// Package health is each integration connection's state as operators and the
// host see it (integration_outbox_connection_state): failing, disabled
// automatically after failing for CONNECTION_DISABLE_AFTER, or unauthorized
// (its grant must be renewed). The record statement keeps the failing period
// and disables (internal/outbox); this package marks a connection
// unauthorized and authorized again, enables a disabled one (the console's
// enableConnection), and reads the state for metrics and operators' views.
// Each write is one statement that also opens the conflict and writes the
// event of the change, so it belongs to the caller's transaction.
package health

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/sqlfile"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

var (
	markUnauthorizedSQL = statement("mark_unauthorized")
	reauthorizedSQL     = statement("reauthorized")
	enableSQL           = statement("enable")
	countsSQL           = statement("counts")
	listSQL             = statement("list")
)

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "health", name) }

// DB is what the package needs of a pool, a connection or a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Querier is what the read functions need: a pool, a connection or a
// transaction, read-only ones included.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNoConnection: the connection does not exist for the organization.
var ErrNoConnection = errors.New("no such integration connection for the organization")

// Unauthorized is a connection whose grant the provider refused.
type Unauthorized struct {
	OrganizationID string
	ConnectionID   string
	// Reason says why, for the conflict and the event's lastError (masked
	// by the caller: it is stored as given).
	Reason string
	// Events writes the Connection Unauthorized event (EVENT_BUS_NAME set).
	Events bool
	// ConflictID is the open connection_unauthorized conflict the caller
	// already opened for this, if any: it becomes the connection's (resolved
	// when it recovers) and no second one is opened. Empty: MarkUnauthorized
	// opens one.
	ConflictID string
}

// MarkUnauthorized records that u's connection must be authorized again, in
// db (the caller's transaction, with the change that found it out): the
// claim holds its rows, attempts unchanged, until Reauthorized. The first
// call opens one connection_unauthorized conflict and writes one Connection
// Unauthorized event; a repeat changes nothing and returns false.
func MarkUnauthorized(ctx context.Context, db DB, u Unauthorized) (marked bool, err error) {
	var exists bool
	if err := db.QueryRow(ctx, markUnauthorizedSQL, pgx.NamedArgs{
		"organization_id": u.OrganizationID, "connection_id": u.ConnectionID,
		"reason": u.Reason, "events_on": u.Events, "conflict_id": pgtx.Nullable(u.ConflictID),
	}).Scan(&exists, &marked); err != nil {
		return false, fmt.Errorf("marking connection %s unauthorized: %w", u.ConnectionID, err)
	}
	if !exists {
		return false, fmt.Errorf("marking connection %s unauthorized: %w", u.ConnectionID, ErrNoConnection)
	}
	return marked, nil
}

// Reauthorized ends the unauthorized hold of the organization's connection
// (its credentials were replaced): its rows are claimed again, its held
// rows due at once (madeDue counts them). This package
// owns the connection_unauthorized conflict: with a resolution (the host
// reconnected it) its open ones are resolved now with that reason;
// without, the first call that goes through resolves it. Connection
// Recovered is written by that first call. It returns whether the
// connection was unauthorized and how many conflicts it resolved.
func Reauthorized(ctx context.Context, db DB, organizationID, connectionID, resolution string) (ended bool, resolved, madeDue int64, err error) {
	if err := db.QueryRow(ctx, reauthorizedSQL, pgx.NamedArgs{
		"organization_id": organizationID, "connection_id": connectionID, "resolution": resolution,
	}).Scan(&ended, &resolved, &madeDue); err != nil {
		return false, 0, 0, fmt.Errorf("ending the unauthorized hold of connection %s: %w", connectionID, err)
	}
	return ended, resolved, madeDue, nil
}

// Enabled is what Enable did.
type Enabled struct {
	// DisabledAt is when the connection had been disabled; zero: it was
	// not disabled, and nothing changed.
	DisabledAt time.Time
	// MadeDue counts its held rows that became due at once.
	MadeDue int
}

// Enable enables the organization's disabled connection again: its rows are
// claimed again, oldest first, and the time to disable it again counts from now. Its
// connection_disabled conflict is resolved, and Connection Recovered
// written, by the first call that goes through.
func Enable(ctx context.Context, db DB, organizationID, connectionID string) (Enabled, error) {
	var (
		e  Enabled
		at *time.Time
	)
	err := db.QueryRow(ctx, enableSQL, pgx.NamedArgs{
		"organization_id": organizationID, "connection_id": connectionID}).Scan(&at, &e.MadeDue)
	if errors.Is(err, pgx.ErrNoRows) {
		return Enabled{}, fmt.Errorf("enabling connection %s: %w", connectionID, ErrNoConnection)
	}
	if err != nil {
		return Enabled{}, fmt.Errorf("enabling connection %s: %w", connectionID, err)
	}
	if at != nil {
		e.DisabledAt = *at
	}
	return e, nil
}

// Counts are the connections in each state, across all organizations.
type Counts struct {
	Disabled     int
	Unauthorized int
	// Failing counts the connections failing for CONNECTION_FAILING_AFTER
	// or longer (their connection_failing conflict is open).
	Failing int
}

// ReadCounts counts the connections that are disabled, unauthorized and
// failing.
func ReadCounts(ctx context.Context, db Querier) (Counts, error) {
	var c Counts
	if err := db.QueryRow(ctx, countsSQL).Scan(&c.Disabled, &c.Unauthorized, &c.Failing); err != nil {
		return Counts{}, fmt.Errorf("counting connections by state: %w", err)
	}
	return c, nil
}

// Connection is a connection that is disabled, unauthorized or failing.
type Connection struct {
	ConnectionID   string `json:"connectionId"`
	OrganizationID string `json:"organizationId"`
	Provider       string `json:"provider"`
	// State is "disabled", "unauthorized" or "failing".
	State string    `json:"state"`
	Since time.Time `json:"since"`
	// FailingSince is the first failure of its current failing period.
	FailingSince  *time.Time `json:"failingSince,omitempty"`
	LastFailureAt *time.Time `json:"lastFailureAt,omitempty"`
	// Reason says why: the disable or unauthorized reason, else the last
	// error (masked).
	Reason string `json:"reason"`
	// Waiting counts its queued and failed rows.
	Waiting int `json:"waiting"`
}

// List returns up to limit connections of the organization (all with an
// empty organizationID) that are disabled, unauthorized or failing, the
// longest-standing first.
func List(ctx context.Context, db Querier, organizationID string, limit int) ([]Connection, error) {
	var org any
	if organizationID != "" {
		org = organizationID
	}
	rows, err := db.Query(ctx, listSQL, pgx.NamedArgs{"organization_id": org, "list_limit": limit})
	if err != nil {
		return nil, fmt.Errorf("listing connections by state: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Connection, error) {
		var c Connection
		err := r.Scan(&c.ConnectionID, &c.OrganizationID, &c.Provider, &c.State, &c.Since,
			&c.FailingSince, &c.LastFailureAt, &c.Reason, &c.Waiting)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing connections by state: %w", err)
	}
	return cs, nil
}

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "health") }
