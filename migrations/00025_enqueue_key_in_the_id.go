package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
)

// migration25: the row integration_outbox_enqueue inserts is kept unique by
// its id alone, the key's digest (integration_outbox_key_id), where the
// outbox's id is unique: the row no longer enters the key index, so neither
// the host's call nor any later update of the row (the claim, the record)
// writes a key entry. Where no unique index holds the outbox's id alone, the
// function keeps the key index (KeyIndex) and nothing else changes.
//
// A body from before this file gave the row a random id, and only the key
// index tells its rows apart: a call of that body still running once the
// function keeps keys by id alone could insert a key a new call inserts too.
// So Up goes in three steps, none of which blocks a host write:
//
//  1. It applies Enqueue with the key index (the rows get the key's id and
//     enter the key index), which conflicts with both: with an earlier body's
//     rows on the key index, with the final body's on the id.
//  2. It waits until every transaction that may have called an earlier body
//     has ended (waitForEarlierCalls).
//  3. It applies Enqueue without the key index.
//
// An install whose function already keeps keys by id goes straight to 3.
// Step 3 leaves out the function's probe of the key index where no row of a
// random id is left in it (KeyProbe), and its probe of the legacy key index
// where no row is in it (HostKeys).
// Down applies Enqueue with the key index again, as migrations 2 to 22 do,
// at once: the two bodies conflict on the id, so no call needs waiting for.
// The rows inserted meanwhile keep NULL and their id, which the key index's
// body reads (integration_outbox_enqueue_existing) and conflicts with.
var migration25 = goose.NewGoMigration(25, &goose.GoFunc{RunDB: keyInTheID}, applyEnqueue())

// Options are what a run of the migrations passes to the Go ones, through
// the context (WithOptions).
type Options struct {
	// EnqueueSwitchWait bounds step 2 of migration 25 (default
	// DefaultEnqueueSwitchWait): past it the run fails, the function keeps
	// the key index (correct, only not lighter), and a later make migrate
	// tries again.
	EnqueueSwitchWait time.Duration
	// Log receives what an operator may wait for (default: nothing).
	Log *slog.Logger
}

// DefaultEnqueueSwitchWait is EnqueueSwitchWait's default.
const DefaultEnqueueSwitchWait = 10 * time.Minute

type optionsKey struct{}

// WithOptions is ctx carrying o to the Go migrations.
func WithOptions(ctx context.Context, o Options) context.Context {
	return context.WithValue(ctx, optionsKey{}, o)
}

func options(ctx context.Context) Options {
	o, _ := ctx.Value(optionsKey{}).(Options)
	if o.EnqueueSwitchWait <= 0 {
		o.EnqueueSwitchWait = DefaultEnqueueSwitchWait
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// enqueueSwitchGrace is how long step 2 lets a call that read the earlier
// body just before step 1's commit reach its first statement, which locks
// the outbox, before it reads who holds a lock on the outbox.
var enqueueSwitchGrace = 500 * time.Millisecond

// keyIDUniqueSQL says whether a unique index of the outbox ($1) holds its id
// alone, valid, immediate and without a predicate: what "on conflict (id)"
// needs as its arbiter (a primary key is one).
const keyIDUniqueSQL = `
select exists (
    select from pg_index i
    join pg_attribute a on a.attrelid = i.indrelid and a.attnum = i.indkey[0]
    where i.indrelid = $1::regclass and i.indisunique and i.indisvalid and i.indisready and i.indimmediate
      and i.indnkeyatts = 1 and i.indpred is null and i.indexprs is null and a.attname = 'id')`

// byIDInstalledSQL says whether the enqueue function of the schema ($1)
// already keeps keys by id alone.
const byIDInstalledSQL = `
select coalesce((select p.prosrc like '%on conflict (id) do nothing%' from pg_proc p
    where p.oid = to_regprocedure($1 || '.integration_outbox_enqueue(uuid, uuid, text, text, uuid, jsonb, text)')), false)`

// randomIDKeysSQL says whether the key index ($1's rows with
// idempotency_enforced) holds a row whose id is not its key's: one a body
// from before migration 25 inserted. It reads the index in key order and
// stops at the first such row, so it reads little where there is one (a row
// from before 25 is any of them) and where there is none (the index holds
// only the rows enqueued during migration 25's wait, if any).
const randomIDKeysSQL = `
select exists (select from %s o
    where o.idempotency_enforced and o.id <> %s.integration_outbox_key_id(o.organization_id, o.idempotency_key))`

// hostKeysSQL says whether the legacy key index holds a row: one of the
// host's from before migration 10 (later ones read idempotency_enforced
// NULL). Only a down step below 10 brings such rows again, and migration 25
// runs again on the way back up.
const hostKeysSQL = `
select exists (select from %s o where not o.idempotency_enforced and o.idempotency_key is not null)`

func keyInTheID(ctx context.Context, db *sql.DB) error {
	var n EnqueueNames
	var unique, byID bool
	if err := inTx(ctx, db, func(tx *sql.Tx) error {
		var err error
		if n, unique, byID, err = readKeysByID(ctx, tx); err != nil {
			return err
		}
		if byID && unique {
			return nil
		}
		n.KeyIndex = true // step 1, or all there is without a unique id
		return applyEnqueueTx(ctx, tx, n)
	}); err != nil {
		return err
	}
	if !unique {
		return nil
	}
	if !byID {
		if err := waitForEarlierCalls(ctx, db, n.Outbox); err != nil {
			return err
		}
	}
	// Step 3. After the wait no call of a body from before 25 runs, so the
	// rows of random ids in the key index can only go, never come.
	return inTx(ctx, db, func(tx *sql.Tx) error { return applyKeysByID(ctx, tx, n) })
}

// readKeysByID reads the enqueue functions' names in tx, whether the
// outbox's id is unique (keyIDUniqueSQL) and whether the installed function
// already keeps keys by id (byIDInstalledSQL).
func readKeysByID(ctx context.Context, tx *sql.Tx) (n EnqueueNames, unique, byID bool, err error) {
	if n, err = readEnqueueNames(ctx, tx); err != nil {
		return n, false, false, err
	}
	if err := tx.QueryRowContext(ctx, keyIDUniqueSQL, n.Outbox).Scan(&unique); err != nil {
		return n, false, false, fmt.Errorf("reading whether the outbox's id is unique: %w", err)
	}
	if err := tx.QueryRowContext(ctx, byIDInstalledSQL, n.Schema).Scan(&byID); err != nil {
		return n, false, false, fmt.Errorf("reading the installed enqueue function: %w", err)
	}
	return n, unique, byID, nil
}

// applyKeysByID applies Enqueue without the key index (n.KeyIndex false),
// with the probes of the key indexes that still hold rows to honour
// (KeyProbe, HostKeys), read in tx. Only where no body from before
// migration 25 can run: migration 25's step 3, and migration 26.
func applyKeysByID(ctx context.Context, tx *sql.Tx, n EnqueueNames) error {
	if err := readProbes(ctx, tx, &n); err != nil {
		return err
	}
	return applyEnqueueTx(ctx, tx, n)
}

// readProbes sets n to keep keys by id alone, with the probes of the key
// indexes that still hold rows to honour (KeyProbe, HostKeys), read in tx.
func readProbes(ctx context.Context, tx *sql.Tx, n *EnqueueNames) error {
	n.KeyIndex = false
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(randomIDKeysSQL, n.Outbox, n.Schema)).Scan(&n.KeyProbe); err != nil {
		return fmt.Errorf("reading whether the key index holds rows of random ids: %w", err)
	}
	if err := tx.QueryRowContext(ctx, fmt.Sprintf(hostKeysSQL, n.Outbox)).Scan(&n.HostKeys); err != nil {
		return fmt.Errorf("reading whether the legacy key index holds rows: %w", err)
	}
	return nil
}

// inTx runs fn in a transaction of db and commits it.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// earlierCallsSQL reads the transactions that may have called an earlier
// body of the function: every other transaction holding a lock on the
// outbox ($1), which the function's first statement takes, and every other
// transaction of this database begun before $2 (step 1's commit), of those
// whose start the role may read. Each by its virtual transaction id, which
// no later transaction reuses while the server runs, or by its backend and
// start. A prepared transaction has no backend: stillRunningSQL reads those
// prepared before $2 itself.
const earlierCallsSQL = `
select l.virtualtransaction, l.pid, null::timestamptz from pg_locks l
where l.locktype = 'relation' and l.relation = $1::regclass
  and l.database = (select oid from pg_database where datname = current_database())
  and l.pid is not null and l.pid <> pg_backend_pid()
union
select null, a.pid, a.xact_start from pg_stat_activity a
where a.datname = current_database() and a.backend_type = 'client backend'
  and a.pid <> pg_backend_pid() and a.xact_start < $2`

// stillRunningSQL names which of the transactions read by earlierCallsSQL
// are still running (a virtual transaction holds the lock on its own id
// until it ends), and the transactions of this database prepared before
// $4 and not yet committed or rolled back.
const stillRunningSQL = `
select format('pid %s', l.pid) || coalesce(', in a transaction since ' || to_char(a.xact_start at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '')
from pg_locks l left join pg_stat_activity a on a.pid = l.pid
where l.locktype = 'virtualxid' and l.virtualxid = any($1::text[]) and l.granted
union
select format('pid %s, in a transaction since %s', a.pid, to_char(a.xact_start at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
from pg_stat_activity a
join unnest($2::int[], $3::timestamptz[]) t(pid, xact_start) on t.pid = a.pid and t.xact_start = a.xact_start
union
select format('prepared transaction %L (prepared at %s)', p.gid, to_char(p.prepared at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
from pg_prepared_xacts p where p.database = current_database() and p.prepared < $4`

// waitForEarlierCalls is step 2 of migration 25: it waits, polling and
// holding nothing, until each transaction that may have called the
// function's earlier body has ended, or fails after EnqueueSwitchWait
// naming the ones still running.
func waitForEarlierCalls(ctx context.Context, db *sql.DB, outbox string) error {
	var committed time.Time
	if err := db.QueryRowContext(ctx, `select clock_timestamp()`).Scan(&committed); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(enqueueSwitchGrace):
	}
	rows, err := db.QueryContext(ctx, earlierCallsSQL, outbox, committed)
	if err != nil {
		return fmt.Errorf("reading the transactions that may call the enqueue function's earlier body: %w", err)
	}
	var vxids []string
	var pids []int32
	var starts []time.Time
	for rows.Next() {
		var vxid sql.NullString
		var pid int32
		var start sql.NullTime
		if err := rows.Scan(&vxid, &pid, &start); err != nil {
			rows.Close()
			return err
		}
		if vxid.Valid {
			vxids = append(vxids, vxid.String)
		} else if start.Valid {
			pids, starts = append(pids, pid), append(starts, start.Time)
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	running, err := stillRunning(ctx, db, vxids, pids, starts, committed)
	if err != nil || len(running) == 0 {
		return err
	}
	o := options(ctx)
	o.Log.InfoContext(ctx, "migration 25: waiting for the transactions that may still call the enqueue function's earlier body",
		"transactions", len(running), "atMost", o.EnqueueSwitchWait.String())
	deadline := time.Now().Add(o.EnqueueSwitchWait)
	for {
		if running, err = stillRunning(ctx, db, vxids, pids, starts, committed); err != nil || len(running) == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("migration 25 waited %s for transactions that may still call the enqueue function's earlier body to end (%s): "+
				"the function keeps keys in the key index meanwhile; end them and run make migrate again", o.EnqueueSwitchWait, strings.Join(running, ", "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stillRunning names the transactions of waitForEarlierCalls still running.
func stillRunning(ctx context.Context, db *sql.DB, vxids []string, pids []int32, starts []time.Time, committed time.Time) ([]string, error) {
	rows, err := db.QueryContext(ctx, stillRunningSQL, vxids, pids, starts, committed)
	if err != nil {
		return nil, fmt.Errorf("reading which earlier transactions still run: %w", err)
	}
	defer rows.Close()
	var running []string
	for rows.Next() {
		var what string
		if err := rows.Scan(&what); err != nil {
			return nil, err
		}
		running = append(running, what)
	}
	return running, rows.Err()
}
