// Package config reads the environment variables of the functions
// (docs/configuration.md) once, at cold start. A malformed variable, or a missing one without a default, is an error
// that names it.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxAttempts is MAX_ATTEMPTS when it is unset: the attempts a row
// gets before it ends in dead_letter. Every package that takes a zero
// MaxAttempts to mean the default uses this one.
const DefaultMaxAttempts = 10

// DefaultDatabasePoolSize is DATABASE_POOL_SIZE when it is unset: the most
// database connections one container opens.
const DefaultDatabasePoolSize = 4

// Config is every setting the functions read.
type Config struct {
	DatabaseURL               string // DATABASE_URL
	DatabaseSecretARN         string // DATABASE_SECRET_ARN (RDS-managed secret), used when DATABASE_URL is empty
	DatabasePoolSize          int    // DATABASE_POOL_SIZE: the most connections one container opens (pgx opens them lazily)
	PushPurchaseOrderQueueURL string // PUSH_PURCHASE_ORDER_QUEUE_URL
	// PushSupplierQueueURL is PUSH_SUPPLIER_QUEUE_URL: where dispatch and
	// rerun send push_supplier commands. Optional: without it those rows
	// are held (dispatch.HeldRecheck), their attempt given back, until it
	// is set.
	PushSupplierQueueURL      string
	ClaimBatchSize            int // CLAIM_BATCH_SIZE
	DispatchMaxPerRun         int // DISPATCH_MAX_PER_RUN
	MaxAttempts               int // MAX_ATTEMPTS
	Lease                     time.Duration
	PushConcurrency           int           // PUSH_CONCURRENCY
	ProviderTimeout           time.Duration // PROVIDER_TIMEOUT
	CredentialReferencePrefix string        // CREDENTIAL_REFERENCE_PREFIX
	CredentialCacheTTL        time.Duration // CREDENTIAL_CACHE_TTL
	// OAuthRefreshMargin is OAUTH_REFRESH_MARGIN: an OAuth2 access token is
	// refreshed at most this long before it expires, and at most a tenth
	// of its lifetime (credential.OAuthGrant.RefreshMargin).
	OAuthRefreshMargin time.Duration
	// CREDENTIAL_ALLOW_UNTAGGED_SECRETS: the old, weaker tenant rule — any
	// untagged secret under the prefix serves every organization.
	CredentialAllowUntagged bool
	AllowPrivateNetworks    bool // WEBHOOK_ALLOW_PRIVATE_NETWORKS
	// SANDBOX_PROVIDER_ENABLED: the sandbox provider runs (demo, tests,
	// benchmarks); off, a sandbox connection's rows end unsupported.
	SandboxProviderEnabled bool
	LogLevel               slog.Level // AWS_LAMBDA_LOG_LEVEL, else LOG_LEVEL
	AWSRegion              string     // AWS_REGION
	// RetentionAge is RETENTION_AGE: completed and unsupported rows older
	// than this are deleted by functions/retention; zero (unset) is off.
	RetentionAge time.Duration
	// DispatchMaxInFlight caps the leased rows across all organizations
	// (DISPATCH_MAX_IN_FLIGHT; 0: no cap). Default: 2 x PUSH_BATCH_SIZE x
	// PUSH_MAXIMUM_CONCURRENCY, the batch every push invocation works on
	// plus the next one waiting for it.
	DispatchMaxInFlight int
	// ConnectionMaxInFlight caps the leased rows of one connection unless
	// its config_json.maxInFlight says otherwise (CONNECTION_MAX_IN_FLIGHT;
	// 0: no cap).
	ConnectionMaxInFlight   int
	CircuitFailureThreshold int           // CIRCUIT_FAILURE_THRESHOLD (0: no circuit breaker)
	CircuitCooldown         time.Duration // CIRCUIT_COOLDOWN
	PushBatchSize           int           // PUSH_BATCH_SIZE: SQS records per push invocation
	PushMaximumConcurrency  int           // PUSH_MAXIMUM_CONCURRENCY: most concurrent push invocations
	// EventBusName is EVENT_BUS_NAME: the EventBridge bus the events go to;
	// empty: events are off, and none is even recorded.
	EventBusName string
	// CommandFailingAfterAttempts is COMMAND_FAILING_AFTER_ATTEMPTS: the
	// failed attempt of a command that publishes its Command Failing event.
	CommandFailingAfterAttempts int
	// ConnectionFailingAfter is CONNECTION_FAILING_AFTER: how long a
	// connection's every call must have failed before its
	// connection_failing conflict opens.
	ConnectionFailingAfter time.Duration
	// ConnectionDisableAfter is CONNECTION_DISABLE_AFTER: how long before
	// it is disabled (0: never).
	ConnectionDisableAfter time.Duration
	// ConnectionDisableMinSpan is CONNECTION_DISABLE_MIN_SPAN: the least
	// time between its first and last failure for it to be disabled.
	ConnectionDisableMinSpan time.Duration
}

// Need names what a function requires beyond the defaults.
type Need int

const (
	// NeedQueue: the function sends to the command queue (dispatch, rerun).
	NeedQueue Need = 1 << iota
)

// Load reads the configuration through getenv (os.Getenv in main).
func Load(getenv func(string) string, need Need) (Config, error) {
	r := reader{getenv: getenv}
	c := Config{
		DatabaseURL:                 r.str("DATABASE_URL", ""),
		DatabaseSecretARN:           r.str("DATABASE_SECRET_ARN", ""),
		DatabasePoolSize:            r.intRange("DATABASE_POOL_SIZE", DefaultDatabasePoolSize, 1, 100),
		PushPurchaseOrderQueueURL:   r.str("PUSH_PURCHASE_ORDER_QUEUE_URL", ""),
		PushSupplierQueueURL:        r.str("PUSH_SUPPLIER_QUEUE_URL", ""),
		ClaimBatchSize:              r.intRange("CLAIM_BATCH_SIZE", 50, 1, 1000),
		DispatchMaxPerRun:           r.intRange("DISPATCH_MAX_PER_RUN", 5000, 1, 1_000_000),
		MaxAttempts:                 r.intRange("MAX_ATTEMPTS", DefaultMaxAttempts, 1, 1000),
		Lease:                       time.Duration(r.intRange("LEASE_SECONDS", 2400, 1, math.MaxInt32)) * time.Second,
		PushConcurrency:             r.intRange("PUSH_CONCURRENCY", 10, 1, 1000),
		ProviderTimeout:             r.duration("PROVIDER_TIMEOUT", 10*time.Second),
		CredentialReferencePrefix:   r.str("CREDENTIAL_REFERENCE_PREFIX", "integrations/"),
		CredentialCacheTTL:          r.duration("CREDENTIAL_CACHE_TTL", 5*time.Minute),
		OAuthRefreshMargin:          r.duration("OAUTH_REFRESH_MARGIN", 2*time.Minute),
		CredentialAllowUntagged:     r.boolean("CREDENTIAL_ALLOW_UNTAGGED_SECRETS", false),
		AllowPrivateNetworks:        r.boolean("WEBHOOK_ALLOW_PRIVATE_NETWORKS", false),
		SandboxProviderEnabled:      r.boolean("SANDBOX_PROVIDER_ENABLED", false),
		LogLevel:                    r.logLevel(),
		AWSRegion:                   r.str("AWS_REGION", ""),
		RetentionAge:                r.duration("RETENTION_AGE", 0),
		ConnectionMaxInFlight:       r.intRange("CONNECTION_MAX_IN_FLIGHT", 10, 0, 1_000_000),
		CircuitFailureThreshold:     r.intRange("CIRCUIT_FAILURE_THRESHOLD", 5, 0, 1_000_000),
		CircuitCooldown:             r.duration("CIRCUIT_COOLDOWN", time.Minute),
		PushBatchSize:               r.intRange("PUSH_BATCH_SIZE", 10, 1, 10_000),
		PushMaximumConcurrency:      r.intRange("PUSH_MAXIMUM_CONCURRENCY", 5, 1, 10_000),
		EventBusName:                r.str("EVENT_BUS_NAME", ""),
		CommandFailingAfterAttempts: r.intRange("COMMAND_FAILING_AFTER_ATTEMPTS", 4, 1, 1000),
		ConnectionFailingAfter:      r.duration("CONNECTION_FAILING_AFTER", time.Hour),
		ConnectionDisableAfter:      r.duration("CONNECTION_DISABLE_AFTER", 120*time.Hour),
		ConnectionDisableMinSpan:    r.duration("CONNECTION_DISABLE_MIN_SPAN", 12*time.Hour),
	}
	if c.ConnectionFailingAfter < time.Second {
		r.fail("CONNECTION_FAILING_AFTER", fmt.Sprintf("must be at least 1s, got %s", c.ConnectionFailingAfter))
	}
	if c.ConnectionDisableAfter != 0 && c.ConnectionDisableAfter < time.Second {
		r.fail("CONNECTION_DISABLE_AFTER", fmt.Sprintf("must be 0 (never) or at least 1s, got %s", c.ConnectionDisableAfter))
	}
	if c.ConnectionDisableMinSpan != 0 && c.ConnectionDisableMinSpan < time.Second {
		r.fail("CONNECTION_DISABLE_MIN_SPAN", fmt.Sprintf("must be 0 or at least 1s, got %s", c.ConnectionDisableMinSpan))
	}
	if c.OAuthRefreshMargin < time.Second || c.OAuthRefreshMargin > time.Hour {
		r.fail("OAUTH_REFRESH_MARGIN", fmt.Sprintf("must be from 1s to 1h, got %s", c.OAuthRefreshMargin))
	}
	if c.RetentionAge != 0 && c.RetentionAge < time.Hour {
		r.fail("RETENTION_AGE", fmt.Sprintf("must be empty (off) or at least 1h, got %q", r.str("RETENTION_AGE", "")))
	}
	c.DispatchMaxInFlight = r.intRange("DISPATCH_MAX_IN_FLIGHT", 2*c.PushBatchSize*c.PushMaximumConcurrency, 0, 1_000_000)
	if c.CircuitCooldown < time.Second || c.CircuitCooldown > time.Hour {
		r.fail("CIRCUIT_COOLDOWN", fmt.Sprintf("must be from 1s to 1h, got %s", c.CircuitCooldown))
	}
	if c.DatabaseURL == "" && c.DatabaseSecretARN == "" {
		r.fail("DATABASE_URL", "is required (or DATABASE_SECRET_ARN)")
	}
	if need&NeedQueue != 0 && c.PushPurchaseOrderQueueURL == "" {
		r.fail("PUSH_PURCHASE_ORDER_QUEUE_URL", "is required")
	}
	if c.ProviderTimeout <= 0 {
		r.fail("PROVIDER_TIMEOUT", "must be positive")
	}
	if c.CredentialReferencePrefix == "" {
		r.fail("CREDENTIAL_REFERENCE_PREFIX", "must not be empty")
	}
	return c, errors.Join(r.errs...)
}

type reader struct {
	getenv func(string) string
	errs   []error
}

func (r *reader) fail(name, msg string) {
	r.errs = append(r.errs, fmt.Errorf("config: %s %s", name, msg))
}

func (r *reader) str(name, def string) string {
	if v := strings.TrimSpace(r.getenv(name)); v != "" {
		return v
	}
	return def
}

func (r *reader) intRange(name string, def, lo, hi int) int {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		r.fail(name, fmt.Sprintf("must be an integer from %d to %d, got %q", lo, hi, v))
		return def
	}
	return n
}

// duration accepts a Go duration ("10s", "5m") or a bare number of seconds.
func (r *reader) duration(name string, def time.Duration) time.Duration {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		r.fail(name, fmt.Sprintf("must be a duration such as 10s or 5m, got %q", v))
		return def
	}
	return d
}

func (r *reader) boolean(name string, def bool) bool {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, fmt.Sprintf("must be true or false, got %q", v))
		return def
	}
	return b
}

// lambdaLevels maps Lambda's ApplicationLogLevel values to slog levels;
// slog has no TRACE or FATAL, so they sit just beyond DEBUG and ERROR.
var lambdaLevels = map[string]slog.Level{
	"TRACE": slog.LevelDebug - 4, "DEBUG": slog.LevelDebug, "INFO": slog.LevelInfo,
	"WARN": slog.LevelWarn, "ERROR": slog.LevelError, "FATAL": slog.LevelError + 4,
}

// logLevel reads AWS_LAMBDA_LOG_LEVEL, which Lambda sets from the function's
// LoggingConfig.ApplicationLogLevel, and falls back to LOG_LEVEL. Lambda's
// setting wins: Lambda drops lines below it anyway, so a lower LOG_LEVEL
// would only format lines nobody receives, and a higher one would hide
// lines the operator asked for in the console.
func (r *reader) logLevel() slog.Level {
	v := strings.TrimSpace(r.getenv("AWS_LAMBDA_LOG_LEVEL"))
	if v == "" {
		return r.level("LOG_LEVEL", slog.LevelInfo)
	}
	l, ok := lambdaLevels[strings.ToUpper(v)]
	if !ok {
		r.fail("AWS_LAMBDA_LOG_LEVEL", fmt.Sprintf("must be TRACE, DEBUG, INFO, WARN, ERROR or FATAL, got %q", v))
		return slog.LevelInfo
	}
	return l
}

func (r *reader) level(name string, def slog.Level) slog.Level {
	v := strings.TrimSpace(r.getenv(name))
	if v == "" {
		return def
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		r.fail(name, fmt.Sprintf("must be debug, info, warn or error, got %q", v))
		return def
	}
	return l
}
