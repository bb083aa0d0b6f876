package migrate_test

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
)

// statementLog records each statement the host-object steps send, with the
// connection's transaction status when it was sent ('I': outside a
// transaction).
type statementLog struct {
	mu    sync.Mutex
	stmts []sentStatement
}

type sentStatement struct {
	sql      string
	txStatus byte
}

func (l *statementLog) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stmts = append(l.stmts, sentStatement{sql: strings.ToLower(strings.Join(strings.Fields(data.SQL), " ")),
		txStatus: conn.PgConn().TxStatus()})
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

var (
	createIndex     = regexp.MustCompile(`^create (unique )?index `)
	createIndexConc = regexp.MustCompile(`^create (unique )?index concurrently `)
	dropIndex       = regexp.MustCompile(`^drop index `)
	alterStmt       = regexp.MustCompile(`^alter table `)
)

// Every index the install creates on a host table, and every one a down
// step drops, is built or dropped CONCURRENTLY outside any transaction
// (squawk, over migrations/*.sql, cannot see these statements); every ALTER
// of a host table but a constraint's validation runs in a transaction that
// set a lock_timeout first.
func TestHostIndexesAreBuiltAndDroppedConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, conn := freshDB(t)
	if _, err := conn.Exec(ctx, seedOutboxTable("external_integration_outbox")); err != nil {
		t.Fatal(err)
	}
	log := &statementLog{}
	cfg := migrate.Config{Tracer: log}
	if err := migrate.UpWith(ctx, url, cfg); err != nil {
		t.Fatal(err)
	}
	for {
		v, err := migrate.CurrentVersion(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if v == 0 {
			break
		}
		if err := migrate.DownWith(ctx, url, cfg); err != nil {
			t.Fatal(err)
		}
	}
	// An install at 7 upgraded: migration 8 drops migration 1's indexes.
	if err := migrate.UpWith(ctx, url, migrate.Config{Tracer: log, Version: 7}); err != nil {
		t.Fatal(err)
	}
	upgrade := len(log.stmts)
	if err := migrate.UpWith(ctx, url, cfg); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"external_integration_outbox_claimable_idx", "external_integration_outbox_leased_idx",
		"external_integration_outbox_org_status_idx"} {
		seen := false
		for _, s := range log.stmts[upgrade:] {
			seen = seen || (dropIndex.MatchString(s.sql) && strings.HasSuffix(s.sql, name))
		}
		if !seen {
			t.Errorf("the upgrade to 8 never dropped %s", name)
		}
	}
	var creates, drops, alters int
	lockTimeoutSet := false
	for _, s := range log.stmts {
		switch {
		case strings.HasPrefix(s.sql, "set local lock_timeout"):
			lockTimeoutSet = true
			continue
		case createIndex.MatchString(s.sql) && !strings.Contains(s.sql, "integration_outbox_index_probe"):
			creates++
			if !createIndexConc.MatchString(s.sql) {
				t.Errorf("index built without concurrently: %s", s.sql)
			}
			if s.txStatus != 'I' {
				t.Errorf("index built inside a transaction (status %c): %s", s.txStatus, s.sql)
			}
		case dropIndex.MatchString(s.sql):
			drops++
			if !strings.HasPrefix(s.sql, "drop index concurrently") || s.txStatus != 'I' {
				t.Errorf("index dropped without concurrently or inside a transaction (status %c): %s", s.txStatus, s.sql)
			}
		case alterStmt.MatchString(s.sql) && !strings.Contains(s.sql, " validate constraint "):
			// (validating takes SHARE UPDATE EXCLUSIVE, which no write waits for)
			alters++
			if s.txStatus != 'T' || !lockTimeoutSet {
				t.Errorf("alter without a lock_timeout in its transaction (status %c): %s", s.txStatus, s.sql)
			}
		}
		if s.txStatus == 'I' {
			lockTimeoutSet = false
		}
	}
	if creates < 23 || drops < 15 || alters < 20 {
		t.Errorf("saw %d index builds, %d index drops and %d alters: the install and its rollback do more", creates, drops, alters)
	}
}
