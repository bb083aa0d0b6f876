package retention

import (
	"embed"

	"integration-outbox/internal/sqlfile"
	"integration-outbox/internal/sqlroutine"
)

// Every statement of retention lives in sql/, one file per statement, its
// documentation in the file's leading comment; their arguments are named
// (pgx.NamedArgs).
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// The statements, read once at package init.
var (
	deleteBatchSQL = statement("delete_batch")
	// batchTimeouts runs through its routine (internal/sqlroutine): a
	// set_config sent plain is a setting change that an RDS Proxy pins the
	// client's session for, though it lasts only the transaction; inside a
	// function it is the same transaction-local setting, which the proxy
	// does not see.
	batchTimeouts = sqlroutine.New("retention/batch_timeouts", statement("batch_timeouts"))
)

// Routines are the package's statements that make migrate installs as
// routines.
func Routines() []*sqlroutine.Statement { return []*sqlroutine.Statement{batchTimeouts} }

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "retention", name) }

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "retention") }
