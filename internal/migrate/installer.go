package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Installer adds and drops our objects on the host's tables without blocking
// the host's writes: indexes are built and dropped CONCURRENTLY (outside any
// transaction), constraints are added NOT VALID and then validated, and
// every ALTER runs in its own short transaction under lock_timeout, retried
// with backoff, so a host insert never queues behind it for longer than the
// lock timeout. Every object it adds is recorded in
// integration_outbox_owned_objects, and only recorded objects are dropped.
type Installer struct {
	conn        *pgx.Conn
	log         *slog.Logger
	lockTimeout time.Duration
	maxAttempts int
}

// InstallerConfig tunes an Installer; zero fields take their defaults.
type InstallerConfig struct {
	// LockTimeout bounds how long an ALTER waits for its lock, and so how
	// long a host write can queue behind it (default 200ms).
	LockTimeout time.Duration
	// MaxAttempts is how many times an ALTER is tried before the install
	// fails (default 60, about four minutes of backoff: an autovacuum of the
	// table holds a lock an ALTER waits for, and does not yield to a wait
	// shorter than deadlock_timeout).
	MaxAttempts int
}

// NewInstaller returns an Installer on conn, which it uses outside any
// transaction.
func NewInstaller(conn *pgx.Conn, log *slog.Logger, cfg InstallerConfig) *Installer {
	return &Installer{conn: conn, log: log,
		lockTimeout: cmp.Or(cfg.LockTimeout, 200*time.Millisecond),
		maxAttempts: cmp.Or(cfg.MaxAttempts, 60)}
}

// ownedObjectsSQL creates the bookkeeping table (also created by migration 1,
// which drops it on its way down).
const ownedObjectsSQL = `
create table if not exists integration_outbox_owned_objects (
    id bigint generated always as identity primary key,
    migration bigint not null,
    kind text not null,
    table_name text not null,
    object_name text not null,
    created_at timestamptz not null default now(),
    replaced_default text,
    unique (kind, table_name, object_name)
)`

// Install adds what version declares on the host's tables, skipping what is
// already there: a column or index the host has with the same definition
// stays the host's; an index of ours left INVALID (an interrupted build) is
// rebuilt; an object with our name and another definition is refused.
func (in *Installer) Install(ctx context.Context, version int64, objs HostObjects) error {
	if _, err := in.conn.Exec(ctx, ownedObjectsSQL); err != nil {
		return fmt.Errorf("creating integration_outbox_owned_objects: %w", err)
	}
	if err := in.recordDefaults(ctx); err != nil {
		return err
	}
	for _, c := range objs.Columns {
		if err := in.installColumn(ctx, version, c); err != nil {
			return fmt.Errorf("migration %d: column %s.%s: %w", version, c.Table, c.Name, err)
		}
	}
	for _, c := range objs.Constraints {
		if err := in.installConstraint(ctx, version, c); err != nil {
			return fmt.Errorf("migration %d: constraint %s on %s: %w", version, c.Name, c.Table, err)
		}
	}
	for _, ix := range objs.Indexes {
		if err := in.installIndex(ctx, version, ix); err != nil {
			return fmt.Errorf("migration %d: index %s on %s: %w", version, ix.Name, ix.Table, err)
		}
	}
	for _, c := range objs.NullForNewRows {
		if err := in.nullForNewRows(ctx, c); err != nil {
			return fmt.Errorf("migration %d: column %s.%s: %w", version, c.Table, c.Name, err)
		}
	}
	for _, d := range objs.ClockDefaults {
		if err := in.installClockDefault(ctx, version, d); err != nil {
			return fmt.Errorf("migration %d: default of %s.%s: %w", version, d.Table, d.Column, err)
		}
	}
	// Dropped once what replaces them is built.
	for _, d := range objs.Drops {
		if err := in.dropEarlierIndex(ctx, d); err != nil {
			return fmt.Errorf("migration %d: dropping index %s of migration %d: %w", version, d.Name, d.Version, err)
		}
	}
	return nil
}

// dropEarlierIndex drops CONCURRENTLY the index d names if it is recorded as
// ours, then forgets it. An index of that name the host has is not ours and
// stays. Dropped first, forgotten after: a run killed in between finds the
// record without its index and forgets it.
func (in *Installer) dropEarlierIndex(ctx context.Context, d DroppedIndex) error {
	ix, err := declaredIndex(d)
	if err != nil {
		return err
	}
	e, err := in.lookupIndex(ctx, ix)
	if err != nil {
		return err
	}
	if e != nil && !e.owned {
		in.log.InfoContext(ctx, "leaving the host's own index of a name we no longer use", "index", ix.Name)
		return nil
	}
	if e != nil && e.onTable {
		if err := in.dropIndex(ctx, ix.Table, ix.Name); err != nil {
			return err
		}
	}
	if _, err := in.conn.Exec(ctx, `
		delete from integration_outbox_owned_objects
		where kind = 'index' and table_name = $1 and object_name = $2`, ix.Table, ix.Name); err != nil {
		return fmt.Errorf("forgetting: %w", err)
	}
	return nil
}

// Restore builds again, CONCURRENTLY, the indexes objs drops (a down step),
// each recorded as the migration's that declares it. A relation of that name
// that is not ours (the host's) is left as it is.
func (in *Installer) Restore(ctx context.Context, objs HostObjects) error {
	if _, err := in.conn.Exec(ctx, ownedObjectsSQL); err != nil {
		return fmt.Errorf("creating integration_outbox_owned_objects: %w", err)
	}
	for _, d := range objs.Drops {
		ix, err := declaredIndex(d)
		if err != nil {
			return err
		}
		var found bool
		if err := in.conn.QueryRow(ctx, `select to_regclass($1) is not null`, ix.Table).Scan(&found); err != nil {
			return fmt.Errorf("reading the catalog: %w", err)
		}
		if !found {
			continue // the host's table is gone: nothing to index
		}
		e, err := in.lookupIndex(ctx, ix)
		if err != nil {
			return err
		}
		if e != nil && !e.owned {
			continue
		}
		if err := in.installIndex(ctx, d.Version, ix); err != nil {
			return fmt.Errorf("restoring index %s of migration %d: %w", ix.Name, d.Version, err)
		}
	}
	return nil
}

// nullForNewRows drops c's NOT NULL and default where the column is ours
// and still has either; a column of that name the host owns stays as it is.
func (in *Installer) nullForNewRows(ctx context.Context, c NullForNewRows) error {
	owned, notNull, hasDefault, err := in.lookupColumn(ctx, c.Table, c.Name)
	if err != nil || !owned {
		return err
	}
	if !notNull && !hasDefault {
		return nil // done by an earlier run
	}
	stmt := fmt.Sprintf("alter table %s alter column %s drop not null, alter column %s drop default",
		ident(c.Table), ident(c.Name), ident(c.Name))
	return in.briefExec(ctx, stmt)
}

// RestoreDefaults sets back the defaults objs dropped (a down step) on the
// columns that are ours and have none.
func (in *Installer) RestoreDefaults(ctx context.Context, objs HostObjects) error {
	if _, err := in.conn.Exec(ctx, ownedObjectsSQL); err != nil {
		return fmt.Errorf("creating integration_outbox_owned_objects: %w", err)
	}
	for _, c := range objs.NullForNewRows {
		owned, _, hasDefault, err := in.lookupColumn(ctx, c.Table, c.Name)
		if err != nil {
			return err
		}
		if !owned || hasDefault {
			continue
		}
		stmt := fmt.Sprintf("alter table %s alter column %s set default %s", ident(c.Table), ident(c.Name), c.Default)
		if err := in.briefExec(ctx, stmt); err != nil {
			return fmt.Errorf("column %s.%s: %w", c.Table, c.Name, err)
		}
	}
	return nil
}

// transactionStart are the defaults ClockDefault replaces, as
// pg_get_expr prints them: each is the transaction's start.
var transactionStart = map[string]bool{"now()": true, "CURRENT_TIMESTAMP": true, "transaction_timestamp()": true}

// installClockDefault sets d's default to clock_timestamp() where it is the
// transaction's start, recording the default it replaces.
func (in *Installer) installClockDefault(ctx context.Context, version int64, d ClockDefault) error {
	def, replaced, err := in.lookupDefault(ctx, d.Table, d.Column)
	if err != nil {
		return err
	}
	if replaced != nil {
		return nil // ours already
	}
	if !transactionStart[def] {
		in.log.InfoContext(ctx, "leaving the host's default as it is: rows the host inserts in one transaction are ordered as it gives",
			"table", d.Table, "column", d.Column, "default", def)
		return nil
	}
	stmt := fmt.Sprintf("alter table %s alter column %s set default clock_timestamp()", ident(d.Table), ident(d.Column))
	return in.brief(ctx, stmt, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			insert into integration_outbox_owned_objects (migration, kind, table_name, object_name, replaced_default)
			values ($1, 'default', $2, $3, $4) on conflict (kind, table_name, object_name) do nothing`,
			version, d.Table, d.Column, def)
		return err
	})
}

// lookupDefault reads table.column's default as pg_get_expr prints it (""
// when it has none) and, where a ClockDefault of ours replaced it, the
// default it replaced (nil: not ours).
func (in *Installer) lookupDefault(ctx context.Context, table, column string) (current string, replaced *string, err error) {
	err = in.conn.QueryRow(ctx, `
		select coalesce((select pg_get_expr(ad.adbin, ad.adrelid) from pg_attribute a
		        join pg_attrdef ad on ad.adrelid = a.attrelid and ad.adnum = a.attnum
		        where a.attrelid = to_regclass($1) and a.attname = $2), ''),
		    (select coalesce(o.replaced_default, '') from integration_outbox_owned_objects o
		     where o.kind = 'default' and o.table_name = $1 and o.object_name = $2)`,
		table, column).Scan(&current, &replaced)
	if err != nil {
		return "", nil, fmt.Errorf("reading the catalog: %w", err)
	}
	return current, replaced, nil
}

// recordDefaults gives integration_outbox_owned_objects (ours) the shape
// that records a replaced default, where an earlier version created it
// without: the kind 'default' and the expression it replaced.
func (in *Installer) recordDefaults(ctx context.Context) error {
	var ready bool
	if err := in.conn.QueryRow(ctx, `
		select exists (select 1 from pg_attribute where attrelid = 'integration_outbox_owned_objects'::regclass
		               and attname = 'replaced_default' and not attisdropped)`).Scan(&ready); err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	if ready {
		return nil
	}
	return in.briefExec(ctx, `alter table integration_outbox_owned_objects
		add column if not exists replaced_default text,
		drop constraint if exists integration_outbox_owned_objects_kind_check`)
}

// lookupColumn reads whether table.name is a column recorded as ours, and
// whether it is NOT NULL and has a default.
func (in *Installer) lookupColumn(ctx context.Context, table, name string) (owned, notNull, hasDefault bool, err error) {
	err = in.conn.QueryRow(ctx, `
		select exists (select 1 from integration_outbox_owned_objects o
		               where o.kind = 'column' and o.table_name = $1 and o.object_name = $2),
		    coalesce(bool_or(a.attnotnull), false), coalesce(bool_or(a.atthasdef), false)
		from pg_attribute a
		where a.attrelid = to_regclass($1) and a.attname = $2 and a.attnum > 0 and not a.attisdropped`,
		table, name).Scan(&owned, &notNull, &hasDefault)
	if err != nil {
		return false, false, false, fmt.Errorf("reading the catalog: %w", err)
	}
	return owned, notNull, hasDefault, nil
}

func (in *Installer) installColumn(ctx context.Context, version int64, c Column) error {
	var have, want string
	var found bool
	err := in.conn.QueryRow(ctx, `
		select coalesce((select format_type(a.atttypid, a.atttypmod) from pg_attribute a
		        where a.attrelid = to_regclass($1) and a.attname = $2 and a.attnum > 0 and not a.attisdropped), ''),
		    format_type(to_regtype($3), null), to_regclass($1) is not null`,
		c.Table, c.Name, c.Type).Scan(&have, &want, &found)
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	if !found {
		return fmt.Errorf("the host table %s does not exist in the search_path schema", c.Table)
	}
	if have != "" {
		if have != want {
			return fmt.Errorf("the table already has a column %s of type %s, and the worker needs %s: "+
				"rename the existing column (alter table %s rename column %s to ...) or change its type to %s, then run make migrate again",
				c.Name, have, want, c.Table, c.Name, want)
		}
		return nil // ours from an earlier run, or the host's: either way it stays
	}
	stmt := fmt.Sprintf("alter table %s add column %s %s %s", ident(c.Table), ident(c.Name), c.Type, c.Extra)
	return in.brief(ctx, stmt, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
		return record(ctx, tx, version, "column", c.Table, c.Name)
	})
}

func (in *Installer) installConstraint(ctx context.Context, version int64, c Constraint) error {
	if c.Name == statusCheck {
		// An enum type already limits the values: the check would only
		// repeat it, and refuse a value the host adds to its type later.
		enum, err := in.statusIsEnum(ctx)
		if err != nil {
			return err
		}
		if enum {
			return nil
		}
	}
	var exists, valid, owned bool
	err := in.conn.QueryRow(ctx, `
		select count(k.oid) > 0, coalesce(bool_and(k.convalidated), false),
		    exists (select 1 from integration_outbox_owned_objects o
		            where o.kind = 'constraint' and o.table_name = $1 and o.object_name = $2)
		from pg_constraint k where k.conrelid = to_regclass($1) and k.conname = $2`,
		c.Table, c.Name).Scan(&exists, &valid, &owned)
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	if !exists {
		stmt := fmt.Sprintf("alter table %s add constraint %s %s not valid", ident(c.Table), ident(c.Name), c.Check)
		err := in.brief(ctx, stmt, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
			return record(ctx, tx, version, "constraint", c.Table, c.Name)
		})
		if err != nil {
			return err
		}
		owned, valid = true, false
	}
	if !owned || valid {
		return nil // the host's own constraint of that name, or ours already validated
	}
	// Validation scans the table under SHARE UPDATE EXCLUSIVE, which no
	// write conflicts with, so it may wait for its lock (behind an
	// autovacuum, which yields to it) without holding writes back.
	stmt := fmt.Sprintf("alter table %s validate constraint %s", ident(c.Table), ident(c.Name))
	if err := in.exec(ctx, 0, stmt); err != nil {
		if !isCheckViolation(err) {
			return fmt.Errorf("%s: %w", stmt, err)
		}
		// A row the check refuses (written since the preflight looked):
		// an unvalidated check would go on refusing the host's writes of
		// its status, so it goes, and the next run looks again.
		if c.Name != statusCheck {
			return fmt.Errorf("%s: %w", stmt, err)
		}
		if _, dropErr := in.dropUnvalidatedStatusCheck(context.WithoutCancel(ctx)); dropErr != nil {
			return fmt.Errorf("%s: %w (and %w)", stmt, err, dropErr)
		}
		return fmt.Errorf("%s: %w; the check was dropped again: run make migrate again to see which rows it refuses", stmt, err)
	}
	return nil
}

func isCheckViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514"
}

// existingIndex is what the catalog says of a relation with an index's name
// in its table's schema.
type existingIndex struct {
	onTable bool   // an index of the table (else another relation has the name)
	valid   bool   // indisvalid: false after an interrupted concurrent build
	def     string // pg_get_indexdef
	owned   bool   // recorded in integration_outbox_owned_objects
}

func (in *Installer) lookupIndex(ctx context.Context, ix Index) (*existingIndex, error) {
	var e existingIndex
	err := in.conn.QueryRow(ctx, `
		select coalesce(i.indrelid = to_regclass($1), false), coalesce(i.indisvalid, false),
		    coalesce(pg_get_indexdef(c.oid), ''),
		    exists (select 1 from integration_outbox_owned_objects o
		            where o.kind = 'index' and o.table_name = $1 and o.object_name = $2)
		from pg_class c left join pg_index i on i.indexrelid = c.oid
		where c.relname = $2
		  and c.relnamespace = (select relnamespace from pg_class where oid = to_regclass($1))`,
		ix.Table, ix.Name).Scan(&e.onTable, &e.valid, &e.def, &e.owned)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the catalog: %w", err)
	}
	return &e, nil
}

func (in *Installer) installIndex(ctx context.Context, version int64, ix Index) error {
	var found, mixed bool
	if err := in.conn.QueryRow(ctx, `
		select to_regclass($1) is not null,
		    count(distinct a.atttypid) filter (where a.attname in ('created_at', 'next_attempt_at')) > 1
		from (select 1) one
		left join pg_attribute a on a.attrelid = to_regclass($1) and a.attnum > 0 and not a.attisdropped`,
		ix.Table).Scan(&found, &mixed); err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	if !found {
		return fmt.Errorf("the host table %s does not exist in the search_path schema", ix.Table)
	}
	if mixed && ix.MixedTimestamps != "" {
		in.log.InfoContext(ctx, "created_at and next_attempt_at differ in type: the index takes its form for such a table",
			"index", ix.Name, "definition", ix.MixedTimestamps)
		ix.Definition = ix.MixedTimestamps
	}
	e, err := in.lookupIndex(ctx, ix)
	if err != nil {
		return err
	}
	if e != nil {
		if !e.onTable {
			return fmt.Errorf("another relation of that schema is named %s: rename it, then run make migrate again", ix.Name)
		}
		want, err := in.normalizedIndexDef(ctx, ix)
		if err != nil {
			return err
		}
		same := indexBody(e.def) == indexBody(want)
		switch {
		case same && e.valid:
			return nil // ours from an earlier run, or the host's: either way it stays
		case !e.owned && !same:
			return fmt.Errorf("the table already has an index %s that is not ours, defined as %q; the worker needs %q: "+
				"rename it (alter index %s rename to ...) or drop it (drop index concurrently %s), then run make migrate again",
				ix.Name, e.def, createIndexSQL(ix), ix.Name, ix.Name)
		case !e.owned:
			return fmt.Errorf("the table already has an index %s that is not ours and is INVALID (an interrupted build): "+
				"rebuild it (reindex index concurrently %s) or drop it (drop index concurrently %s), then run make migrate again",
				ix.Name, ix.Name, ix.Name)
		}
		// Ours, but INVALID (a build that was interrupted) or of an older
		// definition: drop it and build it again.
		in.log.InfoContext(ctx, "rebuilding an index of ours", "index", ix.Name, "valid", e.valid, "definition", e.def)
		if err := in.dropIndex(ctx, ix.Table, ix.Name); err != nil {
			return err
		}
	}
	// Recorded first, in its own transaction: an interrupted build leaves an
	// INVALID index that the next run knows to be ours and rebuilds.
	if err := pgx.BeginFunc(ctx, in.conn, func(tx pgx.Tx) error {
		return record(ctx, tx, version, "index", ix.Table, ix.Name)
	}); err != nil {
		return fmt.Errorf("recording: %w", err)
	}
	stmt := createIndexSQL(ix)
	in.log.DebugContext(ctx, "building an index", "index", ix.Name, "table", ix.Table)
	if err := in.exec(ctx, 0, stmt); err != nil {
		// A failed concurrent build leaves an INVALID index, which a unique
		// one still enforces on new rows: drop it now rather than leave it.
		if dropErr := in.dropIndex(context.WithoutCancel(ctx), ix.Table, ix.Name); dropErr != nil {
			in.log.WarnContext(ctx, "could not drop the index after its build failed: the next make migrate rebuilds it",
				"index", ix.Name, "error", dropErr.Error())
		}
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

// createIndexSQL is the statement that builds ix: always CONCURRENTLY.
func createIndexSQL(ix Index) string {
	unique := ""
	if ix.Unique {
		unique = "unique "
	}
	return fmt.Sprintf("create %sindex concurrently %s on %s %s", unique, ident(ix.Name), ident(ix.Table), ix.Definition)
}

// dropIndex drops the index name of table CONCURRENTLY, if it exists.
func (in *Installer) dropIndex(ctx context.Context, table, name string) error {
	var qualified string
	err := in.conn.QueryRow(ctx, `
		select i.indexrelid::regclass::text from pg_index i join pg_class c on c.oid = i.indexrelid
		where i.indrelid = to_regclass($1) and c.relname = $2`, table, name).Scan(&qualified)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	stmt := "drop index concurrently if exists " + qualified
	if err := in.exec(ctx, 0, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}

// normalizedIndexDef is pg_get_indexdef of ix built on an empty temporary
// copy of its table's columns: the form to compare an existing index with.
// It touches the host table only to read its columns (ACCESS SHARE).
func (in *Installer) normalizedIndexDef(ctx context.Context, ix Index) (string, error) {
	var def string
	err := pgx.BeginFunc(ctx, in.conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf(
			"create temporary table integration_outbox_index_probe (like %s) on commit drop", ident(ix.Table))); err != nil {
			return err
		}
		probe := ix
		probe.Table, probe.Name = "integration_outbox_index_probe", "integration_outbox_index_probe_idx"
		stmt := strings.Replace(createIndexSQL(probe), " concurrently", "", 1)
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `select pg_get_indexdef('pg_temp.integration_outbox_index_probe_idx'::regclass)`).Scan(&def); err != nil {
			return err
		}
		return errProbeDone // rolls the probe back
	})
	if err != nil && !errors.Is(err, errProbeDone) {
		return "", fmt.Errorf("normalizing the definition %q: %w", ix.Definition, err)
	}
	return def, nil
}

var errProbeDone = errors.New("probe done")

// indexBody is an index definition without its name and table: whether it
// is unique, and everything from USING on.
func indexBody(def string) string {
	unique := strings.HasPrefix(def, "CREATE UNIQUE INDEX")
	_, body, _ := strings.Cut(def, " USING ")
	return fmt.Sprintf("unique=%t %s", unique, body)
}

// DropOwned drops, newest first, what version recorded on the host's tables,
// and only that: indexes CONCURRENTLY, constraints and columns in short
// transactions under lock_timeout.
func (in *Installer) DropOwned(ctx context.Context, version int64) error {
	var exists bool
	if err := in.conn.QueryRow(ctx, `select to_regclass('integration_outbox_owned_objects') is not null`).Scan(&exists); err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	if !exists {
		return nil
	}
	rows, err := in.conn.Query(ctx, `
		select o.id, o.kind, o.table_name, o.object_name, to_regclass(o.table_name) is not null
		from integration_outbox_owned_objects o where o.migration = $1 order by o.id desc`, version)
	if err != nil {
		return fmt.Errorf("reading integration_outbox_owned_objects: %w", err)
	}
	type owned struct {
		id                int64
		kind, table, name string
		tableExists       bool
	}
	objs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (owned, error) {
		var o owned
		err := r.Scan(&o.id, &o.kind, &o.table, &o.name, &o.tableExists)
		return o, err
	})
	if err != nil {
		return fmt.Errorf("reading integration_outbox_owned_objects: %w", err)
	}
	for _, o := range objs {
		if o.tableExists {
			var err error
			switch o.kind {
			case "index":
				err = in.dropIndex(ctx, o.table, o.name)
			case "constraint":
				stmt := fmt.Sprintf("alter table %s drop constraint if exists %s", ident(o.table), ident(o.name))
				err = in.briefExec(ctx, stmt)
			case "default":
				err = in.restoreDefault(ctx, o.table, o.name)
			case "column":
				// A catalog change only: the column's data stays in the
				// rows until they are next written.
				stmt := fmt.Sprintf("alter table %s drop column if exists %s", ident(o.table), ident(o.name))
				err = in.briefExec(ctx, stmt)
			}
			if err != nil {
				return fmt.Errorf("migration %d: dropping %s %s of %s: %w", version, o.kind, o.name, o.table, err)
			}
		}
		if _, err := in.conn.Exec(ctx, `delete from integration_outbox_owned_objects where id = $1`, o.id); err != nil {
			return fmt.Errorf("migration %d: forgetting %s %s: %w", version, o.kind, o.name, err)
		}
	}
	return nil
}

// restoreDefault puts back the default a ClockDefault replaced, where the
// column's default is still ours.
func (in *Installer) restoreDefault(ctx context.Context, table, column string) error {
	current, replaced, err := in.lookupDefault(ctx, table, column)
	if err != nil {
		return err
	}
	if replaced == nil || current != "clock_timestamp()" || !transactionStart[*replaced] {
		return nil // the host changed it since: it stays the host's
	}
	return in.briefExec(ctx, fmt.Sprintf("alter table %s alter column %s set default %s", ident(table), ident(column), *replaced))
}

func record(ctx context.Context, tx pgx.Tx, version int64, kind, table, name string) error {
	_, err := tx.Exec(ctx, `
		insert into integration_outbox_owned_objects (migration, kind, table_name, object_name)
		values ($1, $2, $3, $4) on conflict (kind, table_name, object_name) do nothing`,
		version, kind, table, name)
	return err
}

// briefExec runs the one statement stmt as brief does.
func (in *Installer) briefExec(ctx context.Context, stmt string) error {
	return in.brief(ctx, stmt, func(tx pgx.Tx) error { _, err := tx.Exec(ctx, stmt); return err })
}

// brief runs fn in a transaction whose lock waits end after the lock
// timeout (SQLSTATE 55P03), and tries again with backoff while they do.
func (in *Installer) brief(ctx context.Context, what string, fn func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, in.conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = '%dms'", in.lockTimeout.Milliseconds())); err != nil {
				return err
			}
			return fn(tx)
		})
		if err == nil {
			return nil
		}
		if !isLockTimeout(err) || attempt >= in.maxAttempts {
			return fmt.Errorf("%s (attempt %d): %w", what, attempt, err)
		}
		wait := backoff(attempt)
		in.log.InfoContext(ctx, "lock not available, trying again", "statement", what, "attempt", attempt, "wait", wait.String())
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// exec runs one statement outside a transaction with the given lock_timeout
// (0: none; a concurrent build waits for older transactions, which holds
// back no write).
func (in *Installer) exec(ctx context.Context, lockTimeout time.Duration, stmt string) error {
	if _, err := in.conn.Exec(ctx, fmt.Sprintf("set lock_timeout = '%dms'", lockTimeout.Milliseconds())); err != nil {
		return err
	}
	_, err := in.conn.Exec(ctx, stmt)
	return err
}

// backoff is 50ms doubling per attempt, capped at 5s, with jitter.
func backoff(attempt int) time.Duration {
	d := 50 * time.Millisecond << min(attempt-1, 7)
	d = min(d, 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }
