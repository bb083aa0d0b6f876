package push_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/health"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pace"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

// expiringCredentials hands out the access token of the current "lifetime":
// a token resolved before rotateAt expires then, one resolved after it is
// the next one. It stands in for the resolver's rule that a token is handed
// out only while it is fresh.
type expiringCredentials struct {
	rotateAt time.Time
	resolves atomic.Int64
}

func (e *expiringCredentials) ResolveConnection(context.Context, credential.Connection) (credential.Credential, error) {
	e.resolves.Add(1)
	if time.Now().Before(e.rotateAt) {
		return credential.Credential{Token: credential.NewSecret("token-before")}, nil
	}
	return credential.Credential{Token: credential.NewSecret("token-after")}, nil
}

func (*expiringCredentials) Invalidate(string) {}

// tokenCheckingProvider is a limited provider that answers 401 to an access
// token that has expired when the call arrives, as Xero does; before is
// calls with each token, by its value.
type tokenCheckingProvider struct {
	limits   provider.Limits
	rotateAt time.Time
	// onCall runs at each call, before the answer (nil: nothing); an error
	// it returns is the answer.
	onCall func(n int64) error
	calls  atomic.Int64
	mu     sync.Mutex
	seen   map[string]int
	unauth int
}

func (*tokenCheckingProvider) Name() string { return "limited" }

func (p *tokenCheckingProvider) Limits(provider.Connection) provider.Limits { return p.limits }

func (p *tokenCheckingProvider) PushPurchaseOrder(_ context.Context, _ provider.Connection, cred credential.Credential,
	_ provider.PurchaseOrderPush) (provider.Result, error) {
	n := p.calls.Add(1)
	if p.onCall != nil {
		if err := p.onCall(n); err != nil {
			return provider.Result{}, err
		}
	}
	tok := cred.Token.Reveal()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = map[string]int{}
	}
	p.seen[tok]++
	if tok == "token-before" && !time.Now().Before(p.rotateAt) {
		p.unauth++
		return provider.Result{}, &provider.Error{Kind: provider.Rejected, StatusCode: 401, AuthFailed: true,
			Message: "limited answered 401: the access token has expired"}
	}
	return provider.Result{Status: provider.StatusCompleted, ExternalID: "PO", StatusCode: 200}, nil
}

// credentialWorker is one container's worker on p, its calls paced, with
// creds as its credential source.
func credentialWorker(t *testing.T, p provider.Provider, creds push.Credentials) bundle {
	t.Helper()
	f := pg.NewDB(t)
	w, err := push.New(outbox.NewStore(f.Pool), creds, purchaseorder.NewCommand(f.Pool), push.Config{
		Logger: slog.New(slog.DiscardHandler), Providers: provider.NewRegistry(p), Concurrency: 10,
		MaxAttempts: 10, ProviderTimeout: 2 * time.Second, Jitter: func() float64 { return 0 },
		Pacer: pace.NewPacer(f.Pool), PaceMaxWait: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return bundle{f: f, store: outbox.NewStore(f.Pool), worker: w, org: f.NewID(t)}
}

// credentialCommands inserts n orders and their commands on one connection
// of the limited provider that names a credential.
func (b bundle) credentialCommands(t *testing.T, n int) (conn string, ids []string) {
	t.Helper()
	conn = b.f.Connection(t, testenv.ConnectionOpts{OrganizationID: b.org, Provider: "limited",
		CredentialReference: "integrations/" + b.org + "/grant"})
	for range n {
		po := b.f.PurchaseOrder(t, b.org, "", 1)
		ids = append(ids, b.f.Command(t, testenv.CommandOpts{OrganizationID: b.org, ConnectionID: conn,
			Provider: "limited", EntityID: po}))
	}
	return conn, ids
}

// The access token is taken again after the wait for the connection's call
// slot: a token that expires while a job waits for its slot is not sent.
// Four jobs of one connection at two calls a second wait up to 1.5 s for
// their slots; the token in hand when they started expires 0.3 s in. Each
// call carries the token current when it leaves, and none is answered 401.
func TestTheCredentialIsFreshWhenTheRequestLeaves(t *testing.T) {
	t.Parallel()
	rotateAt := time.Now().Add(time.Hour) // set once the jobs are claimed
	p := &tokenCheckingProvider{limits: provider.Limits{MaxInFlight: 10, CallsPerMinute: 120}}
	creds := &expiringCredentials{rotateAt: rotateAt}
	b := credentialWorker(t, p, creds)
	_, ids := b.credentialCommands(t, 4)
	ev := b.claim(t, 10)
	if len(ev.Records) != 4 {
		t.Fatalf("claimed %d rows, want 4", len(ev.Records))
	}
	creds.rotateAt = time.Now().Add(300 * time.Millisecond)
	p.rotateAt = creds.rotateAt
	b.handle(t, ev)
	if p.unauth != 0 {
		t.Errorf("%d calls answered 401 (tokens sent: %v), want none: the token must be taken after the slot's wait", p.unauth, p.seen)
	}
	if p.seen["token-after"] < 2 {
		t.Errorf("tokens sent %v: the jobs whose slot came after the expiry must send the next token", p.seen)
	}
	for _, id := range ids {
		if r := b.f.Row(t, id); r.Status != "completed" || r.AttemptCount != 1 {
			t.Errorf("row %s is %s at attempt %d, want completed at 1 (last_error %q)", id, r.Status, r.AttemptCount, deref(r.LastError))
		}
	}
}

// A connection found to need reauthorization (by another container, during
// this batch) gets no further call: a job that starts after the mark is
// held at its start, and a job that was waiting for its call slot when the
// mark came is held after the wait, both without a call, their attempts
// not charged. Only the call that found the refusal reached the provider.
func TestNoCallReachesAConnectionOnceItNeedsReauthorization(t *testing.T) {
	t.Parallel()
	p := &tokenCheckingProvider{limits: provider.Limits{MaxInFlight: 10, CallsPerMinute: 120}, rotateAt: time.Now().Add(time.Hour)}
	creds := &expiringCredentials{rotateAt: time.Now().Add(time.Hour)}
	b := credentialWorker(t, p, creds)
	conn, ids := b.credentialCommands(t, 5)
	mark := func() {
		if _, err := health.MarkUnauthorized(context.Background(), b.f.Pool, health.Unauthorized{OrganizationID: b.org,
			ConnectionID: conn, Reason: "the provider refused its authorization (invalid_grant)"}); err != nil {
			t.Error(err)
		}
	}
	// The first call of the batch stands for another container's refused
	// refresh: the connection is marked while the other jobs wait for
	// their slots, and that call fails.
	p.onCall = func(n int64) error {
		if n == 1 {
			mark()
			return &provider.Error{Kind: provider.Retryable, StatusCode: 503, Message: "limited answered 503"}
		}
		return nil
	}
	ev := b.claim(t, 3)
	if len(ev.Records) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(ev.Records))
	}
	late := b.claim(t, 10) // claimed before the mark, started after it
	b.handle(t, ev)
	b.handle(t, late)
	if got := p.calls.Load(); got != 1 {
		t.Errorf("%d calls reached the provider, want 1: none after the connection was marked", got)
	}
	held := 0
	for _, id := range ids {
		r := b.f.Row(t, id)
		if r.AttemptCount == 1 {
			continue // the call that failed
		}
		held++
		if r.Status != "failed" || r.AttemptCount != 0 || !strings.Contains(deref(r.LastError), "reauthorization") {
			t.Errorf("row %s is %s at attempt %d (last_error %q), want failed at 0, held for reauthorization",
				id, r.Status, r.AttemptCount, deref(r.LastError))
		}
	}
	if held != 4 {
		t.Errorf("%d rows held, want 4", held)
	}
	// No claim takes them until the connection is reconnected; then they
	// are due at once, not at their recheck a minute later (the row whose
	// call failed too, not at its retry 30 s later).
	if ev := b.claim(t, 10); len(ev.Records) != 0 {
		t.Fatalf("claimed %d rows of a connection needing reauthorization", len(ev.Records))
	}
	ended, _, due, err := health.Reauthorized(context.Background(), b.f.Pool, b.org, conn, "reconnected")
	if err != nil || !ended || due != 5 {
		t.Fatalf("Reauthorized: ended %v, %d rows made due, %v; want true, 5", ended, due, err)
	}
	if ev := b.claim(t, 10); len(ev.Records) != 5 {
		t.Fatalf("claimed %d rows right after the reconnection, want all 5", len(ev.Records))
	}
}
