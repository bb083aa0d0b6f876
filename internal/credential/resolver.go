package credential

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/singleflight"
)

// SecretsAPI is the part of the Secrets Manager client the Resolver calls.
// *secretsmanager.Client satisfies it.
type SecretsAPI interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
	DescribeSecret(ctx context.Context, in *secretsmanager.DescribeSecretInput, optFns ...func(*secretsmanager.Options)) (*secretsmanager.DescribeSecretOutput, error)
}

const (
	// DefaultTTL is how long a resolved credential is cached (CREDENTIAL_CACHE_TTL).
	DefaultTTL = 5 * time.Minute
	// DefaultFetchTimeout bounds one DescribeSecret + GetSecretValue pair.
	DefaultFetchTimeout = 10 * time.Second

	// OrganizationTag is the secret tag that binds a secret to one organization.
	OrganizationTag = "organization_id"
)

// ResolverConfig configures a Resolver. The zero value of every field but
// Region gets its default.
type ResolverConfig struct {
	// Prefix is CREDENTIAL_REFERENCE_PREFIX: the secret name prefix every
	// reference must start with ("integrations/" when empty), or a full ARN
	// prefix "arn:aws:secretsmanager:<region>:<account>:secret:integrations/"
	// that also pins the partition and account of ARN references.
	Prefix string
	// Region is AWS_REGION; ARN references must be in it. Required.
	Region string
	// TTL is CREDENTIAL_CACHE_TTL: 0 means DefaultTTL, a negative TTL turns
	// the cache off (concurrent look-ups of one reference still share their
	// AWS calls).
	TTL time.Duration
	// FetchTimeout bounds the AWS calls of one look-up, which run detached
	// from the caller's cancellation because other callers may share them.
	// 0 means DefaultFetchTimeout.
	FetchTimeout time.Duration
	// Clock returns the current time; time.Now when nil.
	Clock func() time.Time
	// AllowUntagged is CREDENTIAL_ALLOW_UNTAGGED_SECRETS, the old and weaker
	// rule: a secret without an organization_id tag serves every
	// organization, wherever it lies under the prefix. Off (the default), an
	// untagged secret serves only the organization under whose
	// "<prefix><organizationId>/" its name lies.
	AllowUntagged bool
	// Logger receives Debug logs of cache hits, misses and fetches (reference
	// names only, never values); nothing is logged when nil.
	Logger *slog.Logger
	// OAuth configures the refresh of OAuth2 secrets; with a nil OAuth.DB,
	// ResolveConnection refuses them.
	OAuth OAuthConfig
}

// Resolver resolves credential references to credentials, enforcing the
// scope rules (docs/architecture.md, Rules: credentials), and caches them per
// container. It is safe for concurrent use.
type Resolver struct {
	api           SecretsAPI
	scope         scope
	ttl           time.Duration
	fetchTimeout  time.Duration
	now           func() time.Time
	log           *slog.Logger
	allowUntagged bool

	flights singleflight.Group
	mu      sync.Mutex
	cache   map[string]cacheEntry
	epoch   uint64 // bumped by Invalidate; a fetch older than it is not cached
	// handed is the OAuth2 access token ResolveConnection last returned per
	// reference; refused is the one Invalidate was called after.
	handed, refused map[string]string

	oauth *oauthRefresher // nil: OAuth2 secrets are refused

	hits, misses atomic.Int64
}

// cacheEntry is what one fetch learned about a secret.
type cacheEntry struct {
	name           string // the secret's name, as Secrets Manager reports it
	secretID       string // the secret's ARN when known, else the reference
	versionID      string // the VersionId of the AWSCURRENT value read
	organizationID string // the organization_id tag's value
	tagged         bool   // whether the secret has an organization_id tag
	credential     Credential
	expires        time.Time
}

// NewResolver returns a Resolver calling api. It fails, naming the variable,
// when CREDENTIAL_REFERENCE_PREFIX or AWS_REGION is malformed.
func NewResolver(api SecretsAPI, cfg ResolverConfig) (*Resolver, error) {
	if api == nil {
		return nil, errors.New("credential resolver: nil SecretsAPI")
	}
	sc, err := parseScope(cfg.Prefix, cfg.Region)
	if err != nil {
		return nil, err
	}
	r := &Resolver{
		api:           api,
		scope:         sc,
		ttl:           cfg.TTL,
		fetchTimeout:  cfg.FetchTimeout,
		now:           cfg.Clock,
		log:           cfg.Logger,
		allowUntagged: cfg.AllowUntagged,
		cache:         make(map[string]cacheEntry),
		handed:        make(map[string]string),
		refused:       make(map[string]string),
	}
	if r.ttl == 0 {
		r.ttl = DefaultTTL
	}
	if r.fetchTimeout <= 0 {
		r.fetchTimeout = DefaultFetchTimeout
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if cfg.OAuth.DB != nil {
		if r.oauth, err = newOAuthRefresher(r, cfg.OAuth); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Resolve returns the credential that reference names, for a job of
// organizationID. Errors wrap ErrRejected (permanent: out of scope, not the
// organization's, missing, not JSON...) or ErrUnavailable (retryable:
// Secrets Manager unreachable, throttling, ctx done), and name the reference
// but never a secret value.
//
// A secret must prove its tenant: its organization_id tag equals
// organizationID, or it has no such tag and its name lies under
// "<prefix><organizationId>/" (any untagged secret with AllowUntagged).
// The scope is checked before any AWS call. The tenant is checked on every
// call, cache hits included; a cached entry that fails it is fetched again
// before refusing, so a fixed tag takes effect at once.
func (r *Resolver) Resolve(ctx context.Context, organizationID, reference string) (Credential, error) {
	e, err := r.resolve(ctx, organizationID, reference)
	return e.credential, err
}

// resolve is Resolve returning the whole cache entry.
func (r *Resolver) resolve(ctx context.Context, organizationID, reference string) (cacheEntry, error) {
	if err := r.scope.check(reference); err != nil {
		return cacheEntry{}, rejected(reference, err)
	}
	e, state := r.lookup(reference)
	if state == cacheFresh {
		if r.refusal(e, organizationID) == "" {
			r.hits.Add(1)
			r.log.DebugContext(ctx, "credential cache hit", "reference", reference)
			return e, nil
		}
		// Not this organization's: re-check against fresh tags rather than
		// refuse on what may be stale (rejections are not cached).
		state = "organization mismatch"
		r.drop(reference)
	}
	r.misses.Add(1)
	r.log.DebugContext(ctx, "credential cache miss", "reference", reference, "reason", state)
	e, err := r.fetch(ctx, reference)
	if err != nil {
		return cacheEntry{}, err
	}
	if why := r.refusal(e, organizationID); why != "" {
		return cacheEntry{}, rejected(reference, errors.New(why))
	}
	return e, nil
}

// Invalidate drops the cached entry of reference, so the next Resolve fetches
// it again (e.g. after the provider answered 401/403 with it).
//
// For an OAuth2 secret, the access token last handed out for reference is
// remembered as refused: the next ResolveConnection does not hand it out
// again but refreshes it, unless the secret holds another one by then.
func (r *Resolver) Invalidate(reference string) {
	r.mu.Lock()
	if tok, ok := r.handed[reference]; ok {
		r.refused[reference] = tok
	}
	delete(r.cache, reference)
	r.epoch++
	r.mu.Unlock()
	r.flights.Forget(reference)
	r.log.Debug("credential invalidated", "reference", reference)
}

// Stats returns how many Resolve calls in scope were answered from the cache
// (hits) and how many had to fetch (misses).
func (r *Resolver) Stats() (hits, misses int64) {
	return r.hits.Load(), r.misses.Load()
}

// refusal says why the secret of e may not serve a job of organizationID,
// or returns "" when it may. It never names the other organization.
func (r *Resolver) refusal(e cacheEntry, organizationID string) string {
	switch {
	case e.tagged && e.organizationID == organizationID:
		return ""
	case e.tagged:
		return "secret is tagged for another organization"
	case r.allowUntagged:
		return ""
	case organizationID != "" && strings.HasPrefix(e.name, r.scope.namePrefix+organizationID+"/"):
		return ""
	}
	return fmt.Sprintf("secret has no %s tag and its name is not under %q (tag it with the organization, or set CREDENTIAL_ALLOW_UNTAGGED_SECRETS to accept any untagged secret)",
		OrganizationTag, r.scope.namePrefix+organizationID+"/")
}

// Cache look-up outcomes, as logged.
const (
	cacheFresh   = "fresh"
	cacheAbsent  = "absent"
	cacheExpired = "expired"
)

// lookup returns the cache entry of reference and whether it is cacheFresh,
// cacheAbsent or cacheExpired (and then dropped).
func (r *Resolver) lookup(reference string) (cacheEntry, string) {
	if r.ttl < 0 {
		return cacheEntry{}, cacheAbsent
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.cache[reference]
	if !ok {
		return cacheEntry{}, cacheAbsent
	}
	if !r.now().Before(e.expires) {
		delete(r.cache, reference)
		return cacheEntry{}, cacheExpired
	}
	return e, cacheFresh
}

func (r *Resolver) drop(reference string) {
	r.mu.Lock()
	delete(r.cache, reference)
	r.mu.Unlock()
}

// fetch loads reference from Secrets Manager, sharing the AWS calls with
// concurrent fetches of the same reference. The shared calls run detached
// from ctx (bounded by FetchTimeout), so one caller giving up does not fail
// the others; that caller gets ErrUnavailable at once.
func (r *Resolver) fetch(ctx context.Context, reference string) (cacheEntry, error) {
	ch := r.flights.DoChan(reference, func() (any, error) {
		// A flight that just ended may have filled the cache between our
		// lookup and this call.
		if e, state := r.lookup(reference); state == cacheFresh {
			return e, nil
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.fetchTimeout)
		defer cancel()
		return r.load(fctx, reference)
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return cacheEntry{}, res.Err
		}
		return res.Val.(cacheEntry), nil
	case <-ctx.Done():
		return cacheEntry{}, unavailable(reference, context.Cause(ctx))
	}
}

// load makes the AWS calls for reference and caches what they return.
// Failures are not cached.
func (r *Resolver) load(ctx context.Context, reference string) (cacheEntry, error) {
	r.mu.Lock()
	epoch := r.epoch
	r.mu.Unlock()

	desc, err := r.api.DescribeSecret(ctx, &secretsmanager.DescribeSecretInput{SecretId: aws.String(reference)})
	if err != nil {
		return cacheEntry{}, classify(reference, err)
	}
	if desc.DeletedDate != nil {
		return cacheEntry{}, rejected(reference, errors.New("secret is scheduled for deletion"))
	}
	secretID := reference
	if desc.ARN != nil {
		// The secret as Secrets Manager sees it must be in scope too, and
		// reading it by ARN pins the value to the secret whose tags we read.
		if err := r.scope.check(*desc.ARN); err != nil {
			return cacheEntry{}, rejected(reference, fmt.Errorf("resolves to ARN %q which %w", *desc.ARN, err))
		}
		secretID = *desc.ARN
	}
	e := cacheEntry{name: aws.ToString(desc.Name), secretID: secretID}
	if e.name == "" {
		e.name = nameOf(secretID)
	}
	for _, tag := range desc.Tags {
		if aws.ToString(tag.Key) == OrganizationTag {
			e.organizationID, e.tagged = aws.ToString(tag.Value), true
		}
	}

	val, err := r.api.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{
		SecretId:     aws.String(secretID),
		VersionStage: aws.String("AWSCURRENT"), // explicit: moto needs it
	})
	if err != nil {
		return cacheEntry{}, classify(reference, err)
	}
	if val.SecretString == nil {
		return cacheEntry{}, rejected(reference, errors.New("secret has no SecretString (binary secrets are not supported)"))
	}
	if e.credential, err = parseCredential(*val.SecretString); err != nil {
		return cacheEntry{}, rejected(reference, err)
	}
	e.versionID = aws.ToString(val.VersionId)
	if g := e.credential.OAuth; g != nil && g.AccessTokenIssuedAt.IsZero() && val.CreatedDate != nil &&
		val.CreatedDate.Before(g.AccessTokenExpiresAt) {
		// A secret written without "accessTokenIssuedAt" (by the host's
		// own consent flow): its version's creation is when its access
		// token was obtained, at the latest.
		g.AccessTokenIssuedAt = val.CreatedDate.Truncate(time.Second)
	}
	r.store(reference, e, epoch)
	r.log.DebugContext(ctx, "credential fetched", "reference", reference, "organizationTagged", e.tagged, "ttl", r.ttl)
	return e, nil
}

// store caches e for reference unless the cache is off or reference was
// invalidated since epoch.
func (r *Resolver) store(reference string, e cacheEntry, epoch uint64) {
	if r.ttl <= 0 {
		return
	}
	e.expires = r.now().Add(r.ttl)
	r.mu.Lock()
	if r.epoch == epoch { // not invalidated while we fetched
		r.cache[reference] = e
	}
	r.mu.Unlock()
}

// nameOf returns the secret name of a reference: the part of an ARN
// after "secret:" (with Secrets Manager's random suffix), else the reference.
func nameOf(reference string) string {
	if a, why := parseARN(reference); why == "" {
		return a.name
	}
	return reference
}

// isRejectedCode reports whether a Secrets Manager error code is one a
// retry cannot fix.
func isRejectedCode(code string) bool {
	switch code {
	case "ResourceNotFoundException", "AccessDeniedException", "DecryptionFailure",
		"InvalidRequestException", // e.g. the secret is scheduled for deletion
		"InvalidParameterException":
		return true
	}
	return false
}

// classify wraps an AWS call error in ErrRejected or ErrUnavailable by its
// Secrets Manager error code; anything else (throttling, 5xx, network, ctx)
// is ErrUnavailable.
func classify(reference string, err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && isRejectedCode(apiErr.ErrorCode()) {
		return fmt.Errorf("resolving credential_reference %q: %w: %w", clip(reference), ErrRejected, err)
	}
	return unavailable(reference, err)
}

func unavailable(reference string, err error) error {
	return fmt.Errorf("resolving credential_reference %q: %w: %w", clip(reference), ErrUnavailable, err)
}

// rejected wraps why in ErrRejected; why must not hold a secret value.
func rejected(reference string, why error) error {
	return fmt.Errorf("resolving credential_reference %q: %w: %w", clip(reference), why, ErrRejected)
}

// clip shortens a reference for an error message (last_error holds 1000
// characters at most).
func clip(reference string) string {
	const maxLen = 256
	if len(reference) <= maxLen {
		return reference
	}
	cut := maxLen
	for cut > 0 && !utf8.RuneStart(reference[cut]) {
		cut--
	}
	return reference[:cut] + "..."
}
