package retention

import (
	"embed"

	"integration-outbox/internal/sqlfile"
)

// Every statement of retention lives in sql/, one file per statement, its
// documentation in the file's leading comment; their arguments are named
// (pgx.NamedArgs).
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// The statements, read once at package init.
var (
	deleteBatchSQL   = statement("delete_batch")
	batchTimeoutsSQL = statement("batch_timeouts")
)

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "retention", name) }

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "retention") }
