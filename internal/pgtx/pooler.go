package pgtx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// TransactionPooled reports whether cfg's connections reach PostgreSQL
// through a transaction pooler (PgBouncer in transaction or statement mode,
// RDS Proxy): whether two clients share a server connection. Client a runs
// a statement, client b then holds a transaction open, and a runs another:
// a direct or session-pooled connection keeps its own server backend
// throughout, while a transaction pooler gives b the backend a just
// released, or a another one. It opens two connections and closes them.
func TransactionPooled(ctx context.Context, cfg *pgx.ConnConfig) (bool, error) {
	a, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("connecting: %w", err)
	}
	defer a.Close(context.WithoutCancel(ctx))
	b, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("connecting a second time: %w", err)
	}
	defer b.Close(context.WithoutCancel(ctx))
	const pidSQL = "select pg_backend_pid()"
	var first, held, second int32
	if err := a.QueryRow(ctx, pidSQL, pgx.QueryExecModeSimpleProtocol).Scan(&first); err != nil {
		return false, fmt.Errorf("reading the server backend: %w", err)
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("opening a transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := tx.QueryRow(ctx, pidSQL, pgx.QueryExecModeSimpleProtocol).Scan(&held); err != nil {
		return false, fmt.Errorf("reading the server backend: %w", err)
	}
	if err := a.QueryRow(ctx, pidSQL, pgx.QueryExecModeSimpleProtocol).Scan(&second); err != nil {
		return false, fmt.Errorf("reading the server backend: %w", err)
	}
	return first != second || held == first, nil
}
