package migrate_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"integration-outbox/internal/migrate"
)

// jitTracer records the jit runtime parameter of every connection a
// statement of the install runs on.
type jitTracer struct {
	mu   sync.Mutex
	seen map[string]int
}

func (j *jitTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seen[conn.Config().RuntimeParams["jit"]]++
	return ctx
}

func (j *jitTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestMigrateConnectsWithoutJIT: the installer's connection asks for jit
// off in its startup message, as the functions' pool does, so none of its
// statements pays for JIT compilation on a large host table.
func TestMigrateConnectsWithoutJIT(t *testing.T) {
	t.Parallel()
	url, _ := freshDB(t)
	tr := &jitTracer{seen: map[string]int{}}
	if err := migrate.UpWith(context.Background(), url, migrate.Config{Tracer: tr}); err != nil {
		t.Fatal(err)
	}
	if len(tr.seen) != 1 || tr.seen["off"] == 0 {
		t.Fatalf("statements by the connections' jit parameter: %v, want every one off", tr.seen)
	}
}
