package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/testenv"
)

// The OAuth2 token measurement: a fleet of push containers resolving one
// connection's credential for every command while a real authorization
// server (fosite, refresh token rotation and reuse detection on) hands out
// access tokens of a given life, beside the same fleet on a static token.
// Each life runs on the resolvers' default refresh margin
// (OAUTH_REFRESH_MARGIN, 2 minutes, at most a tenth of the life); the
// resolvers' clock runs faster than the wall clock so that every life
// passes tokenLives times in tokenRun.
const (
	tokenContainers = 4
	// tokenRun is how long each fleet works, by the wall clock.
	tokenRun = 80 * time.Second
	// tokenLives is how many access token lives each run covers.
	tokenLives = 4
	// tokenPause is each container's pause between two commands.
	tokenPause = 20 * time.Millisecond
)

// tokenLifetimes are the access token lives measured: a short one as test
// servers and some providers issue, and Xero's 30 minutes.
var tokenLifetimes = []time.Duration{20 * time.Second, 5 * time.Minute, 30 * time.Minute}

// tokenFleetRun is one fleet run: what it did and what it cost.
type tokenFleetRun struct {
	Credential  string        // "OAuth2" or "static token"
	Lifetime    time.Duration // the access token's life (OAuth2)
	Margin      time.Duration // its refresh margin
	Ran         time.Duration // by the wall clock
	Simulated   time.Duration // by the resolvers' clock
	Commands    int64
	TokenCalls  int64 // refresh_token grant requests
	Refused     int64 // of those, answered invalid_grant
	Writes      int64 // PutSecretValue
	SecretCalls int64 // GetSecretValue + DescribeSecret + PutSecretValue
}

// perHour scales n, counted in the run, to an hour by the resolvers' clock.
func (r tokenFleetRun) perHour(n int64) float64 {
	return float64(n) / r.Simulated.Hours()
}

// bound is the most token calls an hour may hold: one per life less its
// margin, and the first.
func (r tokenFleetRun) bound() float64 {
	return float64(time.Hour)/float64(r.Lifetime-r.Margin) + 1
}

type tokenResult struct {
	Containers int
	Runs       []tokenFleetRun
	// Calls are the runs of real push workers counting the provider calls
	// answered 401 (tokencalls.go).
	Calls []tokenCallRun
}

// secretWrites counts PutSecretValue calls.
type secretWrites struct {
	api    *secretsmanager.Client
	writes atomic.Int64
}

func (w *secretWrites) PutSecretValue(ctx context.Context, in *secretsmanager.PutSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.PutSecretValueOutput, error) {
	w.writes.Add(1)
	return w.api.PutSecretValue(ctx, in, opts...)
}

// scaledClock runs speed times faster than the wall clock from its start.
type scaledClock struct {
	start time.Time
	speed float64
}

func (c scaledClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.start)) * c.speed))
}

func measureTokens(ctx context.Context, log *slog.Logger, env *benchEnv) (tokenResult, error) {
	res := tokenResult{Containers: tokenContainers}
	for _, life := range tokenLifetimes {
		run, err := runTokenFleet(ctx, log, env, life)
		if err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, run)
	}
	run, err := runTokenFleet(ctx, log, env, 0)
	if err != nil {
		return res, err
	}
	res.Runs = append(res.Runs, run)
	res.Calls, err = measureTokenCalls(ctx, log, env)
	return res, err
}

// runTokenFleet runs the fleet on an OAuth2 secret whose access tokens live
// lifetime, or on a static token when lifetime is 0.
func runTokenFleet(ctx context.Context, log *slog.Logger, env *benchEnv, lifetime time.Duration) (tokenFleetRun, error) {
	oauth := lifetime > 0
	run := tokenFleetRun{Credential: "static token"}
	clock := scaledClock{start: time.Now(), speed: 1}
	if oauth {
		run.Credential, run.Lifetime = "OAuth2", lifetime
		clock.speed = float64(lifetime*tokenLives) / float64(tokenRun)
	}
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

	server, err := testenv.NewOAuthServer(cmp.Or(lifetime, time.Minute))
	if err != nil {
		return run, err
	}
	defer server.Close()
	var org string
	if err := db.QueryRow(ctx, `select gen_random_uuid()::text`).Scan(&org); err != nil {
		return run, err
	}
	value := `{"token":"static-access-token"}`
	if oauth {
		if value, run.Margin, err = grantSecret(ctx, server, clock, lifetime); err != nil {
			return run, err
		}
	}
	name := fmt.Sprintf("integrations/bench/tokens-%s-%d", strings.ReplaceAll(strings.ToLower(run.Credential), " ", "-"), time.Now().UnixNano())
	if _, err := env.sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(name), SecretString: aws.String(value),
		Tags: []smtypes.Tag{{Key: aws.String("organization_id"), Value: aws.String(org)}}}); err != nil {
		return run, fmt.Errorf("creating the bench secret: %w", err)
	}
	cfg, _ := json.Marshal(map[string]string{"tenantId": "bench", "tokenUrl": server.TokenURL()})
	var connID string
	if err := db.QueryRow(ctx, `insert into integration_connections (organization_id, provider, credential_reference, config_json)
		values ($1, 'xero', $2, $3) returning id::text`, org, name, cfg).Scan(&connID); err != nil {
		return run, err
	}
	conn := credential.Connection{ID: connID, OrganizationID: org, Provider: "xero", Config: cfg, Reference: name}

	reads := &countingSecrets{api: env.sm}
	writes := &secretWrites{api: env.sm}
	fleet := make([]*credential.Resolver, tokenContainers)
	for i := range fleet {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return run, err
		}
		defer pool.Close()
		r, err := credential.NewResolver(reads, credential.ResolverConfig{Prefix: "integrations/", Region: "us-east-1",
			Logger: slog.New(slog.DiscardHandler), Clock: clock.Now,
			OAuth: credential.OAuthConfig{DB: pool, Secrets: writes, AllowPrivateNetworks: true,
				HTTPClient: &http.Client{Timeout: 10 * time.Second}}})
		if err != nil {
			return run, err
		}
		fleet[i] = r
	}

	log.Info("token fleet", "credential", run.Credential, "lifetime", lifetime.String(), "containers", tokenContainers, "for", tokenRun.String())
	var (
		wg       sync.WaitGroup
		commands atomic.Int64
		failures atomic.Int64
		firstErr error
		mu       sync.Mutex
	)
	began, simBegan := time.Now(), clock.Now()
	stop := began.Add(tokenRun)
	for _, r := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) && ctx.Err() == nil {
				cred, err := r.ResolveConnection(ctx, conn)
				if err == nil && oauth && !server.Active(cred.Token.Reveal()) {
					// What a provider's 401 makes the push worker do.
					r.Invalidate(name)
					cred, err = r.ResolveConnection(ctx, conn)
				}
				if err != nil {
					failures.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				} else {
					commands.Add(1)
				}
				time.Sleep(tokenPause)
			}
		}()
	}
	wg.Wait()
	run.Ran, run.Simulated = time.Since(began), clock.Now().Sub(simBegan)
	if failures.Load() > 0 {
		return run, fmt.Errorf("%s: %d commands could not resolve their credential, the first: %w", run.Credential, failures.Load(), firstErr)
	}
	run.Commands = commands.Load()
	run.TokenCalls, run.Refused = server.RefreshCount(), server.RefusedCount()
	run.Writes = writes.writes.Load()
	run.SecretCalls = reads.gets.Load() + reads.describe.Load() + run.Writes
	return run, nil
}

// grantSecret connects to server and returns the secret value of its grant
// (the push function's OAuth2 shape) and the access token's refresh margin;
// the token is stamped by the resolvers' clock, as their own refreshes are.
func grantSecret(ctx context.Context, server *testenv.OAuthServer, clock scaledClock, lifetime time.Duration) (string, time.Duration, error) {
	tok, err := server.Connect(ctx)
	if err != nil {
		return "", 0, err
	}
	id, secret := server.ClientCredentials()
	issued := clock.Now().UTC().Truncate(time.Second)
	b, _ := json.Marshal(map[string]string{"clientId": id, "clientSecret": secret, "refreshToken": tok.RefreshToken,
		"accessToken": tok.AccessToken, "accessTokenIssuedAt": issued.Format(time.RFC3339),
		"accessTokenExpiresAt": issued.Add(lifetime).Format(time.RFC3339)})
	margin := credential.OAuthGrant{AccessTokenIssuedAt: issued, AccessTokenExpiresAt: issued.Add(lifetime)}.
		RefreshMargin(credential.DefaultRefreshMargin)
	return string(b), margin, nil
}

func tokensMarkdown(t *tokenResult) string {
	if t == nil || len(t.Runs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## OAuth2 tokens across a fleet\n\n")
	fmt.Fprintf(&b, "%d push containers (each its own resolver, cache, database pool and HTTP client) resolve one Xero connection's credential for every command, %v apart each, for %v of wall clock, against a real authorization server in process (fosite: refresh token rotation, reuse detection) whose access tokens live 20 s, 5 min or 30 min, refreshed with the default margin (`OAUTH_REFRESH_MARGIN` 2 min, at most a tenth of the life); the resolvers' clock runs fast enough for %d lives to pass in each run. A token the server no longer accepts is invalidated and resolved once more, as the push worker does after a 401. Beside it, the same fleet on a static token.\n\n",
		t.Containers, tokenPause, tokenRun, tokenLives)
	b.WriteString("| Credential | Token life | Refresh margin | Simulated time | Commands | Token calls | Refused grants | Secrets Manager writes | Token calls per connection-hour | Secrets Manager writes per connection-hour | At most (an hour / (life − margin) + 1) | Secrets Manager calls per million commands |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range t.Runs {
		perMillion := float64(r.SecretCalls) / float64(max(r.Commands, 1)) * 1e6
		if r.Lifetime == 0 {
			fmt.Fprintf(&b, "| %s | | | %v | %d | | | %d | | | | %.0f |\n", r.Credential, r.Simulated.Round(time.Second), r.Commands, r.Writes, perMillion)
			continue
		}
		fmt.Fprintf(&b, "| %s | %v | %v | %v | %d | %d | %d | %d | %.1f | %.1f | %.1f | %.0f |\n", r.Credential, r.Lifetime, r.Margin,
			r.Simulated.Round(time.Second), r.Commands, r.TokenCalls, r.Refused, r.Writes, r.perHour(r.TokenCalls), r.perHour(r.Writes), r.bound(), perMillion)
	}
	fmt.Fprintf(&b, "\nPer connection-hour: the counts over the run's simulated time. The calls per million commands hold at this run's rate: a container reads a static secret once per cache lifetime (`CREDENTIAL_CACHE_TTL`, 5 minutes) whatever it pushes meanwhile, and an OAuth2 connection adds, per token life, a re-read by the refreshing container and by each container that waited for it, and one write. The resolvers' cache (5 minutes) runs on their fast clock too, so the faster runs (5 and 30 minute lives) re-read the secret more often per command than a real fleet would: their calls per million commands are an upper bound. Secrets Manager is priced per API call ($%.2f per 10,000).\n",
		secretsManagerCallUSD*10000)
	b.WriteString(tokenCallsMarkdown(t.Calls))
	return b.String()
}
