package purchaseorder

import (
	"embed"

	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
)

// Every statement of the command lives in sql/, one file per statement, its
// documentation in the file's leading comment; their arguments are named
// (pgx.NamedArgs).
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// The statements, read once at package init.
// Both run through their routines (internal/sqlroutine): the load is one
// of the three statements of every push batch, and sent unnamed it would
// be planned at every batch.
var (
	load           = sqlroutine.New("purchaseorder/load", statement("load"), sqlroutine.Setting{Name: "jit", Value: "off"})
	supplierLookUp = sqlroutine.New("purchaseorder/suppliers", statement("suppliers"), sqlroutine.Setting{Name: "jit", Value: "off"})
	loadSQL        = load.SQL
)

// Routines are the package's statements that make migrate installs as
// routines.
func Routines() []*sqlroutine.Statement { return []*sqlroutine.Statement{load, supplierLookUp} }

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "purchaseorder", name) }

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "purchaseorder") }
