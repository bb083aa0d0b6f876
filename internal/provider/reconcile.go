package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"integration-outbox/internal/credential"
)

// A create whose outcome is unknown (its answer was lost, or was a 5xx)
// may have made its document. The provider replays a repeated idempotency
// key for a while, so sending it again with the same key is safe within
// that while; past it, a second document would be made. So, once the
// connection's replay window (config_json.replayWindowSeconds) may have
// passed since the first such attempt, or when an operator reran the row,
// the accounting core looks the document up before it creates: found, the
// row completes with it (ActionReconciled); two or more found, a person
// decides (Duplicate); none, the create goes as usual.
// docs/reliability.md, "Exactly once in effect".

// DefaultReplayWindow is how long a provider is trusted to replay a
// repeated idempotency key when config_json.replayWindowSeconds is absent.
const DefaultReplayWindow = time.Hour

// maxReplayWindow bounds config_json.replayWindowSeconds: a week.
const maxReplayWindow = 7 * 24 * time.Hour

// replayWindow reads config_json.replayWindowSeconds: a whole number of
// seconds from 0 (always look up) to a week; DefaultReplayWindow when
// absent.
func replayWindow(fields map[string]json.RawMessage) (time.Duration, error) {
	raw, ok := fields["replayWindowSeconds"]
	if !ok || string(raw) == "null" {
		return DefaultReplayWindow, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || n < 0 || time.Duration(n)*time.Second > maxReplayWindow {
		return 0, configError("replayWindowSeconds", "must be a whole number of seconds from 0 (always look up) to %d (a week)",
			int64(maxReplayWindow/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// lookUpFirst reports whether a create must look its document up before
// it is sent: an earlier attempt's outcome is unknown, and the provider's
// replay of the key may have lapsed since (window 0: always), or an
// operator reran the row since.
func lookUpFirst(u *UnknownOutcome, window time.Duration, now time.Time) bool {
	switch {
	case u == nil:
		return false
	case u.Rerun, window == 0, u.Since.IsZero():
		return true
	}
	return now.Sub(u.Since) >= window
}

// unknownOutcome marks err, the failure of a create, as one whose
// outcome is unknown when it may have made the document: any retryable
// failure but a 429 (the provider did not take it).
func unknownOutcome(err error) error {
	var perr *Error
	if errors.As(err, &perr) && perr.Kind == Retryable && !perr.PauseConnection {
		perr.OutcomeUnknown = true
	}
	return err
}

// found is a document a look-up found, with what tells it apart in a
// message.
type found struct {
	Document
	label string
}

// reconciled is the answer of a look-up that found docs, the documents
// matching the create: one is the create's (completed, ActionReconciled);
// two or more is Duplicate; none is (Result{}, nil): create.
func reconciled(providerName, what string, status int, docs []found, cred credential.Credential) (Result, error) {
	switch len(docs) {
	case 0:
		return Result{}, nil
	case 1:
		return remembered(status, docs[0].ID, docs[0].SyncToken, ActionReconciled), nil
	}
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
		if d.label != "" {
			ids[i] += " (" + d.label + ")"
		}
	}
	return Result{}, redactError(&Error{Kind: Duplicate, StatusCode: status, Message: fmt.Sprintf(
		"%s holds %d purchase orders %s, and an earlier create of this one may have made any of them: %s; "+
			"keep the one that is this order's and void the others in %[1]s, then resolve the conflict "+
			"(a rerun would look them up again and stop here while more than one matches)",
		providerName, len(docs), what, strings.Join(ids, ", "))}, cred)
}

// callGate is waited on before each call a push makes beyond its first
// (WithCallGate).
type callGate func(ctx context.Context) error

type callGateKey struct{}

// WithCallGate returns ctx carrying gate: a provider waits on it before
// each call of a push beyond its first (a look-up's create, the next page
// of a look-up), so that those are paced like any call of the
// connection. An error of the gate ends the push with that error.
func WithCallGate(ctx context.Context, gate func(ctx context.Context) error) context.Context {
	return context.WithValue(ctx, callGateKey{}, callGate(gate))
}

// nextCall waits on ctx's call gate, if any.
func nextCall(ctx context.Context) error {
	if g, ok := ctx.Value(callGateKey{}).(callGate); ok && g != nil {
		return g(ctx)
	}
	return nil
}
