package migrate

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/pgtx"
)

func pgxConfig(databaseURL string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing DATABASE_URL: %w", err)
	}
	pgtx.Configure(cfg) // our session settings (jit off), as the functions' pool
	return cfg, nil
}
