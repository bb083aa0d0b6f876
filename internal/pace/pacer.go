// Package pace spaces each connection's provider calls across the fleet and
// pauses a connection that its provider told to slow down.
//
// A provider that limits calls per minute (Xero 60, QuickBooks Online 500 per
// company) counts every call of the connection, whichever container makes it:
// each call takes a slot in the connection's row of
// integration_outbox_connection_pace, slots one interval (a minute divided by
// the limit) apart, so no 60 s window holds more calls than the limit. A 429
// pauses the connection until the provider's Retry-After: no container calls
// it and the claim takes none of its rows before then. Each step is one short
// statement; no transaction is held across a call or a wait.
package pace

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/sqlfile"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

var (
	reserveSQL     = statement("reserve")
	pauseSQL       = statement("pause")
	pausedUntilSQL = statement("paused_until")
	limitUsedUpSQL = statement("limit_used_up")
	resolveLimits  = statement("resolve_limits")
)

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "pace", name) }

// DB is what the pacer needs of the database: one statement at a time.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Pacer takes call slots and pauses connections.
type Pacer struct {
	db    DB
	sleep func(ctx context.Context, d time.Duration) error
}

// NewPacer returns a pacer on db.
func NewPacer(db DB) *Pacer { return &Pacer{db: db, sleep: sleepCtx} }

// Connection names the connection a call goes through.
type Connection struct {
	ID             string
	OrganizationID string
}

// Busy is the answer to a Wait that could not get a slot within its
// longest wait: the connection is paused, or its next free slot is further
// off. Come back at Until.
type Busy struct {
	Until  time.Time
	Paused bool
	Reason string // why the connection is paused (the provider's answer)
}

func (b *Busy) Error() string {
	if b.Paused {
		return fmt.Sprintf("the connection is paused until %s: %s", b.Until.UTC().Format(time.RFC3339), b.Reason)
	}
	return fmt.Sprintf("the connection's calls are paced: its next free slot is at %s", b.Until.UTC().Format(time.RFC3339Nano))
}

// Unauthorized is the answer to a Wait on a connection that needs
// reauthorization (its grant was refused, by the token endpoint or in a
// call): no call may go through it until the host reconnects it. It is
// read right before the call, so a container that still holds an access
// token of the refused grant does not spend a call to learn it.
type Unauthorized struct {
	Reason string
}

func (u *Unauthorized) Error() string {
	return "the connection needs reauthorization, no call is made until it is reconnected: " + u.Reason
}

// Wait takes the connection's next call slot for a provider limited to
// perMinute calls a minute and returns at that slot's time. A slot further
// than maxWait away is not taken: Wait returns a *Busy at once. perMinute 0
// means no limit: Wait returns at once unless the connection is paused.
//
// Slots are handed out ahead, so a pause (a 429 another container got) may
// be written while a caller sleeps to its slot: after the sleep Wait looks
// again, and when a pause now covers the slot it returns that pause's
// *Busy instead of letting the call start inside it. The slot is then
// spent, which only spaces the calls after the pause further apart. The
// same look returns an *Unauthorized when the connection has been found to
// need reauthorization meanwhile.
func (p *Pacer) Wait(ctx context.Context, c Connection, perMinute int, maxWait time.Duration) error {
	slot, err := p.Reserve(ctx, c, perMinute, maxWait)
	if err != nil {
		return err
	}
	if slot.IsZero() {
		return nil // no limit: Reserve checked the pause just now
	}
	if err := p.sleep(ctx, time.Until(slot)); err != nil {
		return fmt.Errorf("waiting for a call slot of connection %s: %w", c.ID, err)
	}
	return p.checkPause(ctx, c, slot)
}

// Reserve is Wait without the wait: it takes the slot and returns its time.
func (p *Pacer) Reserve(ctx context.Context, c Connection, perMinute int, maxWait time.Duration) (time.Time, error) {
	if perMinute <= 0 {
		return time.Time{}, p.checkPause(ctx, c, time.Time{})
	}
	interval := time.Minute / time.Duration(perMinute)
	var (
		slot     time.Time
		reserved bool
	)
	if err := p.db.QueryRow(ctx, reserveSQL, pgx.NamedArgs{
		"connection_id": c.ID, "organization_id": c.OrganizationID,
		"interval_seconds": interval.Seconds(), "max_wait_seconds": max(maxWait, 0).Seconds(),
	}).Scan(&slot, &reserved); err != nil {
		return time.Time{}, fmt.Errorf("taking a call slot of connection %s: %w", c.ID, err)
	}
	if !reserved {
		if err := p.checkPause(ctx, c, time.Time{}); err != nil {
			return time.Time{}, err
		}
		return time.Time{}, &Busy{Until: slot}
	}
	return slot, nil
}

// checkPause returns an *Unauthorized when the connection needs
// reauthorization, else a *Busy when it is paused past after (the zero
// time: paused at all).
func (p *Pacer) checkPause(ctx context.Context, c Connection, after time.Time) error {
	var (
		until                *time.Time
		reason, unauthorized string
	)
	if after.IsZero() {
		after = time.Unix(0, 0)
	}
	err := p.db.QueryRow(ctx, pausedUntilSQL, pgx.NamedArgs{"connection_id": c.ID, "after": after}).Scan(&until, &reason, &unauthorized)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("reading the pause of connection %s: %w", c.ID, err)
	case unauthorized != "":
		return &Unauthorized{Reason: unauthorized}
	case until != nil:
		return &Busy{Until: *until, Paused: true, Reason: reason}
	}
	return nil
}

// Pause stops every container's calls to the connection, and the claim of
// its rows, until until. A longer pause already running is kept.
func (p *Pacer) Pause(ctx context.Context, c Connection, until time.Time, reason string) error {
	if _, err := p.db.Exec(ctx, pauseSQL, pgx.NamedArgs{
		"connection_id": c.ID, "organization_id": c.OrganizationID, "until": until, "reason": reason,
	}); err != nil {
		return fmt.Errorf("pausing connection %s: %w", c.ID, err)
	}
	return nil
}

// LimitUsedUp is Pause for a provider's daily call limit used up (Xero's
// X-Rate-Limit-Problem: day): the connection pauses until the limit resets,
// and one connection_limit_reached conflict (summary: what the host's back
// office shows, e.g. "Xero's daily limit is used up until …") opens, unless
// the connection has one open or another container opened it for this
// pause. It returns the id of the conflict it opened, or "".
func (p *Pacer) LimitUsedUp(ctx context.Context, c Connection, until time.Time, reason, summary string) (string, error) {
	var (
		conflictID *string
		paused     bool
	)
	if err := p.db.QueryRow(ctx, limitUsedUpSQL, pgx.NamedArgs{
		"connection_id": c.ID, "organization_id": c.OrganizationID, "until": until, "reason": reason, "summary": summary,
	}).Scan(&conflictID, &paused); err != nil {
		return "", fmt.Errorf("pausing connection %s for its daily limit: %w", c.ID, err)
	}
	if conflictID == nil {
		return "", nil
	}
	return *conflictID, nil
}

// LimitResetReason is the resolution_reason of a connection_limit_reached
// conflict resolved because its pause ended.
const LimitResetReason = "The provider's daily limit has reset: the connection's commands are delivered again."

// ResolveEndedLimits resolves the open connection_limit_reached conflicts
// of connections whose pause has ended, and returns how many. The dispatch
// function calls it once per run.
func (p *Pacer) ResolveEndedLimits(ctx context.Context) (int64, error) {
	var n int64
	if err := p.db.QueryRow(ctx, resolveLimits, pgx.NamedArgs{"reason": LimitResetReason}).Scan(&n); err != nil {
		return 0, fmt.Errorf("resolving the daily limit conflicts of connections no longer paused: %w", err)
	}
	return n, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "pace") }
