// Package retention deletes old terminal outbox rows: completed and
// unsupported rows whose completed_at is older than RETENTION_AGE, with
// their attempt history, in bounded batches. Rows in any other state,
// conflicts and rerun audits are never deleted. functions/retention runs it
// on its own schedule, apart from dispatch. Its SQL lives in sql/.
package retention

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/logging"
	"integration-outbox/internal/metrics"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/strictjson"
)

// MinAge is the shortest RETENTION_AGE accepted: a younger completed row
// may still be wanted by an operator looking into an incident.
const MinAge = time.Hour

// Config configures a Sweeper.
type Config struct {
	// Age is RETENTION_AGE; zero switches retention off.
	Age time.Duration
	// BatchSize is the most rows one statement deletes (default 1000).
	BatchSize int
	// MaxBatches is the most batches one run deletes (default 20); the next
	// scheduled run goes on.
	MaxBatches int
	// LockTimeout and StatementTimeout bound each batch (default 1s, 30s).
	LockTimeout      time.Duration
	StatementTimeout time.Duration
	Logger           *slog.Logger
	// Metrics receives the RetentionDeleted count (nil: none).
	Metrics *metrics.Emitter
}

// Sweeper runs retention.
type Sweeper struct {
	db       pgtx.Beginner
	cfg      Config
	routines *sqlroutine.Catalog
}

// New returns a sweeper.
func New(db pgtx.Beginner, cfg Config) (*Sweeper, error) {
	if cfg.Age != 0 && cfg.Age < MinAge {
		return nil, fmt.Errorf("retention: age %s is below the minimum %s", cfg.Age, MinAge)
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 1000)
	cfg.MaxBatches = cmp.Or(cfg.MaxBatches, 20)
	cfg.LockTimeout = cmp.Or(cfg.LockTimeout, time.Second)
	cfg.StatementTimeout = cmp.Or(cfg.StatementTimeout, 30*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Sweeper{db: db, cfg: cfg, routines: sqlroutine.NewCatalog(Routines()...)}, nil
}

// Result is what one run did.
type Result struct {
	// Enabled is false when RETENTION_AGE is not set: nothing is deleted.
	Enabled bool `json:"enabled"`
	Deleted int  `json:"deleted"`
	Batches int  `json:"batches"`
	// More is set when the run's last batch was full (it stopped at
	// MaxBatches or before the invocation's deadline): the next run goes on.
	More bool `json:"more"`
}

// request is the scheduled event's input: an empty object.
type request struct{}

// Handle runs one retention pass for the scheduled (or console) event {}.
func (s *Sweeper) Handle(ctx context.Context, raw json.RawMessage) (Result, error) {
	if len(raw) > 0 && string(raw) != "null" {
		if err := strictjson.Decode(raw, &request{}); err != nil {
			return Result{}, fmt.Errorf("retention payload: %w", err)
		}
	}
	return s.Run(ctx)
}

// Run deletes expired terminal rows, batch by batch, until a batch comes
// back short, MaxBatches is reached or ctx ends. Each batch commits on its
// own, so a run cut short keeps what it did.
func (s *Sweeper) Run(ctx context.Context) (Result, error) {
	log := logging.ForRequest(ctx, s.cfg.Logger)
	res := Result{Enabled: s.cfg.Age > 0}
	if !res.Enabled {
		log.DebugContext(ctx, "retention is off (RETENTION_AGE not set)")
		return res, nil
	}
	var err error
	for res.Batches < s.cfg.MaxBatches && s.timeForABatch(ctx) {
		var n int
		if n, err = s.batch(ctx); err != nil {
			break
		}
		res.Batches++
		res.Deleted += n
		// A full batch may have left rows behind; a short one did not.
		if res.More = n == s.cfg.BatchSize; !res.More {
			break
		}
	}
	if mErr := s.cfg.Metrics.Emit("", metrics.Value{Name: "RetentionDeleted", Unit: metrics.Count,
		Values: []float64{float64(res.Deleted)}}); mErr != nil {
		log.WarnContext(ctx, "could not write the retention metric", "error", mErr.Error())
	}
	if err != nil {
		log.ErrorContext(ctx, "retention stopped", "deleted", res.Deleted, "batches", res.Batches, "error", err.Error())
		return res, err
	}
	log.InfoContext(ctx, "retention done", "deleted", res.Deleted, "batches", res.Batches, "more", res.More,
		"retentionAge", s.cfg.Age.String())
	return res, nil
}

// timeForABatch tells whether a whole batch (up to StatementTimeout) still
// fits before the invocation's deadline: a run stops between batches rather
// than being cut off inside one.
func (s *Sweeper) timeForABatch(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) > s.cfg.StatementTimeout+time.Second
}

// batch deletes one batch in its own short transaction.
func (s *Sweeper) batch(ctx context.Context) (n int, err error) {
	err = pgtx.Do(ctx, s.db, pgx.TxOptions{}, func(tx pgx.Tx) error {
		rows, err := s.routines.Query(ctx, tx, batchTimeouts, pgx.NamedArgs{
			"lock_timeout": millis(s.cfg.LockTimeout), "statement_timeout": millis(s.cfg.StatementTimeout),
		})
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if err != nil {
			return fmt.Errorf("setting the batch's timeouts: %w", err)
		}
		if err := tx.QueryRow(ctx, deleteBatchSQL, pgx.NamedArgs{
			"age_seconds": s.cfg.Age.Seconds(), "batch_size": s.cfg.BatchSize,
		}).Scan(&n); err != nil {
			return fmt.Errorf("deleting a batch: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("retention: %w", err)
	}
	return n, nil
}

func millis(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
