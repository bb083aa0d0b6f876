package purchaseorder

import (
	"embed"

	"integration-outbox/internal/sqlfile"
)

// Every statement of the command lives in sql/, one file per statement, its
// documentation in the file's leading comment; their arguments are named
// (pgx.NamedArgs).
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// The statements, read once at package init.
var (
	loadSQL      = statement("load")
	suppliersSQL = statement("suppliers")
)

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "purchaseorder", name) }

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "purchaseorder") }
