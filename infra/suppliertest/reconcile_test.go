package suppliertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"integration-outbox/internal/push"
)

// A create whose answer is lost after Xero made the purchase order, tried
// again once Xero has forgotten the Idempotency-Key: the whole pipeline
// (dispatch, push, record, rerun) against the Xero stand-in, its replay
// window an hour and its clock moved by the test. The database's clock
// cannot move, so the test ages the row's attempt history by as much.

// clocked is a stack whose Xero stand-in runs skew ahead of the wall
// clock and answers through hook, when one is set.
type clocked struct {
	*stack
	skew atomic.Int64
	hook atomic.Pointer[func(*http.Request) (int, http.Header, string)]
}

func newClocked(t *testing.T) *clocked {
	t.Helper()
	c := &clocked{stack: newStack(t, standIn())}
	c.xero.ReplayWindow = time.Hour
	c.xero.Now = func() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }
	c.xero.Before = func(req *http.Request) (int, http.Header, string) {
		if h := c.hook.Load(); h != nil {
			return (*h)(req)
		}
		return 0, nil, ""
	}
	return c
}

// answer makes the stand-in answer the requests f picks (a non-zero
// status) itself; nil goes back to serving them.
func (c *clocked) answer(f func(*http.Request) (int, http.Header, string)) {
	if f == nil {
		c.hook.Store(nil)
		return
	}
	c.hook.Store(&f)
}

// lostCreate pushes a supplier and then one order whose create Xero makes
// but whose answer never arrives; it returns the order's row and number.
func (c *clocked) lostCreate(t *testing.T) (row, number string) {
	t.Helper()
	ids, _ := c.newSuppliers(t, 1)
	number = fmt.Sprintf("PO-U%d", time.Now().UnixNano()%100000)
	_, row = c.order(t, number, ids[0])
	c.xero.LoseAnswers(1)
	c.run(t)
	return row, number
}

// later moves the stand-in's clock on by d and ages the row's attempt
// history by as much; a failed row is due at once.
func (c *clocked) later(t *testing.T, row string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.conn.Exec(ctx, `update external_integration_attempts set started_at = started_at - $2::interval,
		finished_at = finished_at - $2::interval where outbox_id = $1`, row, d.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.conn.Exec(ctx, `update external_integration_outbox set next_attempt_at = now()
		where id = $1 and status = 'failed'`, row); err != nil {
		t.Fatal(err)
	}
	c.skew.Add(int64(d))
}

// ordersNumbered is the stand-in's purchase orders with the Reference.
func (c *clocked) ordersNumbered(number string) []string {
	var ids []string
	for _, o := range c.xero.Orders() {
		if o.Reference == number {
			ids = append(ids, o.PurchaseOrderID)
		}
	}
	return ids
}

// unknownAttempts counts the row's attempts marked outcome_unknown.
func (c *clocked) unknownAttempts(t *testing.T, row string) int {
	t.Helper()
	var n int
	if err := c.conn.QueryRow(context.Background(), `select count(*) from external_integration_attempts
		where outbox_id = $1 and outcome_unknown`, row).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestACreateRetriedAfterTheReplayWindowIsLookedUp: the create's answer
// is lost after Xero made the purchase order (the row failed, its attempt
// marked outcome unknown); two hours later, Xero having forgotten the
// key, the retry looks the order up and completes the row with it as
// reconciled: one purchase order. The connection told to trust the replay
// for a week (as every build before this one did) makes a second one.
func TestACreateRetriedAfterTheReplayWindowIsLookedUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		window  int
		orders  int
		status  string
		lookUps int
	}{
		{"looked up", 0, 1, "reconciled", 1},
		{"trusting the replay for a week", 604800, 2, "completed", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClocked(t)
			ctx := context.Background()
			if tc.window > 0 {
				if _, err := c.conn.Exec(ctx, `update integration_connections set config_json = config_json::jsonb || $2::jsonb
					where id = $1`, c.connID, fmt.Sprintf(`{"replayWindowSeconds": %d}`, tc.window)); err != nil {
					t.Fatal(err)
				}
			}
			row, number := c.lostCreate(t)
			if got := c.row(t, row); got.status != "failed" || c.unknownAttempts(t, row) != 1 || len(c.ordersNumbered(number)) != 1 {
				t.Fatalf("after the lost answer: %+v, %d unknown attempts, %d orders; want failed, 1, 1\n%s",
					got, c.unknownAttempts(t, row), len(c.ordersNumbered(number)), c.logs.String())
			}
			// Inside the window the retry is Xero's replay: no look-up.
			c.later(t, row, 10*time.Minute)
			c.xero.LoseAnswers(1)
			c.run(t)
			if n := c.xero.Counts()["200 OK (order search)"]; n != 0 {
				t.Errorf("%d look-ups inside the replay window, want 0", n)
			}
			c.later(t, row, 2*time.Hour)
			c.run(t)
			got := c.row(t, row)
			orders := c.ordersNumbered(number)
			if got.status != "completed" || got.providerStatus != tc.status || len(orders) != tc.orders ||
				got.reference != orders[0] && got.reference != orders[len(orders)-1] {
				t.Fatalf("after the window: %+v, orders %v; want completed (%s), %d order(s)\n%s", got, orders, tc.status, tc.orders, c.logs.String())
			}
			if n := c.xero.Counts()["200 OK (order search)"]; n != tc.lookUps {
				t.Errorf("%d look-ups, want %d", n, tc.lookUps)
			}
			if tc.orders == 1 && got.reference != orders[0] {
				t.Errorf("provider_reference %s, want the order Xero made, %s", got.reference, orders[0])
			}
			// The document is remembered: the next push of the order is
			// an update of it.
			if tc.orders == 1 {
				var doc string
				if err := c.conn.QueryRow(ctx, `select external_id from integration_outbox_provider_documents
					where integration_connection_id = $1 and local_entity_type = 'purchase_order'`, c.connID).Scan(&doc); err != nil || doc != orders[0] {
					t.Errorf("remembered document %q, %v; want %s", doc, err, orders[0])
				}
			}
		})
	}
}

// TestADeadLetterWithAnUnknownOutcomeIsLookedUpOnItsRerun: with one
// attempt allowed, the lost answer dead-letters the row saying the order
// may exist at Xero; a console rerun a day later looks it up first and
// completes the row with it, one purchase order.
func TestADeadLetterWithAnUnknownOutcomeIsLookedUpOnItsRerun(t *testing.T) {
	t.Parallel()
	c := newClocked(t)
	ctx := context.Background()
	c.env["MAX_ATTEMPTS"] = "1"
	c.a = c.container(t)
	var err error
	if c.orders.worker, err = c.a.PushWorker(); err != nil {
		t.Fatal(err)
	}
	if c.suppliers.worker, err = c.a.PushSupplierWorker(); err != nil {
		t.Fatal(err)
	}
	row, number := c.lostCreate(t)
	got := c.row(t, row)
	if got.status != "dead_letter" || !strings.HasPrefix(got.lastError, push.MayExistAtProvider) {
		t.Fatalf("after the lost answer: %+v, want dead_letter saying %q", got, push.MayExistAtProvider)
	}
	var summary string
	if err := c.conn.QueryRow(ctx, `select summary from external_integration_conflicts where outbox_id = $1`, row).Scan(&summary); err != nil ||
		!strings.Contains(summary, push.MayExistAtProvider) {
		t.Errorf("conflict summary %q, %v", summary, err)
	}
	c.later(t, row, 24*time.Hour)
	rerunner, err := c.a.Rerunner(c.sqs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rerunner.Handle(ctx, json.RawMessage(fmt.Sprintf(`{"organizationId": %q, "outboxIds": [%q], "resetAttempts": true,
		"dispatchNow": true, "reason": "lost answer", "requestedBy": "ops@example.com"}`, c.org, row)))
	if err != nil || len(res.Requeued) != 1 {
		t.Fatalf("rerun = %+v, %v", res, err)
	}
	c.drain(t, c.orders)
	got = c.row(t, row)
	orders := c.ordersNumbered(number)
	if got.status != "completed" || got.providerStatus != "reconciled" || len(orders) != 1 || got.reference != orders[0] {
		t.Fatalf("after the rerun: %+v, orders %v; want completed (reconciled), one order\n%s", got, orders, c.logs.String())
	}
}

// TestARefusedCreateIsNeverLookedUp: a create Xero refuses for good (a
// 400) dead-letters the row without any look-up, and its rerun creates
// without one either: a refusal is a known outcome.
func TestARefusedCreateIsNeverLookedUp(t *testing.T) {
	t.Parallel()
	c := newClocked(t)
	ctx := context.Background()
	c.answer(func(r *http.Request) (int, http.Header, string) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/PurchaseOrders") {
			return 400, nil, `{"ErrorNumber":10,"Type":"ValidationException","Message":"A validation exception occurred","Elements":[{"ValidationErrors":[{"Message":"Account code '300' is not a valid code for this document."}]}]}`
		}
		return 0, nil, ""
	})
	ids, _ := c.newSuppliers(t, 1)
	_, row := c.order(t, "PO-R1", ids[0])
	c.run(t)
	if got := c.row(t, row); got.status != "dead_letter" || strings.Contains(got.lastError, push.MayExistAtProvider) || c.unknownAttempts(t, row) != 0 {
		t.Fatalf("refused: %+v, %d unknown attempts", got, c.unknownAttempts(t, row))
	}
	c.answer(nil)
	c.later(t, row, 24*time.Hour)
	rerunner, err := c.a.Rerunner(c.sqs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rerunner.Handle(ctx, json.RawMessage(fmt.Sprintf(`{"organizationId": %q, "outboxIds": [%q], "resetAttempts": true,
		"dispatchNow": true, "reason": "fixed the account", "requestedBy": "ops@example.com"}`, c.org, row))); err != nil {
		t.Fatal(err)
	}
	c.drain(t, c.orders)
	if got := c.row(t, row); got.status != "completed" || got.providerStatus != "completed" {
		t.Errorf("rerun: %+v", got)
	}
	if n := c.xero.Counts()["200 OK (order search)"]; n != 0 {
		t.Errorf("%d look-ups, want none", n)
	}
}

// TestTwoMatchingOrdersGoToAPerson: the lost create's order and another
// of the same Reference and contact (someone keyed it in Xero): the
// look-up finds both, and the row goes to dead_letter with a
// provider_duplicate conflict naming both; nothing is created.
func TestTwoMatchingOrdersGoToAPerson(t *testing.T) {
	t.Parallel()
	c := newClocked(t)
	ctx := context.Background()
	row, number := c.lostCreate(t)
	first := c.ordersNumbered(number)
	if len(first) != 1 {
		t.Fatalf("orders %v", first)
	}
	contact := c.xero.Contacts()[0].ContactID
	second := c.xero.AddOrder(number, contact, time.Now().UTC().Format(time.DateOnly))
	c.later(t, row, 2*time.Hour)
	c.run(t)
	got := c.row(t, row)
	var conflict, summary string
	if err := c.conn.QueryRow(ctx, `select conflict_type, summary from external_integration_conflicts where outbox_id = $1`, row).Scan(&conflict, &summary); err != nil {
		t.Fatalf("conflict: %v (row %+v)\n%s", err, got, c.logs.String())
	}
	if got.status != "dead_letter" || conflict != "provider_duplicate" || !strings.Contains(summary, first[0]) || !strings.Contains(summary, second) {
		t.Errorf("row %+v, conflict %s %q; want dead_letter, provider_duplicate naming %s and %s", got, conflict, summary, first[0], second)
	}
	if n := len(c.ordersNumbered(number)); n != 2 {
		t.Errorf("%d orders, want the 2 there were", n)
	}
}

// TestALookUpAnswered429PausesTheConnection: the look-up itself is a call
// like any: answered 429, the connection pauses for Xero's Retry-After,
// the attempt is given back, and nothing is created.
func TestALookUpAnswered429PausesTheConnection(t *testing.T) {
	t.Parallel()
	c := newClocked(t)
	ctx := context.Background()
	row, number := c.lostCreate(t)
	c.answer(func(r *http.Request) (int, http.Header, string) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/PurchaseOrders") {
			return 429, http.Header{"Retry-After": {"120"}, "X-Rate-Limit-Problem": {"minute"}}, `{"Title":"Too Many Requests"}`
		}
		return 0, nil, ""
	})
	c.later(t, row, 2*time.Hour)
	c.run(t)
	got := c.row(t, row)
	var paused time.Duration
	if err := c.conn.QueryRow(ctx, `select extract(epoch from paused_until - now()) * interval '1 second'
		from integration_outbox_connection_pace where connection_id = $1`, c.connID).Scan(&paused); err != nil {
		t.Fatalf("pace: %v\n%s", err, c.logs.String())
	}
	if got.status != "failed" || got.attempts != 1 || paused < 100*time.Second {
		t.Errorf("row %+v, paused for %s; want failed with its attempt given back, the connection paused ~120s", got, paused)
	}
	if n := len(c.ordersNumbered(number)); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
	if c.unknownAttempts(t, row) < 1 {
		t.Error("the outcome is no longer marked unknown")
	}
}
