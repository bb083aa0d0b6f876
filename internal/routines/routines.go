// Package routines lists every statement the functions run through a
// routine (internal/sqlroutine), from the packages that own them: what make
// migrate installs and outboxctl check checks. It imports only those
// packages, so that internal/migrate, which the tests of every package reach
// through internal/testenv, depends on no other.
package routines

import (
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/retention"
	"integration-outbox/internal/sqlroutine"
)

// All are the statements with a routine, by package.
func All() []*sqlroutine.Statement {
	return append(outbox.Routines(), retention.Routines()...)
}
