// Package routines lists every statement the functions run through a
// routine (internal/sqlroutine), from the packages that own them: what make
// migrate installs and outboxctl check checks. It imports only those
// packages, so that internal/migrate, which the tests of every package reach
// through internal/testenv, depends on no other.
package routines

import (
	"slices"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/retention"
	"integration-outbox/internal/sqlroutine"
	"integration-outbox/internal/supplier"
)

// All are the statements with a routine, by package.
func All() []*sqlroutine.Statement {
	return slices.Concat(outbox.Routines(), purchaseorder.Routines(), supplier.Routines(), retention.Routines())
}
