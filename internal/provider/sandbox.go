package provider

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"integration-outbox/internal/credential"
)

// Sandbox limits, so that a typo in a demo config cannot park a worker.
const (
	maxSandboxLatency    = time.Minute
	maxSandboxRetryAfter = time.Hour
)

// Sandbox answers (config_json "answer").
const (
	sandboxCompleted = "completed"
	sandboxAccepted  = "accepted"
	sandboxUncertain = "uncertain"
	sandboxReject    = "reject"
	sandboxRetry     = "retry"
)

// SandboxConfig configures the sandbox provider.
type SandboxConfig struct {
	// Sleep waits d or until ctx is done, returning ctx.Err() in the latter
	// case; default a timer. Tests pass a fake.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Sandbox is the "sandbox" provider for demos and load tests. It talks to
// nothing outside the process; its behaviour comes from the connection's
// config_json, every key optional:
//
//	{
//	  "latencyMs": 0,          // wait before answering (≤ 60000), honouring ctx
//	  "failureRate": 0,        // 0..1: share of idempotency keys that fail as Retryable
//	  "answer": "completed",   // completed | accepted | uncertain | reject | retry
//	  "retryAfterSeconds": 0,  // RetryAfter of retryable answers (≤ 3600)
//	  "maxInFlight": 10        // the connection's in-flight limit: read by the claim, ignored here
//	}
//
// Whether a key fails is a hash of the key, so a rerun of the same key
// fails again (change failureRate to let it through). Keys are
// case-sensitive and unknown keys are an error naming them.
// The sandbox implements every capability it has for every connection.
type Sandbox struct {
	sleep func(ctx context.Context, d time.Duration) error
	// configs caches parsed config_json by its text: a load test sends
	// thousands of commands through a handful of connections.
	configs sync.Map // string → sandboxConfig
}

// NewSandbox returns a sandbox provider.
func NewSandbox(cfg SandboxConfig) *Sandbox {
	if cfg.Sleep == nil {
		cfg.Sleep = sleepContext
	}
	return &Sandbox{sleep: cfg.Sleep}
}

// Name is "sandbox".
func (s *Sandbox) Name() string { return NameSandbox }

// PushPurchaseOrder answers as conn.Config says, after its latency.
func (s *Sandbox) PushPurchaseOrder(ctx context.Context, conn Connection, _ credential.Credential, cmd PurchaseOrderPush) (Result, error) {
	cfg, err := s.config(conn.Config)
	if err != nil {
		return Result{}, err
	}
	if cmd.ExternalSupplierID == "" {
		return Result{}, &Error{Kind: PayloadInvalid, Message: "payload_json.externalSupplierId: missing or empty"}
	}
	if cmd.IdempotencyKey == "" {
		return Result{}, &Error{Kind: PayloadInvalid, Message: "idempotency_key: missing or empty"}
	}
	return s.answer(ctx, cfg, cmd.IdempotencyKey, "")
}

// PushSupplier answers as conn.Config says, after its latency, like
// PushPurchaseOrder. A completed push of a supplier without a document
// creates one, "sandbox-" and a hash of the key; with one (cmd.Document) it
// updates that one and keeps its id.
func (s *Sandbox) PushSupplier(ctx context.Context, conn Connection, _ credential.Credential, cmd SupplierPush) (Result, error) {
	cfg, err := s.config(conn.Config)
	if err != nil {
		return Result{}, err
	}
	if cmd.Supplier.Name == "" {
		return Result{}, &Error{Kind: PayloadInvalid, Message: "payload_json.name: missing or empty"}
	}
	if cmd.IdempotencyKey == "" {
		return Result{}, &Error{Kind: PayloadInvalid, Message: "idempotency_key: missing or empty"}
	}
	existing := ""
	if cmd.Document != nil {
		existing = cmd.Document.ID
	}
	res, err := s.answer(ctx, cfg, cmd.IdempotencyKey, existing)
	if err != nil || res.Status != StatusCompleted {
		return res, err
	}
	res.Document, res.Action = &Document{ID: res.ExternalID}, SupplierCreated
	if existing != "" {
		res.Action = SupplierUpdated
	}
	return res, nil
}

// answer waits the configured latency and answers as cfg says for key; the
// id is existing when set, else derived from key.
func (s *Sandbox) answer(ctx context.Context, cfg sandboxConfig, key, existing string) (Result, error) {
	if cfg.Latency > 0 {
		if err := s.sleep(ctx, cfg.Latency); err != nil {
			return Result{}, &Error{Kind: Retryable, Message: "sandbox: call cut short", Err: err}
		}
	}

	sum := sha256.Sum256([]byte(key))
	if keyFraction(sum) < cfg.FailureRate {
		return Result{}, &Error{Kind: Retryable, RetryAfter: cfg.RetryAfter,
			Message: fmt.Sprintf("sandbox: simulated failure (failureRate %g)", cfg.FailureRate)}
	}
	id := existing
	if id == "" {
		id = "sandbox-" + hex.EncodeToString(sum[:])[:12]
	}
	switch cfg.Answer {
	case sandboxAccepted:
		return Result{Status: StatusAccepted, ExternalID: id}, nil
	case sandboxUncertain:
		return Result{Status: StatusUncertain, ExternalID: id}, nil
	case sandboxReject:
		return Result{}, &Error{Kind: Rejected, Message: "sandbox: rejected (answer \"reject\")"}
	case sandboxRetry:
		return Result{}, &Error{Kind: Retryable, RetryAfter: cfg.RetryAfter,
			Message: "sandbox: try again later (answer \"retry\")"}
	}
	return Result{Status: StatusCompleted, ExternalID: id}, nil
}

// config parses raw once per distinct text; invalid configs are not cached.
func (s *Sandbox) config(raw json.RawMessage) (sandboxConfig, error) {
	if c, ok := s.configs.Load(string(raw)); ok {
		return c.(sandboxConfig), nil
	}
	c, err := parseSandboxConfig(raw)
	if err == nil {
		s.configs.Store(string(raw), c)
	}
	return c, err
}

// keyFraction maps a hash to [0, 1) uniformly.
func keyFraction(sum [sha256.Size]byte) float64 {
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// sandboxConfig is a parsed sandbox config_json.
type sandboxConfig struct {
	Latency     time.Duration
	FailureRate float64
	Answer      string
	RetryAfter  time.Duration
}

// parseSandboxConfig reads the sandbox's config_json (see Sandbox). An empty
// or null config means the defaults.
func parseSandboxConfig(raw json.RawMessage) (sandboxConfig, error) {
	cfg := sandboxConfig{Answer: sandboxCompleted}
	if len(raw) == 0 {
		return cfg, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return cfg, &Error{Kind: ConfigInvalid, Message: "config_json is not a JSON object"}
	}
	invalid := func(key, want string) error {
		return &Error{Kind: ConfigInvalid, Message: fmt.Sprintf("config_json.%s: must be %s", key, want)}
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same key first on every run
	for _, key := range keys {
		v := fields[key]
		if string(v) == "null" {
			continue
		}
		switch key {
		case "maxInFlight":
			// The connection's in-flight limit: read by the claim, not here.
		case "latencyMs":
			var ms int64
			if json.Unmarshal(v, &ms) != nil || ms < 0 || ms > maxSandboxLatency.Milliseconds() {
				return cfg, invalid(key, fmt.Sprintf("an integer from 0 to %d", maxSandboxLatency.Milliseconds()))
			}
			cfg.Latency = time.Duration(ms) * time.Millisecond
		case "failureRate":
			var r float64
			if json.Unmarshal(v, &r) != nil || math.IsNaN(r) || r < 0 || r > 1 {
				return cfg, invalid(key, "a number from 0 to 1")
			}
			cfg.FailureRate = r
		case "answer":
			var a string
			if json.Unmarshal(v, &a) != nil {
				return cfg, invalid(key, `one of "completed", "accepted", "uncertain", "reject", "retry"`)
			}
			switch a {
			case sandboxCompleted, sandboxAccepted, sandboxUncertain, sandboxReject, sandboxRetry:
				cfg.Answer = a
			default:
				return cfg, invalid(key, `one of "completed", "accepted", "uncertain", "reject", "retry"`)
			}
		case "retryAfterSeconds":
			var secs int64
			if json.Unmarshal(v, &secs) != nil || secs < 0 || secs > int64(maxSandboxRetryAfter/time.Second) {
				return cfg, invalid(key, fmt.Sprintf("an integer from 0 to %d", int64(maxSandboxRetryAfter/time.Second)))
			}
			cfg.RetryAfter = time.Duration(secs) * time.Second
		default:
			return cfg, &Error{Kind: ConfigInvalid, Message: fmt.Sprintf("config_json.%.64q: unknown key", key)}
		}
	}
	return cfg, nil
}

// sleepContext waits d or until ctx is done.
func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sandbox latency: %w", ctx.Err())
	}
}
