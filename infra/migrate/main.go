// Command migrate applies the outbox migrations to $DATABASE_URL (make migrate),
// after creating any of the host's tables the database lacks, without blocking
// the host's writes, and schedules the rows the old worker left in processing
// (docs/deploy.md, "Switching over from the old worker"). "migrate down" rolls
// back the most recent migration: only the objects it created, never a host
// table or a column the host had.
//
// After installing, it runs the schema check (internal/schemacheck): every
// statement the functions run is prepared and planned against the database
// it just installed, in a transaction it rolls back, and the run fails
// naming each statement PostgreSQL refuses, with PostgreSQL's error.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
	"integration-outbox/internal/schemacheck"
)

// check runs the schema check on the database at url and returns how many
// statements it prepared.
func check(ctx context.Context, url string) (int, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("schema check: connecting: %w", err)
	}
	defer conn.Close(ctx)
	r, err := schemacheck.Run(ctx, conn)
	if err != nil {
		return 0, fmt.Errorf("schema check: %w", err)
	}
	if err := r.Err(); err != nil {
		return 0, fmt.Errorf("%w (the install is complete; fix the host's tables or report the statement, then run make migrate or outboxctl check again)", err)
	}
	return r.Checked, nil
}

func main() {
	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintln(os.Stderr, "migrate: DATABASE_URL is required")
		os.Exit(2)
	}
	run := migrate.Up
	if len(os.Args) > 1 && os.Args[1] == "down" {
		run = migrate.Down
	}
	if err := run(ctx, url); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
	fmt.Println("migrate: schema is up to date")
	if len(os.Args) > 1 && os.Args[1] == "down" {
		return
	}
	n, err := check(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
	fmt.Printf("migrate: schema check: the host's tables and all %d statements of the functions prepare\n", n)
}
