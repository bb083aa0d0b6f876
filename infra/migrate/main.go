// Command migrate applies the outbox migrations to $DATABASE_URL (make migrate),
// after creating any of the host's tables the database lacks, without blocking
// the host's writes, and schedules the rows the old worker left in processing
// (docs/deploy.md, "Switching over from the old worker"). "migrate down" rolls
// back the most recent migration: only the objects it created, never a host
// table or a column the host had.
package main

import (
	"context"
	"fmt"
	"os"

	"integration-outbox/internal/migrate"
)

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
}
