package rerun

import (
	"embed"

	"integration-outbox/internal/sqlfile"
)

// Every statement of the rerun aggregate lives in sql/, one file per
// statement, its documentation in the file's leading comment: selecting the
// candidate rows, requeueing them, resolving their open conflicts and
// writing the audit row. Each is scoped by organization_id, so another
// organization's rows are invisible: they come out exactly like ids that do
// not exist. Their arguments are named (pgx.NamedArgs).
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// The statements, read once at package init. A dry run reads the candidates
// in a read-only transaction, where a locking read is refused; a rerun reads
// them with the lock_by_ statements, the same reads for update.
var (
	selectByIDsSQL      = statement("select_by_ids")
	lockByIDsSQL        = statement("lock_by_ids")
	selectByFilterSQL   = statement("select_by_filter")
	lockByFilterSQL     = statement("lock_by_filter")
	requeueSQL          = statement("requeue")
	resolveConflictsSQL = statement("resolve_conflicts")
	insertAuditSQL      = statement("insert_audit")
)

// statement is sql/<name>.sql without its leading comment.
func statement(name string) string { return sqlfile.Statement(sqlFiles, "rerun", name) }

// Statements are every statement of the package, for the schema check
// (internal/schemacheck).
func Statements() []sqlfile.Named { return sqlfile.All(sqlFiles, "rerun") }
