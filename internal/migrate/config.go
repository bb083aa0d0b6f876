package migrate

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/pgtx"
)

func pgxConfig(databaseURL string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing DATABASE_URL: %w", err)
	}
	return cfg, nil
}

// sessionSetupSQL is the first statement of every connection of make
// migrate, which holds a session (its run lock, its settings: it runs on a
// direct or session-pooled connection only, checkDirect): jit off, so that
// none of its statements pays for JIT compilation on a large host table. A
// session setting rather than a startup parameter, which PgBouncer refuses
// even in session mode unless told to ignore it.
const sessionSetupSQL = `select set_config('jit', 'off', false)`

// checkDirect refuses a transaction pooler: make migrate's run lock is a
// session's advisory lock and its concurrent index builds span statements,
// neither of which a pooler that changes server connection between
// transactions keeps.
func checkDirect(ctx context.Context, cfg *pgx.ConnConfig) error {
	plain := cfg.Copy()
	plain.Tracer = nil
	pooled, err := pgtx.TransactionPooled(ctx, plain)
	if err != nil {
		return fmt.Errorf("checking the connection: %w", err)
	}
	if pooled {
		return errors.New("DATABASE_URL reaches PostgreSQL through a transaction pooler (PgBouncer in transaction mode, RDS Proxy): " +
			"make migrate needs a direct or session-pooled connection, since it holds a session lock and builds indexes concurrently. " +
			"Run it with DATABASE_URL naming the database server itself (or the pooler's session mode); the functions work through the pooler. Nothing was changed")
	}
	return nil
}
