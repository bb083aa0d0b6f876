package migrate_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
)

// jitTracer records, for every connection a statement of the install runs
// on, its first statement and its startup parameters.
type jitTracer struct {
	mu     sync.Mutex
	first  map[*pgx.Conn]string
	params int
}

func (j *jitTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.first[conn]; !ok {
		j.first[conn] = data.SQL
	}
	j.params += len(conn.Config().RuntimeParams)
	return ctx
}

func (j *jitTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestMigrateConnectsWithoutJIT: the installer's connection switches jit off
// for its session before anything else, so none of its statements pays for
// JIT compilation on a large host table; it sends no startup parameter
// (PgBouncer refuses one it does not know, even in session mode).
func TestMigrateConnectsWithoutJIT(t *testing.T) {
	t.Parallel()
	url, _ := freshDB(t)
	tr := &jitTracer{first: map[*pgx.Conn]string{}}
	if err := migrate.UpWith(context.Background(), url, migrate.Config{Tracer: tr}); err != nil {
		t.Fatal(err)
	}
	if len(tr.first) == 0 || tr.params != 0 {
		t.Fatalf("traced %d connections, %d startup parameters; want some, and none", len(tr.first), tr.params)
	}
	for _, sql := range tr.first {
		if !strings.Contains(sql, "set_config('jit', 'off', false)") {
			t.Errorf("a connection's first statement is %q, not the one that switches jit off", sql)
		}
	}
}
