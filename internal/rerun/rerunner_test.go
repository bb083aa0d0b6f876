package rerun_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/dispatch"
	"integration-outbox/internal/rerun"
	"integration-outbox/internal/strictjson"
	"integration-outbox/internal/testenv"
)

func TestBadPayloadFailsNamingTheFieldAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.row(t, "dead_letter", 3)
	b.row(t, "failed", 1)
	b.conflict(t, b.org, id, "open")
	before := b.checksum(t)
	cases := badPayloads(b.org, id)
	// Valid JSON whose only fault is dispatchNow without a queue.
	noQueue, err := rerun.New(b.f.Pool, nil, rerun.Config{MaxAttempts: maxAttempts, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := b.r.Handle(context.Background(), json.RawMessage(tc.in))
			checkPayloadError(t, err, tc.field)
			if res.Matched != 0 || len(res.Requeued) != 0 {
				t.Errorf("result %+v alongside the error", res)
			}
		})
	}
	t.Run("dispatchNow without a queue", func(t *testing.T) {
		_, err := noQueue.Handle(context.Background(), b.payload(t, map[string]any{
			"outboxIds": []string{id}, "dispatchNow": true, "resetAttempts": true}))
		checkPayloadError(t, err, "dispatchNow")
	})
	if after := b.checksum(t); after != before {
		t.Fatal("a rejected payload changed the database")
	}
	if n := b.audits(t); n != 0 {
		t.Fatalf("%d audit rows after rejected payloads", n)
	}
}

func TestRequeueResetsTheRowForTheClaimAndKeepsItsHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	failed := b.row(t, "failed", 2)
	dead := b.row(t, "dead_letter", 4)
	uncertain := b.row(t, "uncertain", 1)
	res := b.handle(t, map[string]any{"outboxIds": []string{uncertain, failed, dead}})
	want := rerun.Result{Matched: 3, Requeued: []string{uncertain, failed, dead}, Skipped: []rerun.Skip{}}
	if !equalResult(res, want) {
		t.Fatalf("result %+v, want %+v", res, want)
	}
	for id, attempts := range map[string]int{failed: 2, dead: 4, uncertain: 1} {
		r := b.f.Row(t, id)
		if r.Status != "queued" || r.AttemptCount != attempts {
			t.Errorf("row %s: status %s attempts %d, want queued with %d attempts kept", id, r.Status, r.AttemptCount, attempts)
		}
		if r.NextAttemptAt == nil || *r.RetryInSeconds > 0 || *r.RetryInSeconds < -60 {
			t.Errorf("row %s: next attempt %v (in %v s), want due now", id, r.NextAttemptAt, r.RetryInSeconds)
		}
		if r.ClaimToken != nil || r.LeaseExpiresAt != nil || r.StartedAt != nil || r.ProviderStatus != nil || r.CompletedAt != nil {
			t.Errorf("row %s keeps claim or provider state: %+v", id, r)
		}
		if r.LastError == nil || *r.LastError != "provider said 503" {
			t.Errorf("row %s: last_error %v, want it kept", id, r.LastError)
		}
	}
	if ref := b.f.Row(t, uncertain).ProviderReference; ref == nil || *ref != "ext-1" {
		t.Errorf("provider_reference %v, want it kept", ref)
	}
	if len(b.sender.sentIDs()) != 0 {
		t.Error("dispatched without dispatchNow")
	}
}

func TestEverySkipReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	completed := b.row(t, "completed", 1)
	processing := b.row(t, "processing", 1)
	unsupported := b.row(t, "unsupported", 1)
	queued := b.row(t, "queued", 0)
	exhausted := b.row(t, "dead_letter", maxAttempts)
	exhaustedFailed := b.row(t, "failed", maxAttempts+2)
	missing := b.f.NewID(t)
	ok := b.row(t, "failed", maxAttempts-1)
	ids := []string{completed, processing, unsupported, queued, exhausted, exhaustedFailed, missing, ok}
	untouched := map[string]testenv.Row{}
	for _, id := range ids[:6] {
		untouched[id] = b.f.Row(t, id)
	}

	res := b.handle(t, map[string]any{"outboxIds": ids})
	want := rerun.Result{Matched: 7, Requeued: []string{ok}, Skipped: []rerun.Skip{
		skip(completed, rerun.ReasonCompleted), skip(processing, rerun.ReasonProcessing),
		skip(unsupported, rerun.ReasonUnsupported), skip(queued, rerun.ReasonQueued),
		skip(exhausted, rerun.ReasonNoAttemptsLeft), skip(exhaustedFailed, rerun.ReasonNoAttemptsLeft),
		skip(missing, rerun.ReasonNotFound),
	}}
	if !equalResult(res, want) {
		t.Fatalf("result\n %+v\nwant\n %+v", res, want)
	}
	if rerun.ReasonNoAttemptsLeft != "no attempts left; set resetAttempts" || rerun.ReasonNotFound != "not found" {
		t.Fatal("skip reasons changed")
	}
	for id, before := range untouched {
		if after := b.f.Row(t, id); !sameRow(before, after) {
			t.Errorf("skipped row %s changed: %+v -> %+v", id, before, after)
		}
	}
}

func TestResetAttemptsRequeuesExhaustedRowsWithNoAttemptsUsed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	exhausted := b.row(t, "dead_letter", maxAttempts)
	some := b.row(t, "failed", 3)
	res := b.handle(t, map[string]any{"outboxIds": []string{exhausted, some}, "resetAttempts": true})
	if !slices.Equal(res.Requeued, []string{exhausted, some}) || len(res.Skipped) != 0 {
		t.Fatalf("result %+v", res)
	}
	for _, id := range []string{exhausted, some} {
		if r := b.f.Row(t, id); r.Status != "queued" || r.AttemptCount != 0 {
			t.Errorf("row %s: %s with %d attempts, want queued with 0", id, r.Status, r.AttemptCount)
		}
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Organization B with rows in every requeueable state and an open conflict.
	orgB := b.f.NewID(t)
	connB := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: orgB})
	var bIDs []string
	for _, s := range []string{"dead_letter", "failed", "uncertain", "completed"} {
		bIDs = append(bIDs, b.f.Command(t, testenv.CommandOpts{OrganizationID: orgB, ConnectionID: connB, Status: s, AttemptCount: 1}))
	}
	b.conflict(t, orgB, bIDs[0], "open")
	digestB := func() string {
		var s string
		err := b.f.Pool.QueryRow(context.Background(), `select md5(
			coalesce((select string_agg(t::text, '|' order by t.id) from external_integration_outbox t where organization_id = $1), '') ||
			coalesce((select string_agg(t::text, '|' order by t.id) from external_integration_conflicts t where organization_id = $1), '') ||
			coalesce((select string_agg(t::text, '|' order by t.id) from external_integration_rerun_audit t where organization_id = $1), ''))`,
			orgB).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := digestB()
	mine := b.row(t, "dead_letter", 1)
	missing := b.f.NewID(t)

	// By ids: B's ids are reported exactly like an id that does not exist.
	res := b.handle(t, map[string]any{"outboxIds": append([]string{mine, missing}, bIDs...), "resetAttempts": true,
		"dispatchNow": true})
	wantSkipped := []rerun.Skip{skip(missing, rerun.ReasonNotFound)}
	for _, id := range bIDs {
		wantSkipped = append(wantSkipped, skip(id, rerun.ReasonNotFound))
	}
	if !equalResult(res, rerun.Result{Matched: 1, Requeued: []string{mine}, Skipped: wantSkipped, Dispatched: 1}) {
		t.Fatalf("result %+v", res)
	}
	// By filter: only A's rows match.
	res = b.handle(t, map[string]any{"filter": map[string]any{}, "resetAttempts": true, "limit": 1000})
	if res.Matched != 0 || len(res.Requeued) != 0 || len(res.Skipped) != 0 {
		t.Fatalf("filter rerun of A saw %+v", res)
	}
	// Dry runs see nothing of B either.
	res = b.handle(t, map[string]any{"outboxIds": bIDs, "dryRun": true})
	if res.Matched != 0 || len(res.Requeued) != 0 || len(res.Skipped) != len(bIDs) {
		t.Fatalf("dry run %+v", res)
	}
	if after := digestB(); after != before {
		t.Fatal("organization A's reruns changed organization B's rows, conflicts or audit")
	}
	if sent := b.sender.sentIDs(); !slices.Equal(sent, []string{mine}) {
		t.Fatalf("dispatchNow sent %v, want only %s", sent, mine)
	}
}

func TestAuditRowRecordsEveryRerunInTheSameTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a1 := b.row(t, "failed", 1)
	a2 := b.row(t, "uncertain", 1)
	done := b.row(t, "completed", 1)
	res := b.handle(t, map[string]any{"outboxIds": []string{a1, done, a2}, "requestedBy": "ops@example.com",
		"reason": "  supplier endpoint fixed  ", "dispatchNow": true})
	if !slices.Equal(res.Requeued, []string{a1, a2}) {
		t.Fatalf("result %+v", res)
	}
	var (
		org, by, reason string
		payload         map[string]any
		affected        []string
		skipped         []rerun.Skip
		dispatchNow     bool
		age             float64
	)
	err := b.f.Pool.QueryRow(context.Background(), `
		select organization_id::text, requested_by, reason, payload, affected_ids::text[], skipped, dispatch_now,
			extract(epoch from now() - created_at)::float8
		from external_integration_rerun_audit`).Scan(&org, &by, &reason, &payload, &affected, &skipped, &dispatchNow, &age)
	if err != nil {
		t.Fatal(err)
	}
	if org != b.org || by != "ops@example.com" || reason != "supplier endpoint fixed" || !dispatchNow || age > 60 {
		t.Errorf("audit %s %q %q dispatchNow=%t age=%v", org, by, reason, dispatchNow, age)
	}
	if !slices.Equal(affected, []string{a1, a2}) {
		t.Errorf("affected_ids %v, want %v", affected, []string{a1, a2})
	}
	if !slices.Equal(skipped, []rerun.Skip{skip(done, rerun.ReasonCompleted)}) {
		t.Errorf("skipped %+v", skipped)
	}
	if payload["organizationId"] != b.org || payload["limit"] != float64(100) || payload["resetAttempts"] != false ||
		payload["dispatchNow"] != true || payload["reason"] != "supplier endpoint fixed" {
		t.Errorf("payload %v", payload)
	}

	// A rerun that requeues nothing is recorded too.
	res = b.handle(t, map[string]any{"outboxIds": []string{done}})
	if len(res.Requeued) != 0 || b.audits(t) != 2 {
		t.Fatalf("result %+v, %d audit rows, want 2", res, b.audits(t))
	}
}

func TestAuditFailureRollsTheRequeueBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.row(t, "dead_letter", 1)
	b.conflict(t, b.org, id, "open")
	// Break the audit insert: the requeue and the conflict resolution made
	// earlier in the same transaction must not survive it.
	b.exec(t, `alter table external_integration_rerun_audit add constraint no_audit check (reason <> 'provider fixed')`)
	before := b.checksum(t)
	if _, err := b.r.Handle(context.Background(), b.payload(t, map[string]any{"outboxIds": []string{id}})); err == nil ||
		!strings.Contains(err.Error(), "audit") {
		t.Fatalf("error %v, want the audit insert's", err)
	}
	if b.checksum(t) != before {
		t.Fatal("the requeue survived a failed audit insert")
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dead := b.row(t, "dead_letter", 2)
	exhausted := b.row(t, "failed", maxAttempts)
	done := b.row(t, "completed", 1)
	b.conflict(t, b.org, dead, "open")
	before := b.checksum(t)
	res := b.handle(t, map[string]any{"outboxIds": []string{dead, exhausted, done}, "dryRun": true, "dispatchNow": true})
	want := rerun.Result{DryRun: true, Matched: 3, Requeued: []string{dead},
		Skipped: []rerun.Skip{skip(exhausted, rerun.ReasonNoAttemptsLeft), skip(done, rerun.ReasonCompleted)}}
	if !equalResult(res, want) {
		t.Fatalf("result %+v, want %+v", res, want)
	}
	res = b.handle(t, map[string]any{"filter": map[string]any{"statuses": []string{"failed"}}, "dryRun": true, "resetAttempts": true})
	if !equalResult(res, rerun.Result{DryRun: true, Matched: 1, Requeued: []string{exhausted}, Skipped: []rerun.Skip{}}) {
		t.Fatalf("filter dry run %+v", res)
	}
	if b.checksum(t) != before || b.audits(t) != 0 {
		t.Fatal("a dry run wrote to the database")
	}
	if len(b.sender.sentIDs()) != 0 {
		t.Fatal("a dry run dispatched")
	}
}

func TestOpenConflictsOfRequeuedRowsAreResolvedWithTheReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dead := b.row(t, "dead_letter", 1)
	exhausted := b.row(t, "dead_letter", maxAttempts)
	open := b.conflict(t, b.org, dead, "open")
	old := b.conflict(t, b.org, dead, "resolved")
	kept := b.conflict(t, b.org, exhausted, "open")
	b.handle(t, map[string]any{"outboxIds": []string{dead, exhausted}, "reason": "supplier id corrected"})
	type conflict struct {
		status, reason string
		resolved       bool
	}
	get := func(id string) conflict {
		var c conflict
		var reason *string
		err := b.f.Pool.QueryRow(context.Background(), `
			select status, resolution_reason, resolved_at is not null and resolved_at > now() - interval '1 minute'
			from external_integration_conflicts where id = $1`, id).Scan(&c.status, &reason, &c.resolved)
		if err != nil {
			t.Fatal(err)
		}
		if reason != nil {
			c.reason = *reason
		}
		return c
	}
	if c := get(open); c != (conflict{"resolved", "supplier id corrected", true}) {
		t.Errorf("open conflict of the requeued row: %+v", c)
	}
	if c := get(old); c.reason != "" || c.resolved {
		t.Errorf("already resolved conflict was touched: %+v", c)
	}
	if c := get(kept); c != (conflict{"open", "", false}) {
		t.Errorf("conflict of a skipped row: %+v", c)
	}
}

func TestFilterSelectsByColumnsOldestFirstUpToTheLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(h int) time.Time { return base.Add(time.Duration(h) * time.Hour) }
	r1 := b.rowAt(t, "dead_letter", 1, at(1))
	r2 := b.rowAt(t, "failed", 1, at(2))
	r3 := b.rowAt(t, "uncertain", 1, at(3))
	r4 := b.rowAt(t, "dead_letter", 1, at(4))
	b.rowAt(t, "completed", 1, at(2))
	otherConn := b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org})
	other := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: otherConn, Status: "dead_letter",
		AttemptCount: 1, CreatedAt: at(2).Add(time.Minute)})
	invoice := b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: b.conn, Status: "failed",
		CommandType: "push_invoice", AttemptCount: 1, CreatedAt: at(2).Add(2 * time.Minute)})
	dry := func(filter map[string]any, limit int) []string {
		t.Helper()
		res := b.handle(t, map[string]any{"filter": filter, "limit": limit, "dryRun": true})
		if res.Matched != len(res.Requeued)+len(res.Skipped) {
			t.Fatalf("result %+v", res)
		}
		return res.Requeued
	}
	for _, tc := range []struct {
		name   string
		filter map[string]any
		limit  int
		want   []string
	}{
		{"everything requeueable", map[string]any{}, 100, []string{r1, r2, other, invoice, r3, r4}},
		{"limit takes the oldest", map[string]any{}, 2, []string{r1, r2}},
		{"statuses", map[string]any{"statuses": []string{"dead_letter"}}, 100, []string{r1, other, r4}},
		{"connection", map[string]any{"connectionId": otherConn}, 100, []string{other}},
		{"command type", map[string]any{"commandType": "push_invoice"}, 100, []string{invoice}},
		{"created range: after inclusive, before exclusive",
			map[string]any{"createdAfter": at(2).Format(time.RFC3339), "createdBefore": at(3).Format(time.RFC3339),
				"connectionId": b.conn, "commandType": "push_purchase_order"}, 100, []string{r2}},
		{"offsets are instants", map[string]any{"createdAfter": at(3).In(time.FixedZone("", 5*3600)).Format(time.RFC3339)},
			100, []string{r3, r4}},
	} {
		if got := dry(tc.filter, tc.limit); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	// A real filter rerun requeues what its dry run listed.
	res := b.handle(t, map[string]any{"filter": map[string]any{"statuses": []string{"dead_letter"}}})
	if !slices.Equal(res.Requeued, []string{r1, other, r4}) {
		t.Fatalf("filter rerun %+v", res)
	}
	for _, id := range res.Requeued {
		if s := b.f.Row(t, id).Status; s != "queued" {
			t.Errorf("row %s is %s", id, s)
		}
	}
}

func TestDispatchNowDispatchesOnlyTheRequeuedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dead := b.row(t, "dead_letter", 2)
	failed := b.row(t, "failed", 1)
	alreadyQueued := b.row(t, "queued", 0) // due, but not this rerun's
	res := b.handle(t, map[string]any{"outboxIds": []string{dead, failed, alreadyQueued}, "dispatchNow": true})
	if res.Dispatched != 2 || !slices.Equal(res.Requeued, []string{dead, failed}) {
		t.Fatalf("result %+v", res)
	}
	sent := b.sender.sentIDs()
	slices.Sort(sent)
	want := []string{dead, failed}
	slices.Sort(want)
	if !slices.Equal(sent, want) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	for id, attempts := range map[string]int{dead: 3, failed: 2} {
		if r := b.f.Row(t, id); r.Status != "processing" || r.AttemptCount != attempts || r.ClaimToken == nil {
			t.Errorf("row %s after dispatch: %+v", id, r)
		}
	}
	if r := b.f.Row(t, alreadyQueued); r.Status != "queued" {
		t.Errorf("a row the rerun skipped was dispatched: %+v", r)
	}
	// Nothing requeued: no dispatch at all.
	res = b.handle(t, map[string]any{"outboxIds": []string{alreadyQueued}, "dispatchNow": true})
	if res.Dispatched != 0 || len(b.sender.sentIDs()) != 2 {
		t.Fatalf("result %+v after sending %v", res, b.sender.sentIDs())
	}
}

type failingDispatcher struct{}

func (failingDispatcher) Run(context.Context, dispatch.Request) (dispatch.Summary, error) {
	return dispatch.Summary{}, errors.New("sqs unavailable")
}

func TestDispatchFailureAfterCommitKeepsTheRequeueAndSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.row(t, "dead_letter", 1)
	r, err := rerun.New(b.f.Pool, failingDispatcher{}, rerun.Config{MaxAttempts: maxAttempts, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Handle(context.Background(), b.payload(t, map[string]any{"outboxIds": []string{id}, "dispatchNow": true}))
	if err == nil || !strings.Contains(err.Error(), "rerun committed (1 rows requeued") ||
		!strings.Contains(err.Error(), "sqs unavailable") || errors.As(err, new(*strictjson.FieldError)) {
		t.Fatalf("error %v", err)
	}
	if !slices.Equal(res.Requeued, []string{id}) || b.f.Row(t, id).Status != "queued" || b.audits(t) != 1 {
		t.Fatalf("result %+v, row %+v", res, b.f.Row(t, id))
	}
}

func TestRerunLocksItsRowsAndChecksTheirStatusUnderTheLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.row(t, "failed", 1)
	ctx := context.Background()
	// A concurrent claim holds the row and turns it to processing.
	tx, err := b.f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `update external_integration_outbox set status = 'processing', claim_token = gen_random_uuid(),
		attempt_count = attempt_count + 1, lease_expires_at = now() + interval '15 minutes', started_at = null where id = $1`, id); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res rerun.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := b.r.Handle(ctx, b.payload(t, map[string]any{"outboxIds": []string{id}}))
		done <- outcome{res, err}
	}()
	// Wait until the rerun is blocked on the row lock.
	deadline := time.Now().Add(10 * time.Second)
	for b.f.Count(t, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`) == 0 {
		select {
		case o := <-done:
			t.Fatalf("the rerun did not wait for the locked row: %+v %v", o.res, o.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the rerun never waited for the row lock")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var token string
	if err := tx.QueryRow(ctx, `select claim_token::text from external_integration_outbox where id = $1`, id).Scan(&token); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if !equalResult(o.res, rerun.Result{Matched: 1, Requeued: []string{}, Skipped: []rerun.Skip{skip(id, rerun.ReasonProcessing)}}) {
		t.Fatalf("result %+v: the rerun must see the claim it waited for", o.res)
	}
	if r := b.f.Row(t, id); r.Status != "processing" || r.ClaimToken == nil || *r.ClaimToken != token {
		t.Fatalf("the claimed row was requeued under its claim: %+v", r)
	}
}

func TestResultEncodesArraysNeverNull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.handle(t, map[string]any{"filter": map[string]any{}, "dryRun": true})
	out, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"dryRun":true,"matched":0,"requeued":[],"skipped":[],"dispatched":0}` {
		t.Fatalf("output %s", out)
	}
}

func equalResult(a, b rerun.Result) bool {
	return a.DryRun == b.DryRun && a.Matched == b.Matched && a.Dispatched == b.Dispatched &&
		a.Requeued != nil && a.Skipped != nil && slices.Equal(a.Requeued, b.Requeued) && slices.Equal(a.Skipped, b.Skipped)
}

func sameRow(a, b testenv.Row) bool {
	a.RetryInSeconds, b.RetryInSeconds = nil, nil
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func skip(id, reason string) rerun.Skip { return rerun.Skip{ID: id, Reason: reason} }
