// Package routines lists every statement the functions run through a
// routine (internal/sqlroutine), from the packages that own them: what make
// migrate installs and outboxctl check checks. It imports only those
// packages, so that internal/migrate, which the tests of every package reach
// through internal/testenv, depends on no other.
package routines

import (
	"slices"

	"integration-outbox/internal/outbox"
	posql "integration-outbox/internal/purchaseorder/sql"
	"integration-outbox/internal/retention"
	"integration-outbox/internal/sqlroutine"
	suppliersql "integration-outbox/internal/supplier/sql"
)

// All are the statements with a routine, by package.
func All() []*sqlroutine.Statement {
	return slices.Concat(outbox.Routines(), posql.Routines(), suppliersql.Routines(), retention.Routines())
}
