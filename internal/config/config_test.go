package config

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestDefaults(t *testing.T) {
	c, err := Load(env(map[string]string{"DATABASE_URL": "postgres://x/y"}), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{DatabaseURL: "postgres://x/y", DatabasePoolSize: 4, ClaimBatchSize: 50, DispatchMaxPerRun: 5000, MaxAttempts: 10,
		Lease: 2400 * time.Second, PushConcurrency: 10, ProviderTimeout: 10 * time.Second,
		CredentialReferencePrefix: "integrations/", CredentialCacheTTL: 5 * time.Minute, OAuthRefreshMargin: 2 * time.Minute, LogLevel: slog.LevelInfo,
		DispatchMaxInFlight: 100, ConnectionMaxInFlight: 10, CircuitFailureThreshold: 5, CircuitCooldown: time.Minute,
		PushBatchSize: 10, PushMaximumConcurrency: 5,
		CommandFailingAfterAttempts: 4, ConnectionFailingAfter: time.Hour, ConnectionDisableAfter: 120 * time.Hour,
		ConnectionDisableMinSpan: 12 * time.Hour}
	if c != want {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
}

func TestAnyLeaseOfAtLeastOneSecondIsAccepted(t *testing.T) {
	for _, v := range []string{"1", "86400", "31536000"} {
		c, err := Load(env(map[string]string{"DATABASE_URL": "x", "LEASE_SECONDS": v}), 0)
		if err != nil || c.Lease.Seconds() < 1 {
			t.Errorf("LEASE_SECONDS=%s: %v", v, err)
		}
	}
}

func TestEmptyMeansDefault(t *testing.T) {
	c, err := Load(env(map[string]string{"DATABASE_URL": "x", "DISPATCH_MAX_PER_RUN": " "}), 0)
	if err != nil || c.DispatchMaxPerRun != 5000 {
		t.Errorf("got %d, %v", c.DispatchMaxPerRun, err)
	}
}

func TestParsesEveryVariable(t *testing.T) {
	c, err := Load(env(map[string]string{
		"DATABASE_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db", "PUSH_PURCHASE_ORDER_QUEUE_URL": "http://q",
		"CLAIM_BATCH_SIZE": "7", "DISPATCH_MAX_PER_RUN": "70", "MAX_ATTEMPTS": "3", "LEASE_SECONDS": "1",
		"PUSH_CONCURRENCY": "4", "PROVIDER_TIMEOUT": "2500ms", "CREDENTIAL_REFERENCE_PREFIX": "acme/",
		"CREDENTIAL_CACHE_TTL": "30", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "LOG_LEVEL": "debug", "AWS_REGION": "eu-west-1",
		"SANDBOX_PROVIDER_ENABLED": "true", "CREDENTIAL_ALLOW_UNTAGGED_SECRETS": "true", "OAUTH_REFRESH_MARGIN": "45",
		"DATABASE_POOL_SIZE": "12",
	}), NeedQueue)
	if err != nil {
		t.Fatal(err)
	}
	if c.ClaimBatchSize != 7 || c.DispatchMaxPerRun != 70 || c.MaxAttempts != 3 || c.Lease != time.Second ||
		c.PushConcurrency != 4 || c.ProviderTimeout != 2500*time.Millisecond || c.CredentialReferencePrefix != "acme/" ||
		c.CredentialCacheTTL != 30*time.Second || !c.AllowPrivateNetworks || c.LogLevel != slog.LevelDebug || c.AWSRegion != "eu-west-1" ||
		!c.SandboxProviderEnabled || !c.CredentialAllowUntagged || c.OAuthRefreshMargin != 45*time.Second ||
		c.DatabasePoolSize != 12 {
		t.Errorf("unexpected %+v", c)
	}
}

func TestErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		need Need
	}{
		{"DATABASE_URL", map[string]string{}, 0},
		{"PUSH_PURCHASE_ORDER_QUEUE_URL", map[string]string{"DATABASE_URL": "x"}, NeedQueue},
		{"CLAIM_BATCH_SIZE", map[string]string{"DATABASE_URL": "x", "CLAIM_BATCH_SIZE": "fifty"}, 0},
		{"CLAIM_BATCH_SIZE", map[string]string{"DATABASE_URL": "x", "CLAIM_BATCH_SIZE": "0"}, 0},
		{"LEASE_SECONDS", map[string]string{"DATABASE_URL": "x", "LEASE_SECONDS": "0"}, 0},
		{"LEASE_SECONDS", map[string]string{"DATABASE_URL": "x", "LEASE_SECONDS": "1.5"}, 0},
		{"MAX_ATTEMPTS", map[string]string{"DATABASE_URL": "x", "MAX_ATTEMPTS": "-1"}, 0},
		{"PROVIDER_TIMEOUT", map[string]string{"DATABASE_URL": "x", "PROVIDER_TIMEOUT": "soon"}, 0},
		{"PROVIDER_TIMEOUT", map[string]string{"DATABASE_URL": "x", "PROVIDER_TIMEOUT": "0"}, 0},
		{"CREDENTIAL_CACHE_TTL", map[string]string{"DATABASE_URL": "x", "CREDENTIAL_CACHE_TTL": "5 minutes"}, 0},
		{"OAUTH_REFRESH_MARGIN", map[string]string{"DATABASE_URL": "x", "OAUTH_REFRESH_MARGIN": "early"}, 0},
		{"OAUTH_REFRESH_MARGIN", map[string]string{"DATABASE_URL": "x", "OAUTH_REFRESH_MARGIN": "0"}, 0},
		{"OAUTH_REFRESH_MARGIN", map[string]string{"DATABASE_URL": "x", "OAUTH_REFRESH_MARGIN": "2h"}, 0},
		{"WEBHOOK_ALLOW_PRIVATE_NETWORKS", map[string]string{"DATABASE_URL": "x", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "yes please"}, 0},
		{"SANDBOX_PROVIDER_ENABLED", map[string]string{"DATABASE_URL": "x", "SANDBOX_PROVIDER_ENABLED": "on"}, 0},
		{"CREDENTIAL_ALLOW_UNTAGGED_SECRETS", map[string]string{"DATABASE_URL": "x", "CREDENTIAL_ALLOW_UNTAGGED_SECRETS": "sure"}, 0},
		{"LOG_LEVEL", map[string]string{"DATABASE_URL": "x", "LOG_LEVEL": "loud"}, 0},
		{"AWS_LAMBDA_LOG_LEVEL", map[string]string{"DATABASE_URL": "x", "AWS_LAMBDA_LOG_LEVEL": "verbose"}, 0},
		{"PUSH_CONCURRENCY", map[string]string{"DATABASE_URL": "x", "PUSH_CONCURRENCY": "many"}, 0},
		{"DISPATCH_MAX_IN_FLIGHT", map[string]string{"DATABASE_URL": "x", "DISPATCH_MAX_IN_FLIGHT": "-1"}, 0},
		{"CONNECTION_MAX_IN_FLIGHT", map[string]string{"DATABASE_URL": "x", "CONNECTION_MAX_IN_FLIGHT": "ten"}, 0},
		{"CIRCUIT_FAILURE_THRESHOLD", map[string]string{"DATABASE_URL": "x", "CIRCUIT_FAILURE_THRESHOLD": "1.5"}, 0},
		{"CIRCUIT_COOLDOWN", map[string]string{"DATABASE_URL": "x", "CIRCUIT_COOLDOWN": "a while"}, 0},
		{"CIRCUIT_COOLDOWN", map[string]string{"DATABASE_URL": "x", "CIRCUIT_COOLDOWN": "500ms"}, 0},
		{"CIRCUIT_COOLDOWN", map[string]string{"DATABASE_URL": "x", "CIRCUIT_COOLDOWN": "2h"}, 0},
		{"PUSH_BATCH_SIZE", map[string]string{"DATABASE_URL": "x", "PUSH_BATCH_SIZE": "0"}, 0},
		{"PUSH_MAXIMUM_CONCURRENCY", map[string]string{"DATABASE_URL": "x", "PUSH_MAXIMUM_CONCURRENCY": "x"}, 0},
		{"DATABASE_POOL_SIZE", map[string]string{"DATABASE_URL": "x", "DATABASE_POOL_SIZE": "four"}, 0},
		{"DATABASE_POOL_SIZE", map[string]string{"DATABASE_URL": "x", "DATABASE_POOL_SIZE": "0"}, 0},
	} {
		_, err := Load(env(tc.env), tc.need)
		if err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("env %v: error %v does not name %s", tc.env, err, tc.name)
		}
	}
}

// DATABASE_POOL_SIZE is the most connections one container opens: an
// integer from 1 to 100, 4 when unset or blank (the template's
// DatabasePoolSize default); anything else fails the start naming it, with
// the range it takes.
func TestDatabasePoolSize(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  int // 0: refused
	}{
		{"", 4},
		{"  ", 4},
		{"1", 1},
		{"4", 4},
		{" 12 ", 12},
		{"20", 20},
		{"100", 100},
		{"0", 0},
		{"-1", 0},
		{"101", 0},
		{"1.5", 0},
		{"four", 0},
		{"4 connections", 0},
	} {
		c, err := Load(env(map[string]string{"DATABASE_URL": "x", "DATABASE_POOL_SIZE": tc.value}), 0)
		if tc.want == 0 {
			if err == nil || !strings.Contains(err.Error(), "DATABASE_POOL_SIZE must be an integer from 1 to 100") ||
				!strings.Contains(err.Error(), strconv.Quote(strings.TrimSpace(tc.value))) {
				t.Errorf("DATABASE_POOL_SIZE=%q: error %v, want one naming the variable, its range and the value", tc.value, err)
			}
			continue
		}
		if err != nil || c.DatabasePoolSize != tc.want {
			t.Errorf("DATABASE_POOL_SIZE=%q: got %d, %v; want %d", tc.value, c.DatabasePoolSize, err, tc.want)
		}
	}
	if DefaultDatabasePoolSize != 4 {
		t.Errorf("DefaultDatabasePoolSize = %d, want 4 (the template's DatabasePoolSize default)", DefaultDatabasePoolSize)
	}
}

// Lambda sets AWS_LAMBDA_LOG_LEVEL from LoggingConfig.ApplicationLogLevel
// (upper case, TRACE to FATAL); it wins over LOG_LEVEL, which remains the
// setting outside Lambda's log controls (sam local, operator tools).
func TestLambdaLogLevelWinsOverLogLevel(t *testing.T) {
	for _, tc := range []struct {
		lambda, logLevel string
		want             slog.Level
	}{
		{"", "", slog.LevelInfo},
		{"", "debug", slog.LevelDebug},
		{"WARN", "debug", slog.LevelWarn},
		{"DEBUG", "error", slog.LevelDebug},
		{"TRACE", "", slog.LevelDebug - 4},
		{"INFO", "", slog.LevelInfo},
		{"ERROR", "", slog.LevelError},
		{"FATAL", "", slog.LevelError + 4},
		{"warn", "", slog.LevelWarn},
	} {
		c, err := Load(env(map[string]string{"DATABASE_URL": "x", "AWS_LAMBDA_LOG_LEVEL": tc.lambda, "LOG_LEVEL": tc.logLevel}), 0)
		if err != nil || c.LogLevel != tc.want {
			t.Errorf("AWS_LAMBDA_LOG_LEVEL=%q LOG_LEVEL=%q: got %v, %v; want %v", tc.lambda, tc.logLevel, c.LogLevel, err, tc.want)
		}
	}
}

func TestOverloadVariables(t *testing.T) {
	// DISPATCH_MAX_IN_FLIGHT derives from the push side unless set; 0 turns
	// a cap off; CIRCUIT_COOLDOWN reads like PROVIDER_TIMEOUT.
	c, err := Load(env(map[string]string{"DATABASE_URL": "x", "PUSH_BATCH_SIZE": "10", "PUSH_MAXIMUM_CONCURRENCY": "2",
		"CONNECTION_MAX_IN_FLIGHT": "0", "CIRCUIT_FAILURE_THRESHOLD": "3", "CIRCUIT_COOLDOWN": "90"}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.DispatchMaxInFlight != 40 || c.ConnectionMaxInFlight != 0 || c.CircuitFailureThreshold != 3 || c.CircuitCooldown != 90*time.Second {
		t.Errorf("unexpected %+v", c)
	}
	c, err = Load(env(map[string]string{"DATABASE_URL": "x", "DISPATCH_MAX_IN_FLIGHT": "0", "CIRCUIT_COOLDOWN": "2m30s"}), 0)
	if err != nil || c.DispatchMaxInFlight != 0 || c.CircuitCooldown != 150*time.Second {
		t.Errorf("explicit values: %+v, %v", c, err)
	}
}

// The connection health durations take a Go duration or seconds, down to
// 1s; CONNECTION_DISABLE_AFTER 0 is never; shorter than a second is refused
// naming the variable.
func TestConnectionHealthDurations(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want [3]time.Duration // failing after, disable after, min span
		bad  string
	}{
		{env: map[string]string{"CONNECTION_FAILING_AFTER": "1", "CONNECTION_DISABLE_AFTER": "1s", "CONNECTION_DISABLE_MIN_SPAN": "1"},
			want: [3]time.Duration{time.Second, time.Second, time.Second}},
		{env: map[string]string{"CONNECTION_FAILING_AFTER": "90m", "CONNECTION_DISABLE_AFTER": "0", "CONNECTION_DISABLE_MIN_SPAN": "0"},
			want: [3]time.Duration{90 * time.Minute, 0, 0}},
		{env: map[string]string{"CONNECTION_DISABLE_AFTER": "432000"}, // 120h in seconds
			want: [3]time.Duration{time.Hour, 120 * time.Hour, 12 * time.Hour}},
		{env: map[string]string{"CONNECTION_FAILING_AFTER": "0"}, bad: "CONNECTION_FAILING_AFTER"},
		{env: map[string]string{"CONNECTION_FAILING_AFTER": "500ms"}, bad: "CONNECTION_FAILING_AFTER"},
		{env: map[string]string{"CONNECTION_DISABLE_AFTER": "999ms"}, bad: "CONNECTION_DISABLE_AFTER"},
		{env: map[string]string{"CONNECTION_DISABLE_AFTER": "five days"}, bad: "CONNECTION_DISABLE_AFTER"},
		{env: map[string]string{"CONNECTION_DISABLE_MIN_SPAN": "10ms"}, bad: "CONNECTION_DISABLE_MIN_SPAN"},
		{env: map[string]string{"COMMAND_FAILING_AFTER_ATTEMPTS": "0"}, bad: "COMMAND_FAILING_AFTER_ATTEMPTS"},
	} {
		tc.env["DATABASE_URL"] = "x"
		c, err := Load(env(tc.env), 0)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("%v: error %v, want one naming %s", tc.env, err, tc.bad)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.env, err)
			continue
		}
		if got := [3]time.Duration{c.ConnectionFailingAfter, c.ConnectionDisableAfter, c.ConnectionDisableMinSpan}; got != tc.want {
			t.Errorf("%v: got %v, want %v", tc.env, got, tc.want)
		}
	}
}
