package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/message"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/pace"
	"integration-outbox/internal/pgtx"
	"integration-outbox/internal/provider"
	"integration-outbox/internal/purchaseorder"
	"integration-outbox/internal/push"
	"integration-outbox/internal/testenv"
)

// The calls a fleet's access tokens cost at the provider: tokenContainers
// real push workers (each its own resolver, cache, pool and pacer) deliver
// one Xero connection's purchase orders to the Xero stand-in, which answers
// 401 to an access token that has expired or that the authorization
// server (fosite, rotation on) no longer accepts. The connection is paced
// at Xero's 60 calls a minute, so jobs wait for their call slots, up to the
// push function's 20 seconds, as they do in production. The resolvers'
// clock, and with it the tokens' lives, the pace and the longest wait, run
// tokenLives lives in tokenCallsRun: a wait is as long against the token's
// life as it is in a real fleet.
const tokenCallsRun = 40 * time.Second

// tokenCallRun is one such run.
type tokenCallRun struct {
	Lifetime, Margin, Ran, Simulated time.Duration
	Calls, Unauthorized, TokenCalls  int64
	Delivered                        int64
	// LookUps are the look-ups of a create whose outcome is unknown
	// (GET /PurchaseOrders): none on this path, where every create is
	// answered.
	LookUps int64
}

// tokenLedger knows when each access token the fleet was handed expires,
// by the resolvers' clock: the one the secret started with and every one
// a container wrote back.
type tokenLedger struct {
	api     credential.SecretWriter
	mu      sync.Mutex
	expires map[string]time.Time
}

func (l *tokenLedger) note(secretString string) {
	var g struct {
		AccessToken          string    `json:"accessToken"`
		AccessTokenExpiresAt time.Time `json:"accessTokenExpiresAt"`
	}
	if json.Unmarshal([]byte(secretString), &g) != nil || g.AccessToken == "" {
		return
	}
	l.mu.Lock()
	l.expires[g.AccessToken] = g.AccessTokenExpiresAt
	l.mu.Unlock()
}

func (l *tokenLedger) PutSecretValue(ctx context.Context, in *secretsmanager.PutSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.PutSecretValueOutput, error) {
	l.note(aws.ToString(in.SecretString))
	return l.api.PutSecretValue(ctx, in, opts...)
}

// live reports whether token is accepted at now.
func (l *tokenLedger) live(token string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	exp, ok := l.expires[token]
	return ok && now.Before(exp)
}

func measureTokenCalls(ctx context.Context, log *slog.Logger, env *benchEnv) ([]tokenCallRun, error) {
	var runs []tokenCallRun
	for _, life := range tokenLifetimes {
		run, err := runTokenCalls(ctx, log, env, life)
		if err != nil {
			return runs, err
		}
		runs = append(runs, run)
	}
	return runs, nil
}

func runTokenCalls(ctx context.Context, log *slog.Logger, env *benchEnv, lifetime time.Duration) (tokenCallRun, error) {
	run := tokenCallRun{Lifetime: lifetime}
	speed := float64(lifetime*tokenLives) / float64(tokenCallsRun)
	clock := scaledClock{start: time.Now(), speed: speed}
	url, err := env.pg.MigratedDatabase(ctx)
	if err != nil {
		return run, err
	}
	defer env.dropDatabase(context.WithoutCancel(ctx), url)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		return run, err
	}
	defer db.Close(context.WithoutCancel(ctx))

	server, err := testenv.NewOAuthServer(lifetime)
	if err != nil {
		return run, err
	}
	defer server.Close()
	ledger := &tokenLedger{api: env.sm, expires: map[string]time.Time{}}
	xero, err := testenv.StartXeroStandIn("bench-tenant", "")
	if err != nil {
		return run, err
	}
	defer xero.Close()
	xero.Authorize = func(token string) bool { return server.Active(token) && ledger.live(token, clock.Now()) }
	contact := xero.AddContact("Bench supplier", "")

	var org string
	if err := db.QueryRow(ctx, `select gen_random_uuid()::text`).Scan(&org); err != nil {
		return run, err
	}
	grant, margin, err := grantSecret(ctx, server, clock, lifetime)
	if err != nil {
		return run, err
	}
	ledger.note(grant)
	run.Margin = margin
	name := fmt.Sprintf("integrations/bench/token-calls-%d", time.Now().UnixNano())
	if _, err := env.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(grant),
		Tags: []smtypes.Tag{{Key: aws.String("organization_id"), Value: aws.String(org)}}}); err != nil {
		return run, fmt.Errorf("creating the bench secret: %w", err)
	}
	perMinute := int(provider.XeroCallsPerMinute * speed)
	cfg, _ := json.Marshal(map[string]any{"tenantId": "bench-tenant", "tokenUrl": server.TokenURL(), "accountCode": "300",
		"apiBaseUrl": xero.URL + "/api.xro/2.0", "callsPerMinute": perMinute, "maxInFlight": 10 * tokenContainers})
	var connID string
	if err := db.QueryRow(ctx, `insert into integration_connections (organization_id, provider, credential_reference, config_json)
		values ($1, 'xero', $2, $3) returning id::text`, org, name, cfg).Scan(&connID); err != nil {
		return run, err
	}
	// More orders than the pace lets through in the run: it, not the
	// backlog, sets the rate.
	orders := int(tokenCallsRun.Minutes()*float64(perMinute)*1.2) + 10
	if _, err := db.Exec(ctx, `with src as (
		    select g, gen_random_uuid() as po_id from generate_series(1, $1::int) g
		), po as (
		    insert into purchase_orders (id, organization_id, order_number, status, currency_code)
		    select po_id, $2::uuid, 'PO-' || g, 'approved', 'EUR' from src
		), lines as (
		    insert into purchase_order_lines (purchase_order_id, stock_item_id, ordered_quantity, purchase_unit_code,
		        normalized_unit_code, units_per_purchase_unit_snapshot, unit_price_minor_snapshot, created_at)
		    select po_id, gen_random_uuid(), 1, 'case', 'each', 12, 1999, now() from src
		)
		insert into external_integration_outbox (organization_id, integration_connection_id, provider, command_type,
		    local_entity_type, local_entity_id, payload_json, idempotency_key, status, created_at)
		select $2::uuid, $3::uuid, 'xero', 'push_purchase_order', 'purchase_order', po_id,
		    jsonb_build_object('externalSupplierId', $4::text), 'idem-' || po_id, 'queued', now() + g * interval '1 microsecond'
		from src`, orders, org, connID, contact); err != nil {
		return run, fmt.Errorf("loading %d orders: %w", orders, err)
	}

	type container struct {
		store  *outbox.Store
		worker *push.Worker
	}
	fleet := make([]container, tokenContainers)
	for i := range fleet {
		pcfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return run, err
		}
		pcfg.MaxConns = 4
		pgtx.Configure(pcfg.ConnConfig)
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return run, err
		}
		defer pool.Close()
		resolver, err := credential.NewResolver(env.sm, credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1",
			Logger: slog.New(slog.DiscardHandler), Clock: clock.Now,
			OAuth: credential.OAuthConfig{DB: pool, Secrets: ledger, AllowPrivateNetworks: true,
				HTTPClient: &http.Client{Timeout: 10 * time.Second}}})
		if err != nil {
			return run, err
		}
		w, err := push.New(outbox.NewStore(pool), resolver, purchaseorder.NewCommand(pool), push.Config{
			Providers:   provider.NewRegistry(provider.NewXero(provider.AccountingConfig{AllowPrivateNetworks: true})),
			Concurrency: 10, MaxAttempts: 10, ProviderTimeout: 10 * time.Second, Logger: slog.New(slog.DiscardHandler),
			Pacer: pace.NewPacer(pool), PaceMaxWait: time.Duration(float64(20*time.Second) / speed),
		})
		if err != nil {
			return run, err
		}
		fleet[i] = container{store: outbox.NewStore(pool), worker: w}
	}

	log.Info("token calls", "lifetime", lifetime.String(), "containers", tokenContainers, "callsPerMinute", perMinute, "for", tokenCallsRun.String())
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	began, simBegan := time.Now(), clock.Now()
	stop := began.Add(tokenCallsRun)
	for _, c := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				claims, err := c.store.Claim(ctx, outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute,
					ConnectionMaxInFlight: 10 * tokenContainers})
				if err == nil && len(claims) > 0 {
					_, err = c.worker.Handle(ctx, claimEvent(claims))
				} else if err == nil {
					time.Sleep(10 * time.Millisecond)
				}
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	run.Ran, run.Simulated = time.Since(began), clock.Now().Sub(simBegan)
	if firstErr != nil {
		return run, fmt.Errorf("token calls (%v tokens): %w", lifetime, firstErr)
	}
	for answer, n := range xero.Counts() {
		run.Calls += int64(n)
		if strings.HasPrefix(answer, "401") {
			run.Unauthorized += int64(n)
		}
		if answer == "200 OK (order search)" {
			run.LookUps += int64(n)
		}
	}
	run.TokenCalls = server.RefreshCount()
	if err := db.QueryRow(ctx, `select count(*) from external_integration_outbox where status = 'completed'`).Scan(&run.Delivered); err != nil {
		return run, err
	}
	return run, nil
}

// claimEvent is the SQS event the dispatcher would send for claims.
func claimEvent(claims []outbox.Claim) events.SQSEvent {
	var ev events.SQSEvent
	for i, c := range claims {
		body, _ := message.Message{OutboxID: c.ID, OrganizationID: c.OrganizationID, ConnectionID: c.ConnectionID,
			CommandType: c.CommandType, ClaimToken: c.ClaimToken}.Encode()
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprintf("m%d", i), Body: body})
	}
	return ev
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func tokenCallsMarkdown(runs []tokenCallRun) string {
	if len(runs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Calls answered 401\n\n%d real push workers (PUSH_CONCURRENCY 10 each, their own resolver, pool and pacer) deliver one Xero connection's purchase orders to the Xero stand-in for %v of wall clock; the stand-in answers 401 to an access token that has expired by the resolvers' clock or that the authorization server (fosite, rotation on) no longer accepts. The connection is paced at Xero's 60 calls a minute and a job waits up to 20 s for its slot, both on the resolvers' clock, which runs %d token lives in each run. No grant is revoked: every 401 is a call wasted. Look-ups: the purchase order look-ups before a create (made only after a create whose outcome is unknown), per 1,000 orders delivered.\n\n",
		tokenContainers, tokenCallsRun, tokenLives)
	b.WriteString("| Token life | Refresh margin | Simulated time | Calls to Xero | Answered 401 | Calls answered 401 per connection-hour | Token calls | Orders delivered | Look-ups per 1,000 orders |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %v | %v | %v | %d | %d | %.1f | %d | %d | %.1f |\n", r.Lifetime, r.Margin, r.Simulated.Round(time.Second),
			r.Calls, r.Unauthorized, float64(r.Unauthorized)/r.Simulated.Hours(), r.TokenCalls, r.Delivered,
			1000*float64(r.LookUps)/float64(max(r.Delivered, 1)))
	}
	return b.String()
}
