package push_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

// One table of keys, run through the worker's rule and through
// integration_outbox_enqueue: the function enqueues exactly the keys the
// worker can send, and refuses every other one with SQLSTATE 22023 naming
// idempotency_key.
func TestEnqueueKeyRuleIsTheWorkers(t *testing.T) {
	t.Parallel()
	f := pg.NewDB(t)
	org := f.NewID(t)
	conn := f.Connection(t, testenv.ConnectionOpts{OrganizationID: org, Provider: "webhook"})
	po := f.PurchaseOrder(t, org, "", 1)
	keys := map[string]string{
		"plain":                    "po-2026-0001",
		"empty":                    "",
		"blank":                    " ",
		"leading space":            " po-1",
		"trailing space":           "po-1 ",
		"leading tab":              "\tpo-1",
		"trailing tab":             "po-1\t",
		"inner space":              "po 1",
		"inner tab":                "po\t1",
		"inner vertical tab":       "po\v1",
		"inner form feed":          "po\f1",
		"trailing newline":         "po-1\n",
		"CRLF header injection":    "po-1\r\nX-Injected: 1",
		"bell":                     "po\a1",
		"unit separator":           "po\x1f1",
		"DEL":                      "po\x7f1",
		"255 ASCII bytes":          strings.Repeat("k", 255),
		"256 ASCII bytes":          strings.Repeat("k", 256),
		"255 bytes of UTF-8":       strings.Repeat("é", 127) + "k",
		"256 bytes of UTF-8":       strings.Repeat("é", 128),
		"128 characters, 3 bytes":  strings.Repeat("€", 85),
		"non-ASCII text":           "commande-été-№1",
		"C1 control (UTF-8 bytes)": "po\u00851",
		"no-break space edge":      "\u00a0po-1\u00a0",
	}
	// The white space docs/producers.md says the rule accepts (true) and
	// refuses (false).
	documented := map[string]bool{
		"inner space": true, "inner tab": true, "no-break space edge": true,
		"blank": false, "leading space": false, "trailing space": false, "leading tab": false, "trailing tab": false,
		"inner vertical tab": false, "inner form feed": false, "trailing newline": false,
	}
	ctx := context.Background()
	refused := 0
	for name, key := range keys {
		goErr := push.CheckIdempotencyKey(key)
		if want, ok := documented[name]; ok && (goErr == nil) != want {
			t.Errorf("%s: the worker accepts %q: %v, the producers' guide says %v", name, key, goErr == nil, want)
		}
		var id string
		sqlErr := f.Pool.QueryRow(ctx, `select integration_outbox_enqueue($1, $2, 'push_purchase_order',
			'purchase_order', $3, '{}'::jsonb, $4)::text`, org, conn, po, key).Scan(&id)
		if goErr == nil {
			if sqlErr != nil {
				t.Errorf("%s: the worker sends %q, the enqueue function refuses it: %v", name, key, sqlErr)
			}
			continue
		}
		refused++
		var pgErr *pgconn.PgError
		if !errors.As(sqlErr, &pgErr) {
			t.Errorf("%s: the worker refuses %q (%v), the enqueue function answered %v", name, key, goErr, sqlErr)
			continue
		}
		if pgErr.Code != "22023" || pgErr.ColumnName != "idempotency_key" || !strings.Contains(pgErr.Message, "idempotency_key") {
			t.Errorf("%s: refused with %s %q (column %q), want 22023 naming idempotency_key",
				name, pgErr.Code, pgErr.Message, pgErr.ColumnName)
		}
	}
	if refused == 0 || refused == len(keys) {
		t.Errorf("the table has %d refused keys of %d: it must hold both kinds", refused, len(keys))
	}
	if n := f.Count(t, `select count(*) from external_integration_outbox`); n != len(keys)-refused {
		t.Errorf("%d rows enqueued, want the %d keys the worker accepts", n, len(keys)-refused)
	}
}
