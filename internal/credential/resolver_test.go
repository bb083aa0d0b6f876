package credential

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/aws/smithy-go"

	"integration-outbox/internal/testenv"
)

// Set once by TestMain, read-only afterwards.
var (
	moto       *testenv.Moto
	motoURL    string
	httpClient *http.Client
	// servers starts PostgreSQL for the OAuth2 tests only.
	servers testenv.OnDemand
)

func TestMain(m *testing.M) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	httpClient = &http.Client{Transport: transport}
	testenv.Main(m, testenv.WithMoto(&moto), testenv.WithOnDemand(&servers),
		testenv.WithSetup(func() error { motoURL = moto.URL; return nil }),
		testenv.WithCleanup(transport.CloseIdleConnections))
}

// newClient returns a Secrets Manager client for the moto_server at url.
func newClient(url string, optFns ...func(*secretsmanager.Options)) *secretsmanager.Client {
	return secretsmanager.NewFromConfig(aws.Config{
		Region: testRegion,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "test", SecretAccessKey: "test", Source: "test"}, nil
		}),
		BaseEndpoint: aws.String(url),
		HTTPClient:   httpClient,
	}, optFns...)
}

// countingAPI counts the calls that reach the wrapped SecretsAPI.
type countingAPI struct {
	SecretsAPI
	describes, gets atomic.Int64
}

func (c *countingAPI) DescribeSecret(ctx context.Context, in *secretsmanager.DescribeSecretInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error) {
	c.describes.Add(1)
	return c.SecretsAPI.DescribeSecret(ctx, in, optFns...)
}

func (c *countingAPI) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	c.gets.Add(1)
	return c.SecretsAPI.GetSecretValue(ctx, in, optFns...)
}

func (c *countingAPI) assertCalls(t *testing.T, describes, gets int64) {
	t.Helper()
	if d, g := c.describes.Load(), c.gets.Load(); d != describes || g != gets {
		t.Fatalf("AWS calls: %d DescribeSecret + %d GetSecretValue, want %d + %d", d, g, describes, gets)
	}
}

// fakeClock is a settable Clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// bundle is what a moto-backed test needs.
type bundle struct {
	client   *secretsmanager.Client
	api      *countingAPI
	clock    *fakeClock
	resolver *Resolver
	logs     *syncBuffer
}

// setup returns a Resolver on the shared moto_server; cfg's Region and Clock
// default to the test region and a fake clock.
func setup(t *testing.T, cfg ResolverConfig) *bundle {
	t.Helper()
	b := &bundle{
		client: newClient(motoURL),
		clock:  &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		logs:   &syncBuffer{},
	}
	b.api = &countingAPI{SecretsAPI: b.client}
	if cfg.Region == "" {
		cfg.Region = testRegion
	}
	if cfg.Clock == nil {
		cfg.Clock = b.clock.Now
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := NewResolver(b.api, cfg)
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	b.resolver = r
	return b
}

// The tag tests put on secrets is the one the resolver checks.
func TestTestenvOrganizationTag(t *testing.T) {
	if testenv.OrganizationTag != OrganizationTag {
		t.Fatalf("testenv.OrganizationTag = %q, want %q", testenv.OrganizationTag, OrganizationTag)
	}
}

// createSecret creates a secret named by testenv.SecretName, tagged for
// organizationID unless it is "", and returns its name and ARN.
func (b *bundle) createSecret(t *testing.T, suffix, value, organizationID string) (name, arn string) {
	t.Helper()
	return testenv.CreateSecret(t, b.client, testenv.SecretName(t, suffix), value, organizationID)
}

func (b *bundle) putValue(t *testing.T, name, value string) {
	t.Helper()
	if _, err := b.client.PutSecretValue(context.Background(), &secretsmanager.PutSecretValueInput{
		SecretId: aws.String(name), SecretString: aws.String(value),
	}); err != nil {
		t.Fatalf("PutSecretValue: %v", err)
	}
}

// syncBuffer collects output written from several goroutines.
type syncBuffer = testenv.Buffer

func mustResolve(t *testing.T, r *Resolver, organizationID, reference string) Credential {
	t.Helper()
	c, err := r.Resolve(context.Background(), organizationID, reference)
	if err != nil {
		t.Fatalf("Resolve(%q, %q): %v", organizationID, reference, err)
	}
	return c
}

func assertRejected(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrRejected) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("error = %v, want ErrRejected only", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "credential_reference") || !strings.Contains(msg, want) {
		t.Fatalf("error %q does not name credential_reference and %q", msg, want)
	}
}

const secretJSON = `{"token":"tok-TOPSECRET","signingSecret":"sig-TOPSECRET","other":1}`

func TestResolveHappyPath(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	name, arn := b.createSecret(t, "", secretJSON, "org-a")

	for _, ref := range []string{name, arn} {
		c := mustResolve(t, b.resolver, "org-a", ref)
		if c.Token.Reveal() != "tok-TOPSECRET" || c.SigningSecret.Reveal() != "sig-TOPSECRET" {
			t.Fatalf("Resolve(%q) = %q %q", ref, c.Token.Reveal(), c.SigningSecret.Reveal())
		}
	}
	logs := b.logs.String()
	for _, want := range []string{"credential cache miss", "credential fetched", name} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	mustResolve(t, b.resolver, "org-a", name)
	if logs := b.logs.String(); !strings.Contains(logs, "credential cache hit") || strings.Contains(logs, "TOPSECRET") {
		t.Fatalf("logs lack a cache hit or hold a secret:\n%s", logs)
	}
}

func TestResolveByARNPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{Prefix: testARNPrefix})
	name, arn := b.createSecret(t, "", secretJSON, "org-a")
	mustResolve(t, b.resolver, "org-a", name)
	mustResolve(t, b.resolver, "org-a", arn)
}

func TestResolveOrganizationTag(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	tagged, _ := b.createSecret(t, "-tagged", secretJSON, "org-a")

	_, err := b.resolver.Resolve(context.Background(), "org-b", tagged)
	assertRejected(t, err, "tagged for another organization")
	if strings.Contains(err.Error(), "org-a") {
		t.Fatalf("error %q reveals the other organization", err)
	}
	mustResolve(t, b.resolver, "org-a", tagged)
}

// TestResolveSecretMustProveItsTenant: by default a secret serves an
// organization only when its organization_id tag names it, or when it is
// untagged and its name lies under "<prefix><organizationId>/". An untagged
// secret elsewhere under the prefix serves nobody, and a tag for another
// organization wins over the path.
func TestResolveSecretMustProveItsTenant(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", testARNPrefix} {
		b := setup(t, ResolverConfig{Prefix: prefix})
		orgA, orgB := "org-"+rand.Text()[:8], "org-"+rand.Text()[:8]
		shared, _ := b.createSecret(t, "-untagged", `{"token":"t"}`, "")
		underA, underAARN := testenv.CreateSecret(t, b.client, "integrations/"+orgA+"/"+rand.Text()[:8], `{"token":"a"}`, "")
		hijack, _ := testenv.CreateSecret(t, b.client, "integrations/"+orgA+"/"+rand.Text()[:8], `{"token":"b"}`, orgB)
		// "<prefix><org>" without the slash is another organization's name.
		lookalike, _ := testenv.CreateSecret(t, b.client, "integrations/"+orgA+"x/"+rand.Text()[:8], `{"token":"x"}`, "")

		for _, org := range []string{orgA, orgB} {
			_, err := b.resolver.Resolve(context.Background(), org, shared)
			assertRejected(t, err, "has no organization_id tag and its name is not under \"integrations/"+org+"/\"")
		}
		mustResolve(t, b.resolver, orgA, underA)
		mustResolve(t, b.resolver, orgA, underAARN)
		_, err := b.resolver.Resolve(context.Background(), orgB, underA) // cached for orgA: refused all the same
		assertRejected(t, err, "has no organization_id tag")

		_, err = b.resolver.Resolve(context.Background(), orgA, hijack)
		assertRejected(t, err, "tagged for another organization")
		mustResolve(t, b.resolver, orgB, hijack)

		_, err = b.resolver.Resolve(context.Background(), orgA, lookalike)
		assertRejected(t, err, "has no organization_id tag")
	}
}

// TestResolveAllowUntaggedIsTheOldRule: CREDENTIAL_ALLOW_UNTAGGED_SECRETS
// lets any untagged secret under the prefix serve every organization; a tag
// for another organization is still refused.
func TestResolveAllowUntaggedIsTheOldRule(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{AllowUntagged: true})
	untagged, _ := b.createSecret(t, "-untagged", `{"token":"t"}`, "")
	tagged, _ := b.createSecret(t, "-tagged", secretJSON, "org-a")
	mustResolve(t, b.resolver, "org-a", untagged)
	mustResolve(t, b.resolver, "org-b", untagged)
	_, err := b.resolver.Resolve(context.Background(), "org-b", tagged)
	assertRejected(t, err, "tagged for another organization")
}

func TestResolveCachedEntryRefusedForOtherOrganization(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	name, _ := b.createSecret(t, "", secretJSON, "org-a")

	mustResolve(t, b.resolver, "org-a", name)
	mustResolve(t, b.resolver, "org-a", name) // cached
	b.api.assertCalls(t, 1, 1)

	_, err := b.resolver.Resolve(context.Background(), "org-b", name)
	assertRejected(t, err, "tagged for another organization")
	b.api.assertCalls(t, 2, 2) // re-checked against fresh tags, not refused on the cache alone

	mustResolve(t, b.resolver, "org-a", name) // the re-check refreshed the cache
	b.api.assertCalls(t, 2, 2)

	// The operator fixes the tag and reruns: no stale refusal.
	if _, err := b.client.TagResource(context.Background(), &secretsmanager.TagResourceInput{
		SecretId: aws.String(name),
		Tags:     []types.Tag{{Key: aws.String(OrganizationTag), Value: aws.String("org-b")}},
	}); err != nil {
		t.Fatalf("TagResource: %v", err)
	}
	mustResolve(t, b.resolver, "org-b", name)
	_, err = b.resolver.Resolve(context.Background(), "org-a", name)
	assertRejected(t, err, "tagged for another organization")
}

func TestResolveRejectsBadSecretValues(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	for _, tt := range []struct{ suffix, value, want string }{
		{"-text", "hunter2-plain-TOPSECRET", "not a JSON object"},
		{"-array", `["hunter2-TOPSECRET"]`, "not a JSON object"},
		{"-number", `{"token":123456789,"signingSecret":"TOPSECRET"}`, `"token" is not a string`},
		{"-empty-rotation", `{"signingSecret":"TOPSECRET","signingSecrets":[]}`, `"signingSecrets" is an empty list`},
		{"-rotation-entry", `{"signingSecrets":["TOPSECRET",""]}`, `"signingSecrets[1]" is empty`},
		{"-rotation-number", `{"signingSecrets":["TOPSECRET",123456789]}`, `"signingSecrets[1]" is not a string`},
		{"-bad-whsec", `{"signingSecrets":["whsec_TOPSECRET!"]}`, `"signingSecrets[0]": the text after "whsec_" is not valid base64`},
	} {
		name, _ := b.createSecret(t, tt.suffix, tt.value, "org-a")
		_, err := b.resolver.Resolve(context.Background(), "org-a", name)
		assertRejected(t, err, tt.want)
		if strings.Contains(err.Error(), "TOPSECRET") || strings.Contains(err.Error(), "123456789") {
			t.Fatalf("error %q quotes the secret", err)
		}
	}
	if strings.Contains(b.logs.String(), "TOPSECRET") {
		t.Fatalf("logs hold a secret:\n%s", b.logs)
	}

	name := testenv.SecretName(t, "-binary")
	if _, err := b.client.CreateSecret(context.Background(), &secretsmanager.CreateSecretInput{
		Name: aws.String(name), SecretBinary: []byte("TOPSECRET"),
	}); err != nil {
		t.Fatalf("CreateSecret: %v", err)
	}
	_, err := b.resolver.Resolve(context.Background(), "org-a", name)
	assertRejected(t, err, "no SecretString")
}

func TestResolveMissingSecretIsRejectedAndNotCached(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	name := testenv.SecretName(t, "")

	_, err := b.resolver.Resolve(context.Background(), "org-a", name)
	assertRejected(t, err, name)
	var notFound *types.ResourceNotFoundException
	if !errors.As(err, &notFound) {
		t.Fatalf("error %v does not wrap the ResourceNotFoundException", err)
	}

	// The operator creates it and reruns.
	testenv.CreateSecret(t, b.client, name, secretJSON, "org-a")
	mustResolve(t, b.resolver, "org-a", name)
}

func TestResolveScheduledForDeletion(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	name, _ := b.createSecret(t, "", secretJSON, "org-a")
	if _, err := b.client.DeleteSecret(context.Background(), &secretsmanager.DeleteSecretInput{
		SecretId: aws.String(name), RecoveryWindowInDays: aws.Int64(7),
	}); err != nil {
		t.Fatalf("DeleteSecret: %v", err)
	}
	_, err := b.resolver.Resolve(context.Background(), "org-a", name)
	assertRejected(t, err, "scheduled for deletion")
}

func TestResolveOutOfScopeMakesNoAWSCall(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{Prefix: testARNPrefix})
	for _, ref := range []string{
		"other/secret",
		"",
		"integrations/../other",
		"integrations/a b",
		"arn:aws:secretsmanager:eu-west-1:123456789012:secret:integrations/x-AbCdEf",
		"arn:aws:secretsmanager:us-east-1:999999999999:secret:integrations/x-AbCdEf",
		"arn:aws-cn:secretsmanager:us-east-1:123456789012:secret:integrations/x-AbCdEf",
	} {
		_, err := b.resolver.Resolve(context.Background(), "org-a", ref)
		assertRejected(t, err, "")
	}
	b.api.assertCalls(t, 0, 0)
	if hits, misses := b.resolver.Stats(); hits != 0 || misses != 0 {
		t.Fatalf("Stats = %d, %d; out-of-scope references count as neither", hits, misses)
	}
}

func TestResolveCachesSequential(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	name, _ := b.createSecret(t, "", secretJSON, "org-a")
	for range 100 {
		mustResolve(t, b.resolver, "org-a", name)
	}
	b.api.assertCalls(t, 1, 1)
	if hits, misses := b.resolver.Stats(); hits != 99 || misses != 1 {
		t.Fatalf("Stats = %d hits, %d misses; want 99, 1", hits, misses)
	}
}

func TestResolveCachesConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	name, _ := b.createSecret(t, "", secretJSON, "org-a")

	start := make(chan struct{})
	errs := make(chan error, 100)
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			<-start
			c, err := b.resolver.Resolve(context.Background(), "org-a", name)
			if err == nil && c.Token.Reveal() != "tok-TOPSECRET" {
				err = fmt.Errorf("wrong token")
			}
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b.api.assertCalls(t, 1, 1)
	if hits, misses := b.resolver.Stats(); hits+misses != 100 {
		t.Fatalf("Stats = %d hits + %d misses, want 100 in all", hits, misses)
	}
}

func TestResolveTTLExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{TTL: time.Minute})
	name, _ := b.createSecret(t, "", `{"token":"v1"}`, "org-a")

	mustResolve(t, b.resolver, "org-a", name)
	b.putValue(t, name, `{"token":"v2"}`)
	b.clock.Advance(time.Minute - time.Nanosecond)
	if c := mustResolve(t, b.resolver, "org-a", name); c.Token.Reveal() != "v1" {
		t.Fatalf("before expiry got %q, want the cached v1", c.Token.Reveal())
	}
	b.api.assertCalls(t, 1, 1)

	b.clock.Advance(time.Nanosecond)
	if c := mustResolve(t, b.resolver, "org-a", name); c.Token.Reveal() != "v2" {
		t.Fatalf("after expiry got %q, want v2", c.Token.Reveal())
	}
	b.api.assertCalls(t, 2, 2)
	if !strings.Contains(b.logs.String(), `"reason":"expired"`) {
		t.Fatalf("no expiry logged:\n%s", b.logs)
	}
}

func TestResolveDefaultTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	name, _ := b.createSecret(t, "", secretJSON, "org-a")
	mustResolve(t, b.resolver, "org-a", name)
	b.clock.Advance(DefaultTTL - time.Second)
	mustResolve(t, b.resolver, "org-a", name)
	b.api.assertCalls(t, 1, 1)
	b.clock.Advance(time.Second)
	mustResolve(t, b.resolver, "org-a", name)
	b.api.assertCalls(t, 2, 2)
}

func TestResolveCacheDisabled(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{TTL: -1})
	name, _ := b.createSecret(t, "", secretJSON, "org-a")
	mustResolve(t, b.resolver, "org-a", name)
	mustResolve(t, b.resolver, "org-a", name)
	b.api.assertCalls(t, 2, 2)
}

func TestInvalidate(t *testing.T) {
	t.Parallel()
	b := setup(t, ResolverConfig{})
	name, _ := b.createSecret(t, "", `{"token":"old"}`, "org-a")

	mustResolve(t, b.resolver, "org-a", name)
	b.putValue(t, name, `{"token":"rotated"}`)
	if c := mustResolve(t, b.resolver, "org-a", name); c.Token.Reveal() != "old" {
		t.Fatalf("got %q, want the cached old token", c.Token.Reveal())
	}
	b.resolver.Invalidate(name)
	if c := mustResolve(t, b.resolver, "org-a", name); c.Token.Reveal() != "rotated" {
		t.Fatalf("after Invalidate got %q, want rotated", c.Token.Reveal())
	}
	b.api.assertCalls(t, 2, 2)
	b.resolver.Invalidate("integrations/never-resolved") // harmless
}

func TestResolveUnavailableWhenSecretsManagerIsDown(t *testing.T) {
	t.Parallel()
	moto := testenv.OwnMoto(t)
	client := newClient(moto.URL, func(o *secretsmanager.Options) { o.RetryMaxAttempts = 1 })
	r, err := NewResolver(client, ResolverConfig{Region: testRegion})
	if err != nil {
		t.Fatal(err)
	}
	name, _ := testenv.CreateSecret(t, client, testenv.SecretName(t, ""), secretJSON, "org-a")
	moto.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = r.Resolve(ctx, "org-a", name)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRejected) {
		t.Fatalf("error = %v, want ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), name) {
		t.Fatalf("error %q does not name the reference", err)
	}
	var netErr net.Error
	if !errors.As(err, &netErr) {
		t.Fatalf("error %v does not wrap the network error", err)
	}
}

// fakeAPI is a SecretsAPI whose answers the test scripts.
type fakeAPI struct {
	describe func(context.Context, *secretsmanager.DescribeSecretInput) (*secretsmanager.DescribeSecretOutput, error)
	get      func(context.Context, *secretsmanager.GetSecretValueInput) (*secretsmanager.GetSecretValueOutput, error)
}

func (f *fakeAPI) DescribeSecret(ctx context.Context, in *secretsmanager.DescribeSecretInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error) {
	if f.describe != nil {
		return f.describe(ctx, in)
	}
	return &secretsmanager.DescribeSecretOutput{
		ARN:  aws.String(testARNPrefix + strings.TrimPrefix(aws.ToString(in.SecretId), "integrations/") + "-AbCdEf"),
		Name: in.SecretId,
		Tags: []types.Tag{{Key: aws.String(OrganizationTag), Value: aws.String("org-a")}},
	}, nil
}

func (f *fakeAPI) GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, _ ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error) {
	if f.get != nil {
		return f.get(ctx, in)
	}
	if aws.ToString(in.VersionStage) != "AWSCURRENT" {
		return nil, errors.New("VersionStage AWSCURRENT not asked for")
	}
	return &secretsmanager.GetSecretValueOutput{SecretString: aws.String(`{"token":"t"}`)}, nil
}

func newFakeResolver(t *testing.T, api SecretsAPI, cfg ResolverConfig) *Resolver {
	t.Helper()
	cfg.Region = testRegion
	r, err := NewResolver(api, cfg)
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	return r
}

func TestResolveClassifiesErrors(t *testing.T) {
	t.Parallel()
	opErr := func(err error) error {
		return &smithy.OperationError{ServiceID: "Secrets Manager", OperationName: "DescribeSecret", Err: err}
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"not found", opErr(&types.ResourceNotFoundException{Message: aws.String("no such secret")}), ErrRejected},
		{"access denied", opErr(&smithy.GenericAPIError{Code: "AccessDeniedException"}), ErrRejected},
		{"KMS decryption failure", opErr(&types.DecryptionFailure{}), ErrRejected},
		{"invalid request", opErr(&types.InvalidRequestException{}), ErrRejected},
		{"invalid parameter", opErr(&types.InvalidParameterException{}), ErrRejected},
		{"throttling", opErr(&smithy.GenericAPIError{Code: "ThrottlingException", Message: "ResourceNotFoundException"}), ErrUnavailable},
		{"internal error", opErr(&types.InternalServiceError{}), ErrUnavailable},
		{"expired credentials", opErr(&smithy.GenericAPIError{Code: "ExpiredTokenException"}), ErrUnavailable},
		{"network", opErr(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), ErrUnavailable},
		{"deadline", opErr(context.DeadlineExceeded), ErrUnavailable},
		{"anything else", errors.New("boom"), ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, op := range []string{"describe", "get"} {
				api := &fakeAPI{}
				fail := func() error { return tt.err }
				if op == "describe" {
					api.describe = func(context.Context, *secretsmanager.DescribeSecretInput) (*secretsmanager.DescribeSecretOutput, error) {
						return nil, fail()
					}
				} else {
					api.get = func(context.Context, *secretsmanager.GetSecretValueInput) (*secretsmanager.GetSecretValueOutput, error) {
						return nil, fail()
					}
				}
				r := newFakeResolver(t, api, ResolverConfig{})
				_, err := r.Resolve(context.Background(), "org-a", "integrations/acme")
				if !errors.Is(err, tt.want) || !errors.Is(err, tt.err) {
					t.Fatalf("%s: error = %v, want %v wrapping the cause", op, err, tt.want)
				}
				if !strings.Contains(err.Error(), `credential_reference "integrations/acme"`) {
					t.Fatalf("%s: error %q does not name the reference", op, err)
				}
			}
		})
	}
}

func TestResolveTransientErrorIsNotCached(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	api := &fakeAPI{}
	api.describe = func(_ context.Context, in *secretsmanager.DescribeSecretInput) (*secretsmanager.DescribeSecretOutput, error) {
		if calls.Add(1) == 1 {
			return nil, &smithy.GenericAPIError{Code: "ThrottlingException"}
		}
		return (&fakeAPI{}).DescribeSecret(context.Background(), in)
	}
	r := newFakeResolver(t, api, ResolverConfig{})
	if _, err := r.Resolve(context.Background(), "org-a", "integrations/acme"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("first Resolve = %v, want ErrUnavailable", err)
	}
	mustResolve(t, r, "org-a", "integrations/acme")
}

func TestResolveRejectsOutOfScopeARNFromDescribe(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{describe: func(context.Context, *secretsmanager.DescribeSecretInput) (*secretsmanager.DescribeSecretOutput, error) {
		return &secretsmanager.DescribeSecretOutput{ARN: aws.String("arn:aws:secretsmanager:us-east-1:123456789012:secret:other/acme-AbCdEf")}, nil
	}}
	r := newFakeResolver(t, api, ResolverConfig{})
	_, err := r.Resolve(context.Background(), "org-a", "integrations/acme")
	assertRejected(t, err, "outside CREDENTIAL_REFERENCE_PREFIX")
}

// blockingAPI is a fakeAPI whose DescribeSecret waits for release.
type blockingAPI struct {
	fakeAPI
	started chan struct{} // receives once per DescribeSecret call
	release chan struct{}
	ctxErr  atomic.Value // the DescribeSecret ctx's Err() when released
	calls   atomic.Int64
}

func newBlockingAPI() *blockingAPI {
	b := &blockingAPI{started: make(chan struct{}, 10), release: make(chan struct{})}
	b.fakeAPI.describe = func(ctx context.Context, in *secretsmanager.DescribeSecretInput) (*secretsmanager.DescribeSecretOutput, error) {
		b.calls.Add(1)
		b.started <- struct{}{}
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		b.ctxErr.Store(fmt.Sprint(ctx.Err()))
		return (&fakeAPI{}).DescribeSecret(ctx, in)
	}
	return b
}

func TestResolveSharedFetchOutlivesFirstCaller(t *testing.T) {
	t.Parallel()
	api := newBlockingAPI()
	r := newFakeResolver(t, api, ResolverConfig{})
	const ref = "integrations/acme"

	ctx1, cancel1 := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { _, err := r.Resolve(ctx1, "org-a", ref); first <- err }()
	<-api.started

	second := make(chan error, 1)
	go func() { _, err := r.Resolve(context.Background(), "org-a", ref); second <- err }()
	for { // wait until the second caller has joined the flight
		if _, misses := r.Stats(); misses == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}

	cancel1()
	if err := <-first; !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller got %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	close(api.release)
	if err := <-second; err != nil {
		t.Fatalf("second caller: %v", err)
	}
	if got := api.ctxErr.Load(); got != "<nil>" {
		t.Fatalf("shared fetch ctx was %v, want not cancelled", got)
	}
	mustResolve(t, r, "org-a", ref) // cached by the shared fetch
	if n := api.calls.Load(); n != 1 {
		t.Fatalf("%d DescribeSecret calls, want 1", n)
	}
}

func TestResolveCallerDeadline(t *testing.T) {
	t.Parallel()
	api := newBlockingAPI()
	r := newFakeResolver(t, api, ResolverConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := r.Resolve(ctx, "org-a", "integrations/acme")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
	}
	close(api.release) // let the detached fetch finish
	<-api.started
	mustResolve(t, r, "org-a", "integrations/acme")
}

func TestResolveFetchTimeout(t *testing.T) {
	t.Parallel()
	api := newBlockingAPI()
	r := newFakeResolver(t, api, ResolverConfig{FetchTimeout: 20 * time.Millisecond})
	_, err := r.Resolve(context.Background(), "org-a", "integrations/acme")
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error = %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
	}
}

func TestInvalidateDuringFetchDropsItsResult(t *testing.T) {
	t.Parallel()
	api := newBlockingAPI()
	r := newFakeResolver(t, api, ResolverConfig{})
	const ref = "integrations/acme"

	done := make(chan error, 1)
	go func() { _, err := r.Resolve(context.Background(), "org-a", ref); done <- err }()
	<-api.started
	r.Invalidate(ref) // e.g. a 401 with what this fetch may be about to return
	close(api.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustResolve(t, r, "org-a", ref)
	if n := api.calls.Load(); n != 2 {
		t.Fatalf("%d DescribeSecret calls, want 2: a fetch that began before Invalidate must not fill the cache", n)
	}
}
