package health_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"integration-outbox/internal/health"
	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/events.golden.json")

var (
	uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	timeRE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)
)

// The detail of each event type, as published, against
// testdata/events.golden.json (docs/events.md documents it): uuids and
// timestamps are replaced by <uuid> and <time> after their format is
// checked; everything else is compared as is.
func TestEventDetailsMatchTheGoldenFile(t *testing.T) {
	t.Parallel()
	w := newWorld(t, outbox.Health{Events: true, FailingAfter: time.Second, DisableAfter: time.Second,
		DisableMinSpan: time.Second, CommandFailingAfterAttempts: 1})
	ctx := context.Background()
	w.f.Command(t, testenv.CommandOpts{OrganizationID: w.org, ConnectionID: w.conn, EntityID: w.f.NewID(t),
		CreatedAt: time.Now().Add(-time.Hour)})
	w.attempt(t, 1, false) // Command Failing
	w.age(t, time.Minute)
	w.attempt(t, 1, false) // Connection Disabled
	if _, err := health.Enable(ctx, w.f.Pool, w.org, w.conn); err != nil {
		t.Fatal(err)
	}
	w.attempt(t, 1, true) // Connection Recovered
	w.f.Command(t, testenv.CommandOpts{OrganizationID: w.org, ConnectionID: w.conn, EntityID: w.f.NewID(t), AttemptCount: 10})
	if _, err := w.store.DeadLetterExpired(ctx, outbox.ClaimParams{MaxAttempts: 10}); err != nil { // Command Dead-Lettered
		t.Fatal(err)
	}
	if _, err := health.MarkUnauthorized(ctx, w.f.Pool, health.Unauthorized{OrganizationID: w.org, ConnectionID: w.conn,
		Reason: "invalid_grant: the refresh token was revoked", Events: true}); err != nil {
		t.Fatal(err)
	}

	got := map[string]map[string]any{}
	for typ, ds := range w.publish(t) {
		if len(ds) != 1 {
			t.Fatalf("%d %s events, want 1", len(ds), typ)
		}
		got[typ] = normalize(t, ds[0])
	}
	path := filepath.Join("testdata", "events.golden.json")
	b := indent(t, got)
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var wantDoc map[string]map[string]any
	if err := json.Unmarshal(want, &wantDoc); err != nil {
		t.Fatal(err)
	}
	if wb := indent(t, wantDoc); string(wb) != string(b) {
		t.Errorf("event details differ from %s (go test -run %s -update rewrites it):\n%s", path, t.Name(), b)
	}
}

// normalize replaces uuids and timestamps, checking their format.
func normalize(t *testing.T, d map[string]any) map[string]any {
	t.Helper()
	out := map[string]any{}
	for k, v := range d {
		s, ok := v.(string)
		switch {
		case ok && uuidRE.MatchString(s):
			out[k] = "<uuid>"
		case ok && timeRE.MatchString(s):
			out[k] = "<time>"
		case k == "occurredAt" || k == "failingSince" || k == "eventId":
			t.Errorf("%s %q is not in its format", k, s)
		default:
			out[k] = v
		}
	}
	return out
}

// indent is v as indented JSON, < and > left as they are.
func indent(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
