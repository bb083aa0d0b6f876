// Package migrate applies the embedded migrations to the database (and
// search_path schema) a URL names, onto a live host database: no step blocks
// the host's writes to its tables for longer than a short lock timeout.
//
// Up first creates the stand-in of the host application's tables wherever they
// are missing (migrations.HostStandIn); nothing reverts it. Then, for each
// migration in order, the Installer adds what the migration declares on the
// host's tables (hostObjects: columns, constraints, indexes built
// concurrently) and drops the indexes of earlier migrations it replaces
// (HostObjects.Drops; a run that applies both never builds them), and goose applies the migration's SQL file (our own tables
// and functions) in its own transaction. Up checks the host objects of the
// migrations already applied too, so a run that was killed half way is
// completed by the next. Last, it recovers the rows the old worker left in
// processing (RecoverLeftovers).
//
// Down rolls back the most recent migration: the Installer builds again the
// indexes of earlier migrations it dropped, drops what it recorded on the
// host's tables, then goose runs the SQL down step. Down
// never drops a host table or a column the host had.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"integration-outbox/internal/routines"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/migrations"
)

// VersionTable is goose's bookkeeping table, named so it cannot clash with the
// host application's own goose_db_version.
const VersionTable = "integration_outbox_schema_version"

// Config tunes a run; the zero value is what make migrate uses.
type Config struct {
	Installer InstallerConfig
	// Log receives progress (default: slog.Default()).
	Log *slog.Logger
	// Tracer, when set, sees every statement of the host-object steps.
	Tracer pgx.QueryTracer
	// Version, when set, is the last migration UpWith applies (a benchmark
	// of an earlier schema); one already applied after it stays applied.
	Version int64
	// EnqueueSwitchWait bounds migration 25's wait for the calls of the
	// enqueue function's earlier body (default
	// migrations.DefaultEnqueueSwitchWait).
	EnqueueSwitchWait time.Duration
}

// Up creates the host tables that are missing, then applies every pending
// migration and completes the host objects of the applied ones.
func Up(ctx context.Context, databaseURL string) error {
	return UpWith(ctx, databaseURL, Config{})
}

// Down rolls back the most recent migration: it removes what that migration
// added, never a host table or its rows.
func Down(ctx context.Context, databaseURL string) error {
	return DownWith(ctx, databaseURL, Config{})
}

// UpWith is Up with cfg.
func UpWith(ctx context.Context, databaseURL string, cfg Config) error {
	return run(ctx, databaseURL, cfg, true, func(s session) error {
		ctx := migrations.WithOptions(ctx, migrations.Options{EnqueueSwitchWait: cfg.EnqueueSwitchWait, Log: s.log})
		current, err := s.provider.GetDBVersion(ctx)
		if err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		sources := s.provider.ListSources()
		target := sources[len(sources)-1].Version
		if cfg.Version > 0 {
			target = max(cfg.Version, current)
		}
		for _, src := range sources {
			if src.Version > target {
				break
			}
			if _, ok := hostObjects[src.Version]; ok {
				if err := s.installer.Install(ctx, src.Version, upTo(src.Version, target)); err != nil {
					return err
				}
			}
			if src.Version > current {
				if _, err := s.provider.ApplyVersion(ctx, src.Version, true); err != nil {
					return fmt.Errorf("applying migration %d: %w", src.Version, err)
				}
			}
		}
		latest := sources[len(sources)-1].Version
		if err := installRoutines(ctx, s, min(target, latest), latest); err != nil {
			return err
		}
		if err := redecideEnqueue(ctx, s, min(target, latest), latest); err != nil {
			return err
		}
		left, err := RecoverLeftovers(ctx, s.conn)
		if err != nil {
			return err
		}
		if left.Leased+left.FollowUps > 0 {
			s.log.InfoContext(ctx, "rows the old worker left in processing are scheduled",
				"leased", left.Leased, "followUps", left.FollowUps, "after", OldWorkerGrace.String())
		}
		return nil
	})
}

// RoutinesVersion is the migration from which make migrate installs the
// statements' routines of its build (migrations/00023).
const RoutinesVersion = 23

// installRoutines installs this build's routines (internal/sqlroutine)
// once the schema is at the build's last migration, latest (from
// RoutinesVersion on): at every run, since a build whose statements
// changed brings routines of new names with no migration. A run up to an
// earlier version installs none: the build's statements are written for
// its last schema, and may name a column a later migration adds.
func installRoutines(ctx context.Context, s session, version, latest int64) error {
	if version < RoutinesVersion || version < latest {
		return nil
	}
	n, err := sqlroutine.Install(ctx, s.conn, routines.All())
	if err != nil {
		return fmt.Errorf("installing the statements' routines: %w", err)
	}
	if n > 0 {
		s.log.InfoContext(ctx, "statement routines installed", "count", n)
	}
	return nil
}

// redecideEnqueue decides the enqueue function's probes again
// (migrations.RedecideEnqueue) once the schema is at the build's last
// migration, latest (from migrations.RedecideEnqueueVersion on): at every
// run, since retention deletes the rows a probe honours with no migration.
func redecideEnqueue(ctx context.Context, s session, version, latest int64) error {
	if version < migrations.RedecideEnqueueVersion || version < latest {
		return nil
	}
	applied, err := migrations.RedecideEnqueue(ctx, s.db)
	if err != nil {
		return fmt.Errorf("deciding the enqueue function's probes again: %w", err)
	}
	if applied {
		s.log.InfoContext(ctx, "integration_outbox_enqueue applied again: its probes of the key indexes follow the rows they honour")
	}
	return nil
}

// DownTo rolls back, one Down at a time, every migration after version.
func DownTo(ctx context.Context, databaseURL string, version int64) error {
	for {
		current, err := CurrentVersion(ctx, databaseURL)
		if err != nil {
			return err
		}
		if current <= version {
			return nil
		}
		if err := Down(ctx, databaseURL); err != nil {
			return err
		}
	}
}

// CurrentVersion is the most recent migration applied (0: none).
func CurrentVersion(ctx context.Context, databaseURL string) (int64, error) {
	var v int64
	err := withProvider(ctx, databaseURL, func(p *goose.Provider) error {
		var err error
		v, err = p.GetDBVersion(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	return v, nil
}

// DownWith is Down with cfg.
func DownWith(ctx context.Context, databaseURL string, cfg Config) error {
	return run(ctx, databaseURL, cfg, false, func(s session) error {
		current, err := s.provider.GetDBVersion(ctx)
		if err != nil {
			return fmt.Errorf("reading the schema version: %w", err)
		}
		objs := hostObjects[current]
		if len(objs.Drops) > 0 {
			if err := s.installer.Restore(ctx, objs); err != nil {
				return fmt.Errorf("migration %d: %w", current, err)
			}
		}
		if len(objs.NullForNewRows) > 0 {
			if err := s.installer.RestoreDefaults(ctx, objs); err != nil {
				return fmt.Errorf("migration %d: %w", current, err)
			}
		}
		if current > 0 {
			if err := s.installer.DropOwned(ctx, current); err != nil {
				return err
			}
		}
		if _, err := s.provider.Down(ctx); err != nil {
			return fmt.Errorf("rolling back migration %d: %w", current, err)
		}
		return nil
	})
}

// session is what one run works with: goose for the SQL files, and one
// connection of its own for the host-object steps.
type session struct {
	provider  *goose.Provider
	db        *sql.DB // the migrations' (the goose provider's)
	conn      *pgx.Conn
	installer *Installer
	log       *slog.Logger
}

// runLockKey ("io_migra" in ASCII) makes concurrent runs wait for each other.
const runLockKey = 0x696f5f6d69677261

// runLockPoll is how often a run waiting for another one tries the lock.
const runLockPoll = 250 * time.Millisecond

// waitForRunLock takes the run lock (held by conn's session until it
// closes), waiting for another run to end. It never waits inside a
// statement: a backend blocked in pg_advisory_lock holds a snapshot, which
// the other run's CREATE INDEX CONCURRENTLY waits for in turn (a deadlock
// PostgreSQL ends by failing one of them). Each try is a statement of its
// own that ends at once, and the wait between tries holds nothing.
func waitForRunLock(ctx context.Context, conn *pgx.Conn, log *slog.Logger) error {
	for logged := false; ; {
		var got bool
		if err := conn.QueryRow(ctx, "select pg_try_advisory_lock($1)", int64(runLockKey)).Scan(&got); err != nil {
			return fmt.Errorf("taking the migration run lock: %w", err)
		}
		if got {
			return nil
		}
		if !logged {
			log.InfoContext(ctx, "another make migrate is running on this database: waiting for it to end")
			logged = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for another migration run: %w", ctx.Err())
		case <-time.After(runLockPoll):
		}
	}
}

func run(ctx context.Context, databaseURL string, cfg Config, up bool, fn func(session) error) error {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	connCfg, err := pgxConfig(databaseURL)
	if err != nil {
		return err
	}
	if err := checkDirect(ctx, connCfg); err != nil {
		return err
	}
	db := stdlib.OpenDB(*connCfg, stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, sessionSetupSQL)
		return err
	}))
	defer db.Close()
	stepsCfg := connCfg.Copy()
	stepsCfg.Tracer = cfg.Tracer
	conn, err := pgx.ConnectConfig(ctx, stepsCfg)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// A killed migrator's backend notices it is gone within a second (from
	// PostgreSQL 14), instead of finishing a concurrent index build alone.
	if _, err := conn.Exec(ctx, sessionSetupSQL); err != nil {
		return fmt.Errorf("configuring the session: %w", err)
	}
	if _, err := conn.Exec(ctx, `select set_config('client_connection_check_interval', '1s', false)
		where current_setting('server_version_num')::int >= 140000`); err != nil {
		return fmt.Errorf("configuring the session: %w", err)
	}
	if err := waitForRunLock(ctx, conn, log); err != nil {
		return err
	}
	installer := NewInstaller(conn, log, cfg.Installer)
	if up {
		if err := installer.preflight(ctx); err != nil {
			return fmt.Errorf("before migrating: %w", err)
		}
		if err := installer.addEnumValues(ctx); err != nil {
			return err
		}
		if err := createHostStandIn(ctx, db); err != nil {
			return err
		}
	}
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	s := session{provider: p, db: db, conn: conn, installer: installer, log: log}
	if err := fn(s); err != nil {
		return fmt.Errorf("applying migrations: %w", err)
	}
	log.DebugContext(ctx, "migrations applied")
	return nil
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("creating migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithTableName(VersionTable), goose.WithSessionLocker(locker), goose.WithGoMigrations(migrations.Go...),
		goose.WithDisableGlobalRegistry(true), goose.WithLogger(goose.NopLogger()))
	if err != nil {
		return nil, fmt.Errorf("loading migrations: %w", err)
	}
	return p, nil
}

func withProvider(ctx context.Context, databaseURL string, fn func(*goose.Provider) error) error {
	cfg, err := pgxConfig(databaseURL)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	return fn(p)
}

// standInLockKey ("io_stand" in ASCII) serialises concurrent stand-in runs, so
// two migrators never race on the same create table if not exists.
const standInLockKey = 0x696f5f7374616e64

// createHostStandIn creates, in one transaction, each host table the database
// lacks; existing host tables are left as they are.
func createHostStandIn(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("creating host schema stand-in: %w", err)
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, "select pg_advisory_xact_lock($1)", int64(standInLockKey)); err != nil {
		return fmt.Errorf("locking host schema stand-in: %w", err)
	}
	if _, err := tx.ExecContext(ctx, migrations.HostStandIn); err != nil {
		return fmt.Errorf("creating host schema stand-in: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("creating host schema stand-in: %w", err)
	}
	return nil
}
