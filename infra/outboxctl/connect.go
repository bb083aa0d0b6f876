package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"golang.org/x/oauth2"

	"integration-outbox/internal/credential"
	"integration-outbox/internal/opsaws"
	"integration-outbox/internal/provider"
)

// connectProvider is what outboxctl connect knows of a provider's consent
// flow.
type connectProvider struct {
	authURL, tokenURL string
	connectionsURL    string // Xero: the tenants the grant reaches
	scopes            string
}

var connectProviders = map[string]connectProvider{
	provider.NameXero: {authURL: "https://login.xero.com/identity/connect/authorize", tokenURL: credential.XeroTokenURL,
		connectionsURL: "https://api.xero.com/connections", scopes: "offline_access accounting.transactions accounting.contacts"},
	provider.NameQuickBooks: {authURL: "https://appcenter.intuit.com/connect/oauth2", tokenURL: credential.QuickBooksTokenURL,
		scopes: "com.intuit.quickbooks.accounting"},
}

// connectOptions are connect's flags.
type connectOptions struct {
	provider                                      string
	org, location, connection                     string
	clientID, clientSecret, redirectURI, scopes   string
	authURL, tokenURL, connectionsURL, apiBaseURL string
	tenantID, secretName, prefix                  string
	insert, allowPrivate                          bool
	timeout                                       time.Duration
}

// connect runs the OAuth2 authorization code flow (state and PKCE, on a
// loopback redirect) for a Xero or QuickBooks Online connection, writes the
// grant as the connection's secret and prints (or inserts) its
// integration_connections row.
func (c *cli) connect(ctx context.Context, args []string) error {
	if len(args) == 0 || (args[0] != provider.NameXero && args[0] != provider.NameQuickBooks) {
		return usagef("connect needs a provider: xero or quickbooks")
	}
	o := connectOptions{provider: args[0]}
	defaults := connectProviders[o.provider]
	fs := c.flags("connect " + o.provider)
	fs.StringVar(&o.org, "org", "", "organization id (required)")
	fs.StringVar(&o.location, "location", "", "location id of the connection (optional)")
	fs.StringVar(&o.connection, "connection", "", "an existing connection to reconnect: its secret gets a new version, no row is printed")
	fs.StringVar(&o.clientID, "client-id", c.getenv("OAUTH_CLIENT_ID"), "the app's client id (default $OAUTH_CLIENT_ID); its secret is read from $OAUTH_CLIENT_SECRET")
	fs.StringVar(&o.redirectURI, "redirect-uri", "http://127.0.0.1:8749/callback", "the loopback redirect registered with the app (port 0: any free port)")
	fs.StringVar(&o.scopes, "scope", defaults.scopes, "scopes to ask for, space separated")
	fs.StringVar(&o.authURL, "auth-url", defaults.authURL, "authorization endpoint")
	fs.StringVar(&o.tokenURL, "token-url", defaults.tokenURL, "token endpoint (written as config_json.tokenUrl when not the default)")
	fs.StringVar(&o.connectionsURL, "connections-url", defaults.connectionsURL, "Xero: the connections endpoint listing the tenants")
	fs.StringVar(&o.apiBaseURL, "api-base-url", "", "config_json.apiBaseUrl (default: the provider's)")
	fs.StringVar(&o.tenantID, "tenant-id", "", "Xero: the tenant to connect (default: the only one, or asked)")
	fs.StringVar(&o.secretName, "secret-name", "", "the secret's name (default <CREDENTIAL_REFERENCE_PREFIX><org>/<connection id>)")
	fs.BoolVar(&o.insert, "insert", false, "insert the integration_connections row (DATABASE_URL) instead of printing it")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for the consent")
	if _, err := parse(fs, args[1:]); err != nil {
		return err
	}
	o.clientSecret = c.getenv("OAUTH_CLIENT_SECRET")
	o.allowPrivate = c.getenv("WEBHOOK_ALLOW_PRIVATE_NETWORKS") == "true"
	o.prefix = cmp.Or(c.getenv("CREDENTIAL_REFERENCE_PREFIX"), "integrations/")
	if err := o.check(); err != nil {
		return err
	}
	reconnecting := o.connection != ""
	if !reconnecting {
		o.connection = newUUID()
	}
	o.secretName = cmp.Or(o.secretName, o.prefix+o.org+"/"+o.connection)

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	httpClient := provider.GuardedHTTPClient(o.allowPrivate, 30*time.Second)
	grant, redirect, err := c.consent(ctx, o, httpClient)
	if err != nil {
		return err
	}
	cfg := map[string]string{}
	switch o.provider {
	case provider.NameXero:
		tenant, err := c.pickTenant(ctx, o, httpClient, grant.AccessToken.Reveal())
		if err != nil {
			return err
		}
		cfg["tenantId"] = tenant
	case provider.NameQuickBooks:
		realm := redirect.Get("realmId")
		if realm == "" {
			return errors.New("the redirect carries no realmId: QuickBooks names the company there")
		}
		cfg["realmId"] = realm
	}
	if o.tokenURL != defaults.tokenURL {
		cfg["tokenUrl"] = o.tokenURL
	}
	if o.apiBaseURL != "" {
		cfg["apiBaseUrl"] = o.apiBaseURL
	}

	arn, err := c.writeSecret(ctx, o, grant)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "secret %s written (%s), tagged organization_id=%s\n", o.secretName, arn, o.org)
	if reconnecting {
		return c.resume(ctx, o)
	}
	configJSON, _ := json.Marshal(cfg)
	if o.insert {
		a, err := c.open(ctx)
		if err != nil {
			return err
		}
		defer a.Close()
		if _, err := a.Pool.Exec(ctx, `insert into integration_connections (id, organization_id, location_id, provider,
			credential_reference, config_json) values ($1, $2, $3, $4, $5, $6)`,
			o.connection, o.org, nullable(o.location), o.provider, o.secretName, string(configJSON)); err != nil {
			return fmt.Errorf("inserting the integration_connections row: %w", err)
		}
		fmt.Fprintf(c.stdout, "integration_connections row %s inserted\n", o.connection)
		return nil
	}
	fmt.Fprintf(c.stdout, "insert into integration_connections (id, organization_id, location_id, provider, credential_reference, config_json)\nvalues (%s, %s, %s, %s, %s, %s);\n",
		sqlText(o.connection), sqlText(o.org), sqlNullable(o.location), sqlText(o.provider), sqlText(o.secretName), sqlText(string(configJSON)))
	return nil
}

// resume ends the reauthorization hold of a reconnected connection at once
// where the database is reachable (DATABASE_URL set): its held rows are due
// now and go in the next dispatch run. Without a database, or if that
// fails, the next dispatch run notices the secret's new version itself
// (credential.Resolver.CheckReauthorized) and sends them in the same run.
func (c *cli) resume(ctx context.Context, o connectOptions) error {
	later := fmt.Sprintf("connection %s reconnected: its commands resume at the next dispatch run\n", o.connection)
	if c.getenv("DATABASE_URL") == "" && c.getenv("DATABASE_SECRET_ARN") == "" {
		fmt.Fprint(c.stdout, later)
		return nil
	}
	a, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	creds, err := a.Credentials()
	if err != nil {
		return err
	}
	n, err := creds.CheckReauthorized(ctx)
	if err != nil {
		fmt.Fprintf(c.stderr, "could not end the connection's hold now (%v); ", err)
		fmt.Fprint(c.stdout, later)
		return nil
	}
	if n == 0 {
		fmt.Fprintf(c.stdout, "connection %s reconnected: it was not held for reauthorization\n", o.connection)
		return nil
	}
	fmt.Fprintf(c.stdout, "connection %s reconnected: its held commands are due now and go at the next dispatch run (%d held connection(s) resumed)\n", o.connection, n)
	return nil
}

// check validates the options: ids, the client, and the endpoints, which
// must be https (http and private hosts only with
// WEBHOOK_ALLOW_PRIVATE_NETWORKS=true, as the push function has it; the
// guarded client refuses a private address at connect time).
func (o connectOptions) check() error {
	if err := checkUUID("-org", o.org, true); err != nil {
		return err
	}
	if err := checkUUID("-location", o.location, false); err != nil {
		return err
	}
	if err := checkUUID("-connection", o.connection, false); err != nil {
		return err
	}
	if o.clientID == "" || o.clientSecret == "" {
		return usagef("the app's client id (-client-id or OAUTH_CLIENT_ID) and secret (OAUTH_CLIENT_SECRET) are required")
	}
	for _, u := range []struct{ flag, value string }{{"-auth-url", o.authURL}, {"-token-url", o.tokenURL},
		{"-connections-url", o.connectionsURL}, {"-api-base-url", o.apiBaseURL}} {
		if u.value == "" {
			continue
		}
		p, err := url.Parse(u.value)
		switch {
		case err != nil || p.Host == "" || p.User != nil:
			return usagef("%s %q is not an absolute URL without credentials", u.flag, u.value)
		case p.Scheme == "https":
		case p.Scheme == "http" && o.allowPrivate:
		default:
			return usagef("%s must use https (http only with WEBHOOK_ALLOW_PRIVATE_NETWORKS=true)", u.flag)
		}
	}
	r, err := url.Parse(o.redirectURI)
	if err != nil || r.Scheme != "http" || !isLoopbackHost(r.Hostname()) || r.Port() == "" {
		return usagef("-redirect-uri must be http on a loopback host with a port (e.g. http://127.0.0.1:8749/callback)")
	}
	return nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// consent runs the authorization code flow: it listens on the loopback
// redirect, prints the authorization URL (state and an S256 PKCE
// challenge), waits for the redirect with that state and exchanges its code
// (with the PKCE verifier) for the grant. It returns the grant and the
// redirect's query (QuickBooks' realmId).
func (c *cli) consent(ctx context.Context, o connectOptions, httpClient *http.Client) (credential.OAuthGrant, url.Values, error) {
	redirect, _ := url.Parse(o.redirectURI)
	host := redirect.Hostname()
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, redirect.Port()))
	if err != nil {
		return credential.OAuthGrant{}, nil, fmt.Errorf("listening on the redirect %s: %w", o.redirectURI, err)
	}
	redirect.Host = net.JoinHostPort(redirect.Hostname(), strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	cfg := oauth2.Config{ClientID: o.clientID, ClientSecret: o.clientSecret, RedirectURL: redirect.String(),
		Scopes:   strings.Fields(o.scopes),
		Endpoint: oauth2.Endpoint{AuthURL: o.authURL, TokenURL: o.tokenURL, AuthStyle: oauth2.AuthStyleInHeader}}
	state, verifier := rand.Text(), oauth2.GenerateVerifier()

	type answer struct {
		query url.Values
		err   error
	}
	answers := make(chan answer, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != redirect.Path {
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		if q.Get("state") != state {
			http.Error(w, "unknown state: start again from outboxctl connect", http.StatusBadRequest)
			return
		}
		var err error
		if e := q.Get("error"); e != "" {
			err = fmt.Errorf("the provider refused the authorization: %s: %s", e, q.Get("error_description"))
			fmt.Fprintf(w, "<p>Authorization refused: %s. You can close this window.</p>", html.EscapeString(e))
		} else {
			fmt.Fprint(w, "<p>Authorized. You can close this window and return to outboxctl.</p>")
		}
		select {
		case answers <- answer{query: q, err: err}:
		default:
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()

	fmt.Fprintf(c.stdout, "Open this URL in a browser and authorize the connection:\n%s\n",
		cfg.AuthCodeURL(state, oauth2.AccessTypeOffline, oauth2.S256ChallengeOption(verifier)))
	var a answer
	select {
	case a = <-answers:
	case <-ctx.Done():
		return credential.OAuthGrant{}, nil, fmt.Errorf("waiting for the authorization: %w", context.Cause(ctx))
	}
	if a.err != nil {
		return credential.OAuthGrant{}, nil, a.err
	}
	issued := time.Now().UTC().Truncate(time.Second)
	tok, err := cfg.Exchange(context.WithValue(ctx, oauth2.HTTPClient, httpClient), a.query.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		return credential.OAuthGrant{}, nil, fmt.Errorf("exchanging the authorization code at %s: %w", o.tokenURL, err)
	}
	if tok.RefreshToken == "" {
		return credential.OAuthGrant{}, nil, errors.New("the provider gave no refresh token: ask for offline access (Xero: the offline_access scope)")
	}
	g := credential.OAuthGrant{ClientID: o.clientID, ClientSecret: credential.NewSecret(o.clientSecret),
		RefreshToken: credential.NewSecret(tok.RefreshToken), AccessToken: credential.NewSecret(tok.AccessToken),
		AccessTokenIssuedAt: issued}
	if !tok.Expiry.IsZero() {
		g.AccessTokenExpiresAt = tok.Expiry.UTC().Truncate(time.Second)
	}
	return g, a.query, nil
}

// xeroTenant is one entry of Xero's GET /connections.
type xeroTenant struct {
	TenantID   string `json:"tenantId"`
	TenantType string `json:"tenantType"`
	TenantName string `json:"tenantName"`
}

// pickTenant lists the tenants the grant reaches (Xero's /connections) and
// returns -tenant-id when it is one of them, the only one, or the one the
// user picks by number on stdin.
func (c *cli) pickTenant(ctx context.Context, o connectOptions, httpClient *http.Client, accessToken string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.connectionsURL, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+accessToken)
	req.Header.Set("Accept", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("listing the Xero tenants: %w", err)
	}
	defer resp.Body.Close()
	var tenants []xeroTenant
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("listing the Xero tenants: %s answered %d", o.connectionsURL, resp.StatusCode)
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&tenants); err != nil {
		return "", fmt.Errorf("listing the Xero tenants: the answer is not a list of connections: %w", err)
	}
	switch {
	case len(tenants) == 0:
		return "", errors.New("the grant reaches no Xero tenant: pick an organisation on Xero's consent screen")
	case o.tenantID != "":
		for _, t := range tenants {
			if t.TenantID == o.tenantID {
				return t.TenantID, nil
			}
		}
		return "", fmt.Errorf("-tenant-id %s is not among the tenants the grant reaches", o.tenantID)
	case len(tenants) == 1:
		fmt.Fprintf(c.stdout, "Xero tenant: %s (%s)\n", tenants[0].TenantName, tenants[0].TenantID)
		return tenants[0].TenantID, nil
	}
	fmt.Fprintln(c.stdout, "The grant reaches several Xero tenants:")
	for i, t := range tenants {
		fmt.Fprintf(c.stdout, "  %d) %s (%s, %s)\n", i+1, t.TenantName, t.TenantType, t.TenantID)
	}
	fmt.Fprint(c.stdout, "Connect which one? ")
	line, err := bufio.NewReader(c.stdin).ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("reading the tenant's number: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || n < 1 || n > len(tenants) {
		return "", fmt.Errorf("%q is not a number from 1 to %d", strings.TrimSpace(line), len(tenants))
	}
	return tenants[n-1].TenantID, nil
}

// writeSecret writes g as the connection's secret, tagged with its
// organization (the tenant scope rule): a new secret, or a new version of
// an existing one (a reconnection). It returns the secret's ARN.
func (c *cli) writeSecret(ctx context.Context, o connectOptions, g credential.OAuthGrant) (string, error) {
	cfg, err := opsaws.Load(ctx, c.getenv, true)
	if err != nil {
		return "", err
	}
	sm := secretsmanager.NewFromConfig(cfg)
	out, err := sm.CreateSecret(ctx, &secretsmanager.CreateSecretInput{Name: aws.String(o.secretName),
		SecretString: aws.String(g.SecretJSON()),
		Tags:         []smtypes.Tag{{Key: aws.String(credential.OrganizationTag), Value: aws.String(o.org)}}})
	if err == nil {
		return aws.ToString(out.ARN), nil
	}
	var exists *smtypes.ResourceExistsException
	if !errors.As(err, &exists) {
		return "", fmt.Errorf("creating the secret %s: %w", o.secretName, err)
	}
	// A reconnection: the secret must be this organization's.
	desc, err := sm.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String(o.secretName)})
	if err != nil {
		return "", fmt.Errorf("reading the existing secret %s: %w", o.secretName, err)
	}
	tagged := false
	for _, t := range desc.Tags {
		if aws.ToString(t.Key) == credential.OrganizationTag {
			if aws.ToString(t.Value) != o.org {
				return "", fmt.Errorf("the existing secret %s belongs to another organization", o.secretName)
			}
			tagged = true
		}
	}
	if !tagged {
		if _, err := sm.TagResource(ctx, &secretsmanager.TagResourceInput{SecretId: aws.String(o.secretName),
			Tags: []smtypes.Tag{{Key: aws.String(credential.OrganizationTag), Value: aws.String(o.org)}}}); err != nil {
			return "", fmt.Errorf("tagging the secret %s: %w", o.secretName, err)
		}
	}
	if _, err := sm.PutSecretValue(ctx, &secretsmanager.PutSecretValueInput{SecretId: aws.String(o.secretName),
		SecretString: aws.String(g.SecretJSON())}); err != nil {
		return "", fmt.Errorf("writing a new version of the secret %s: %w", o.secretName, err)
	}
	return aws.ToString(desc.ARN), nil
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// sqlText quotes s as an SQL string literal.
func sqlText(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func sqlNullable(s string) string {
	if s == "" {
		return "null"
	}
	return sqlText(s)
}
