// Package migrations embeds the numbered goose migrations of the outbox schema.
package migrations

import "embed"

// FS holds the *.sql migrations, applied in order by internal/migrate.
//
//go:embed *.sql
var FS embed.FS
