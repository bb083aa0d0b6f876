package migrate

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

func pgxConfig(databaseURL string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing DATABASE_URL: %w", err)
	}
	return cfg, nil
}
