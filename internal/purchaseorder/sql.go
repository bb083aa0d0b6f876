package purchaseorder

import (
	"embed"

	posql "integration-outbox/internal/purchaseorder/sql"
	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
)

// Every statement of the command lives in sql/, one file per statement, its
// documentation in the file's leading comment; their arguments are named
// (pgx.NamedArgs).
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// The statements, both run through their routines (declared in
// internal/purchaseorder/sql, package posql).
var (
	load           = posql.Load
	supplierLookUp = posql.SupplierLookUp
	loadSQL        = load.SQL
)

// Routines are the package's statements that make migrate installs as
// routines.
func Routines() []*sqlroutine.Statement { return posql.Routines() }

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "purchaseorder") }
