package credential

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
)

// interceptedServer is a real authorization server whose token endpoint the
// resolvers reach through a proxy that counts the refresh tokens presented
// and, before forwarding one, runs beforeRefresh: what happens elsewhere
// while a container's token call is in flight.
type interceptedServer struct {
	oauthServer
	proxy  *httptest.Server
	client *http.Client

	mu            sync.Mutex
	presented     map[string]int // refresh token -> times presented
	beforeRefresh func(refreshToken string)
}

func intercept(t *testing.T, inner oauthServer) *interceptedServer {
	t.Helper()
	s := &interceptedServer{oauthServer: inner, client: &http.Client{Timeout: 10 * time.Second},
		presented: make(map[string]int)}
	s.proxy = httptest.NewServer(http.HandlerFunc(s.forward))
	t.Cleanup(s.proxy.Close)
	t.Cleanup(s.client.CloseIdleConnections)
	return s
}

func (s *interceptedServer) TokenURL() string { return s.proxy.URL + "/token" }

// times reports how often refreshToken was presented.
func (s *interceptedServer) times(refreshToken string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.presented[refreshToken]
}

func (s *interceptedServer) forward(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(body))
	if form.Get("grant_type") == "refresh_token" {
		rt := form.Get("refresh_token")
		s.mu.Lock()
		s.presented[rt]++
		before := s.beforeRefresh
		s.mu.Unlock()
		if before != nil {
			before(rt)
		}
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, s.oauthServer.TokenURL(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := s.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// countingSecrets counts a container's GetSecretValue calls.
type countingSecrets struct {
	SecretsAPI
	gets atomic.Int64
}

func (c *countingSecrets) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.gets.Add(1)
	return c.SecretsAPI.GetSecretValue(ctx, in, optFns...)
}

// TestARefreshRefusedAfterAReconnectUsesTheNewVersion: the
// grant is revoked at the server while two containers hold the secret's
// version 1 in their caches. Container A's access token comes due; A takes
// the lease, reads version 1 and presents its refresh token, which the
// server refuses (invalid_grant); while that token call is in flight the
// host reconnects: `outboxctl connect` writes version 2 with a new grant.
// A must read the current version once before concluding anything and go
// on with version 2 (its access token, or a refresh of its grant when that
// token is stale too): no ErrReauthorizationNeeded, nothing recorded, no
// conflict, and the dead refresh token presented once. Container B, whose
// cached access token the provider then refuses (401), resolves version 2
// (or what A wrote back) without a token call. Without a reconnect (the
// control), the same refusal still makes the connection need
// reauthorization, for both containers. Against fosite and Ory Hydra
// without a grace period (skipped without bin/hydra).
func TestARefreshRefusedAfterAReconnectUsesTheNewVersion(t *testing.T) {
	t.Parallel()
	type testCase struct {
		name      string
		reconnect bool
		staleV2   bool // version 2's access token is already stale: its grant is refreshed
		hydra     bool // Ory Hydra without a grace period, else fosite
	}
	var cases []testCase
	for _, hydra := range []bool{false, true} {
		server := "fosite"
		if hydra {
			server = "hydra"
		}
		cases = append(cases,
			testCase{name: server + ": the new version's token is used", reconnect: true, hydra: hydra},
			testCase{name: server + ": the new version's grant is refreshed", reconnect: true, staleV2: true, hydra: hydra},
			testCase{name: server + ": without a reconnect the connection needs reauthorization", hydra: hydra})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var inner oauthServer
			if tc.hydra {
				inner = startHydra(t, 0) // skips without bin/hydra
			} else {
				inner = newAuthServer(t, time.Hour)
			}
			server := intercept(t, inner)
			f := setupOAuth(t, server)

			// Version 1: an access token issued now that lives 2 minutes.
			v1, _ := f.storedGrant(t)
			now := time.Now().Truncate(time.Second)
			v1.AccessTokenIssuedAt, v1.AccessTokenExpiresAt = now, now.Add(2*time.Minute)
			put, err := f.sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{
				SecretId: aws.String(f.arn), SecretString: aws.String(v1.secretString())})
			if err != nil {
				t.Fatal(err)
			}
			v1ID := aws.ToString(put.VersionId)

			// A's clock runs 3 minutes ahead: version 1's access token is due
			// for A while its cache (5 minutes) still holds version 1.
			var ahead atomic.Int64
			clockA := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
			apiA := &countingSecrets{SecretsAPI: newClient(motoURL)}
			cfg := OAuthConfig{Lease: 5 * time.Second, Wait: 3 * time.Second}
			a := f.containerWith(t, apiA, clockA, cfg)
			b := f.container(t, nil, cfg)
			for name, r := range map[string]*Resolver{"A": a, "B": b} {
				cred, err := r.ResolveConnection(ctx, f.conn)
				if err != nil || cred.Token.Reveal() != v1.AccessToken.Reveal() {
					t.Fatalf("container %s's first resolve: err = %v, or not version 1's token", name, err)
				}
			}

			// The grant is revoked: its refresh token was spent elsewhere, so
			// the server's reuse detection refuses it and revokes the grant.
			if !f.server.refreshable(v1.RefreshToken.Reveal()) {
				t.Fatal("the server refused version 1's refresh token before the test presented it")
			}

			// The host's new consent (the authorization code flow).
			tok2 := f.server.connect(t)
			v2 := OAuthGrant{}
			if c, err := parseCredential(oauthSecret(f.server, tok2)); err != nil {
				t.Fatal(err)
			} else {
				v2 = *c.OAuth
			}
			if tc.staleV2 {
				v2.AccessTokenExpiresAt = time.Now().Add(-time.Minute).Truncate(time.Second)
			}
			var v2ID atomic.Value
			if tc.reconnect {
				// outboxctl connect writes version 2 while A's token call
				// with version 1's refresh token is in flight.
				var once sync.Once
				server.mu.Lock()
				server.beforeRefresh = func(rt string) {
					if rt != v1.RefreshToken.Reveal() {
						return
					}
					once.Do(func() {
						out, err := f.sm.PutSecretValue(context.Background(), &secretsmanager.PutSecretValueInput{
							SecretId: aws.String(f.arn), SecretString: aws.String(v2.secretString())})
						if err != nil {
							t.Errorf("writing version 2: %v", err)
							return
						}
						v2ID.Store(aws.ToString(out.VersionId))
					})
				}
				server.mu.Unlock()
			}

			ahead.Store(int64(3 * time.Minute))
			gets, writes := apiA.gets.Load(), f.writes.puts.Load()
			cred, err := a.ResolveConnection(ctx, f.conn)
			gets = apiA.gets.Load() - gets
			writes = f.writes.puts.Load() - writes

			state := func(version string) int {
				return f.db.Count(t, `select count(*) from integration_outbox_connection_authorization
					where connection_id = $1 and needs_reauthorization_since is not null and secret_version_id = $2`, f.conn.ID, version)
			}
			needing := f.db.Count(t, `select count(*) from integration_outbox_connection_authorization
				where connection_id = $1 and needs_reauthorization_since is not null`, f.conn.ID)
			conflicts := f.db.Count(t, `select count(*) from external_integration_conflicts
				where integration_connection_id = $1 and conflict_type = 'connection_unauthorized' and status = 'open'`, f.conn.ID)
			if n := server.times(v1.RefreshToken.Reveal()); n != 1 {
				t.Errorf("version 1's dead refresh token presented %d times, want once", n)
			}
			if gets != 2 {
				t.Errorf("A read the secret %d times during the refresh, want 2 (under the lease, and once after the refusal)", gets)
			}
			t.Logf("A's resolve: err = %v; %d GetSecretValue, %d write-backs, %d refusals", err, gets, writes, f.server.refusedCount())

			if !tc.reconnect {
				if !errors.Is(err, ErrReauthorizationNeeded) || state(v1ID) != 1 || conflicts != 1 {
					t.Fatalf("err = %v, %d state rows for version 1, %d open conflicts; want ErrReauthorizationNeeded, 1, 1",
						err, state(v1ID), conflicts)
				}
				// B, refused by the provider (401) with version 1's access
				// token, finds the connection held: no token call.
				b.Invalidate(f.conn.Reference)
				if _, err := b.ResolveConnection(ctx, f.conn); !errors.Is(err, ErrReauthorizationNeeded) {
					t.Errorf("container B after the refusal: err = %v, want ErrReauthorizationNeeded", err)
				}
				if n := server.times(v1.RefreshToken.Reveal()); n != 1 {
					t.Errorf("version 1's refresh token presented %d times after B's resolve, want once", n)
				}
				return
			}

			if err != nil {
				t.Fatalf("A after the reconnect: err = %v, want version 2's credential", err)
			}
			if needing != 0 || conflicts != 0 {
				t.Errorf("%d state rows needing reauthorization, %d open conflicts; want none", needing, conflicts)
			}
			id, _ := v2ID.Load().(string)
			if id == "" {
				t.Fatal("version 2 was not written during A's token call")
			}
			if !f.server.active(cred.Token.Reveal()) {
				t.Error("the server refuses the access token A resolved")
			}
			stored, storedID := f.storedGrant(t)
			if tc.staleV2 {
				// Version 2's grant refreshed once and written back.
				if n := server.times(v2.RefreshToken.Reveal()); n != 1 || writes != 1 {
					t.Errorf("version 2's refresh token presented %d times, %d write-backs; want 1 and 1", n, writes)
				}
				if storedID == id || cred.Token.Reveal() != stored.AccessToken.Reveal() {
					t.Error("A's token is not the one it wrote back after version 2")
				}
			} else {
				if cred.Token.Reveal() != tok2.AccessToken || storedID != id || writes != 0 {
					t.Errorf("A did not hand out version 2's access token as written (stored version %s, version 2 %s, %d write-backs)",
						storedID, id, writes)
				}
				if n := server.times(v2.RefreshToken.Reveal()); n != 0 {
					t.Errorf("version 2's refresh token presented %d times, want none (its access token is fresh)", n)
				}
			}
			// A's cache now holds the current version: no further read.
			gets = apiA.gets.Load()
			if again, err := a.ResolveConnection(ctx, f.conn); err != nil || again.Token.Reveal() != cred.Token.Reveal() || apiA.gets.Load() != gets {
				t.Errorf("A again: err = %v, same token %v, %d more reads; want its cache's current version",
					err, again.Token.Reveal() == cred.Token.Reveal(), apiA.gets.Load()-gets)
			}

			// B still holds version 1, whose access token the revocation
			// killed: the provider answers 401, B invalidates it and reads
			// the current version, with no token call.
			if f.server.active(v1.AccessToken.Reveal()) {
				t.Error("the server still accepts version 1's access token after the revocation")
			}
			calls := server.times(v1.RefreshToken.Reveal()) + server.times(v2.RefreshToken.Reveal()) + server.times(stored.RefreshToken.Reveal())
			b.Invalidate(f.conn.Reference)
			credB, err := b.ResolveConnection(ctx, f.conn)
			if err != nil || credB.Token.Reveal() != cred.Token.Reveal() {
				t.Errorf("container B after the 401: err = %v, or not the current version's token", err)
			}
			if n := server.times(v1.RefreshToken.Reveal()) + server.times(v2.RefreshToken.Reveal()) + server.times(stored.RefreshToken.Reveal()); n != calls {
				t.Errorf("B made %d token calls, want none", n-calls)
			}
		})
	}
}

var _ oauthServer = (*interceptedServer)(nil)
