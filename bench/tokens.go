package main

import (
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
// short access tokens, beside the same fleet on a static token.
const (
	tokenContainers = 4
	// tokenLifetime is the access token's life here; the figures per
	// connection-hour are scaled to each provider's documented life.
	tokenLifetime = 12 * time.Second
	tokenMargin   = 2 * time.Second
	// tokenRun is how long the fleet works.
	tokenRun = 60 * time.Second
	// tokenPause is each container's pause between two commands.
	tokenPause = 20 * time.Millisecond
)

// tokenProviders are the access token lives the figures are scaled to.
var tokenProviders = []struct {
	Name     string
	Lifetime time.Duration
}{{"Xero", 30 * time.Minute}, {"QuickBooks Online", 60 * time.Minute}}

// tokenRun is one fleet run: what it did and what it cost.
type tokenFleetRun struct {
	Credential  string // "OAuth2" or "static token"
	Ran         time.Duration
	Commands    int64
	TokenCalls  int64 // refresh_token grant requests
	Refused     int64 // of those, answered invalid_grant
	Writes      int64 // PutSecretValue
	SecretCalls int64 // GetSecretValue + DescribeSecret + PutSecretValue
}

type tokenResult struct {
	Containers int
	Lifetime   time.Duration
	Margin     time.Duration
	Runs       []tokenFleetRun
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

func measureTokens(ctx context.Context, log *slog.Logger, env *benchEnv) (tokenResult, error) {
	res := tokenResult{Containers: tokenContainers, Lifetime: tokenLifetime, Margin: tokenMargin}
	for _, oauth := range []bool{true, false} {
		run, err := runTokenFleet(ctx, log, env, oauth)
		if err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

func runTokenFleet(ctx context.Context, log *slog.Logger, env *benchEnv, oauth bool) (tokenFleetRun, error) {
	run := tokenFleetRun{Credential: "static token"}
	if oauth {
		run.Credential = "OAuth2"
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

	server, err := testenv.NewOAuthServer(tokenLifetime)
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
		tok, err := server.Connect(ctx)
		if err != nil {
			return run, err
		}
		id, secret := server.ClientCredentials()
		b, _ := json.Marshal(map[string]string{"clientId": id, "clientSecret": secret, "refreshToken": tok.RefreshToken,
			"accessToken": tok.AccessToken, "accessTokenExpiresAt": tok.Expiry.UTC().Format(time.RFC3339)})
		value = string(b)
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
			Logger: slog.New(slog.DiscardHandler),
			OAuth: credential.OAuthConfig{DB: pool, Secrets: writes, AllowPrivateNetworks: true, Margin: tokenMargin,
				HTTPClient: &http.Client{Timeout: 10 * time.Second}}})
		if err != nil {
			return run, err
		}
		fleet[i] = r
	}

	log.Info("token fleet", "credential", run.Credential, "containers", tokenContainers, "for", tokenRun.String())
	var (
		wg       sync.WaitGroup
		commands atomic.Int64
		failures atomic.Int64
		firstErr error
		mu       sync.Mutex
	)
	began := time.Now()
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
	run.Ran = time.Since(began)
	if failures.Load() > 0 {
		return run, fmt.Errorf("%s: %d commands could not resolve their credential, the first: %w", run.Credential, failures.Load(), firstErr)
	}
	run.Commands = commands.Load()
	run.TokenCalls, run.Refused = server.RefreshCount(), server.RefusedCount()
	run.Writes = writes.writes.Load()
	run.SecretCalls = reads.gets.Load() + reads.describe.Load() + run.Writes
	return run, nil
}

// perHour scales what a run made per access token lifetime to an hour of a
// provider whose tokens live lifetime.
func (t tokenResult) perHour(n int64, ran, lifetime time.Duration) float64 {
	lifetimes := float64(ran) / float64(t.Lifetime-t.Margin)
	return float64(n) / lifetimes * float64(time.Hour) / float64(lifetime-t.Margin)
}

func tokensMarkdown(t *tokenResult) string {
	if t == nil || len(t.Runs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## OAuth2 tokens across a fleet\n\n")
	fmt.Fprintf(&b, "%d push containers (each its own resolver, cache, database pool and HTTP client) resolve one Xero connection's credential for every command, %v apart each, for %v, against a real authorization server in process (fosite: refresh token rotation, reuse detection) whose access tokens live %v, refreshed %v before they expire; a token the server no longer accepts is invalidated and resolved once more, as the push worker does after a 401. Beside it, the same fleet on a static token.\n\n",
		t.Containers, tokenPause, tokenRun, t.Lifetime, t.Margin)
	b.WriteString("| Credential | Commands | Token calls | Refused grants | Secrets Manager writes | Secrets Manager calls | Calls per million commands | Secrets Manager cost per million commands |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range t.Runs {
		perMillion := float64(r.SecretCalls) / float64(max(r.Commands, 1)) * 1e6
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %.0f | $%.2f |\n", r.Credential, r.Commands, r.TokenCalls, r.Refused,
			r.Writes, r.SecretCalls, perMillion, perMillion*secretsManagerCallUSD)
	}
	for _, r := range t.Runs {
		if r.Credential != "OAuth2" {
			continue
		}
		fmt.Fprintf(&b, "\nPer connection-hour of pushing, scaled from this run (%d token calls and %d writes in %.1f token lives of %v):\n\n",
			r.TokenCalls, r.Writes, float64(r.Ran)/float64(t.Lifetime-t.Margin), t.Lifetime-t.Margin)
		b.WriteString("| Provider (access token life) | Token-endpoint calls per connection-hour | Secrets Manager writes per connection-hour |\n|---|---|---|\n")
		for _, p := range tokenProviders {
			fmt.Fprintf(&b, "| %s (%v) | %.1f | %.1f |\n", p.Name, p.Lifetime, t.perHour(r.TokenCalls, r.Ran, p.Lifetime), t.perHour(r.Writes, r.Ran, p.Lifetime))
		}
	}
	for _, r := range t.Runs {
		if r.Credential == "OAuth2" {
			fmt.Fprintf(&b, "\nThe figures per million commands hold at this run's rate, %.0f commands a second on one connection: a container reads a static secret once per cache lifetime (`CREDENTIAL_CACHE_TTL`, 5 minutes) whatever it pushes meanwhile, and an OAuth2 connection adds, per token life, a re-read by the refreshing container and by each container that waited for it, and one write, so at a lower rate each command carries a larger share of them. Secrets Manager is priced per API call here ($%.2f per 10,000).\n",
				float64(r.Commands)/r.Ran.Seconds(), secretsManagerCallUSD*10000)
		}
	}
	return b.String()
}
