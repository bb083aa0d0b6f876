package provider

// These tests verify the webhook's signature headers with the receivers'
// own reference verifiers: the Standard Webhooks library for Go and
// Stripe's verifier for X-Outbox-Signature. Both are test-only
// dependencies; TestReferenceVerifiersStayOutOfBootstraps in docs/ proves
// that no function imports them.

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	stripewebhook "github.com/stripe/stripe-go/v83/webhook"

	"integration-outbox/internal/credential"
)

// The secrets of the rotation tests. whsecNew is "whsec_" + base64 of 24
// random bytes, the form Standard Webhooks issues.
const (
	whsecNew  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	plainOld  = "sig-SECRET-old-2024"
	plainMid  = "sig-SECRET-mid-2025"
	notOurKey = "whsec_c29tZW9uZSBlbHNlJ3Mga2V5IQ=="
)

// standardVerifier returns the reference verifier for secret, keyed as the
// specification says: the base64 key after "whsec_", else the UTF-8 bytes.
func standardVerifier(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	var (
		wh  *standardwebhooks.Webhook
		err error
	)
	if strings.HasPrefix(secret, "whsec_") {
		wh, err = standardwebhooks.NewWebhook(secret)
	} else {
		wh, err = standardwebhooks.NewWebhookRaw([]byte(secret))
	}
	if err != nil {
		t.Fatalf("standardwebhooks verifier: %v", err)
	}
	return wh
}

// pushAndCapture sends testCommand through a real webhook stamped by the
// real clock and returns the request the receiver saw.
func pushAndCapture(t *testing.T, cred credential.Credential) ([]byte, http.Header) {
	t.Helper()
	srv, seen := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true, Clock: time.Now})
	if _, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), cred, testCommand()); err != nil {
		t.Fatalf("PushPurchaseOrder: %v", err)
	}
	hits, _, body, header := seen.snapshot()
	if hits != 1 {
		t.Fatalf("server hits = %d, want 1", hits)
	}
	return body, header
}

func TestWebhookSignaturesVerifyWithReferenceVerifiers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cred credential.Credential
		keys []string // every secret a receiver may hold, newest first
	}{
		{"plain signing secret", credential.Credential{SigningSecret: credential.NewSecret(plainOld)}, []string{plainOld}},
		{"whsec signing secret", credential.Credential{SigningSecret: credential.NewSecret(whsecNew)}, []string{whsecNew}},
		{"rotation list", credential.Credential{
			SigningSecrets: []credential.Secret{credential.NewSecret(whsecNew), credential.NewSecret(plainMid)},
		}, []string{whsecNew, plainMid}},
		{"rotation list beside signing secret", credential.Credential{
			Token:          credential.NewSecret(testToken),
			SigningSecret:  credential.NewSecret(plainOld),
			SigningSecrets: []credential.Secret{credential.NewSecret(whsecNew), credential.NewSecret(plainMid), credential.NewSecret(plainOld)},
		}, []string{whsecNew, plainMid, plainOld}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, header := pushAndCapture(t, tt.cred)

			if got := header.Get("webhook-id"); got != testCommand().IdempotencyKey {
				t.Errorf("webhook-id = %q, want the idempotency key %q", got, testCommand().IdempotencyKey)
			}
			ts := header.Get("webhook-timestamp")
			if _, err := strconv.ParseInt(ts, 10, 64); err != nil {
				t.Fatalf("webhook-timestamp = %q, want unix seconds", ts)
			}
			outbox := header.Get("X-Outbox-Signature")
			if !strings.HasPrefix(outbox, "t="+ts+",") {
				t.Errorf("X-Outbox-Signature = %q, want the webhook-timestamp t=%s first", outbox, ts)
			}
			// One signature per secret, newest first, in both headers.
			if n := strings.Count(outbox, ",v1="); n != len(tt.keys) {
				t.Errorf("X-Outbox-Signature holds %d signatures, want %d: %s", n, len(tt.keys), outbox)
			}
			sigs := strings.Split(header.Get("webhook-signature"), " ")
			if len(sigs) != len(tt.keys) {
				t.Fatalf("webhook-signature holds %d signatures, want %d: %q", len(sigs), len(tt.keys), sigs)
			}
			for i, key := range tt.keys {
				wh := standardVerifier(t, key)
				if err := wh.Verify(body, header); err != nil {
					t.Errorf("standardwebhooks.Verify with secret %d: %v", i, err)
				}
				want, _ := wh.Sign(header.Get("webhook-id"), time.Unix(mustAtoi(t, ts), 0), body)
				if sigs[i] != want {
					t.Errorf("webhook-signature[%d] = %s, want %s (newest first)", i, sigs[i], want)
				}
				if err := stripewebhook.ValidatePayload(body, outbox, key); err != nil {
					t.Errorf("stripe ValidatePayload with secret %d: %v", i, err)
				}
			}

			// A receiver with another secret, or a tampered body, refuses.
			if err := standardVerifier(t, notOurKey).Verify(body, header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
				t.Errorf("standardwebhooks.Verify with a foreign secret = %v, want ErrNoMatchingSignature", err)
			}
			if err := stripewebhook.ValidatePayload(body, outbox, notOurKey); !errors.Is(err, stripewebhook.ErrNoValidSignature) {
				t.Errorf("stripe ValidatePayload with a foreign secret = %v, want ErrNoValidSignature", err)
			}
			tampered := []byte(strings.Replace(string(body), `"quantity":2`, `"quantity":20`, 1))
			if err := standardVerifier(t, tt.keys[0]).Verify(tampered, header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
				t.Errorf("standardwebhooks.Verify of a tampered body = %v, want ErrNoMatchingSignature", err)
			}
			if err := stripewebhook.ValidatePayload(tampered, outbox, tt.keys[0]); !errors.Is(err, stripewebhook.ErrNoValidSignature) {
				t.Errorf("stripe ValidatePayload of a tampered body = %v, want ErrNoValidSignature", err)
			}
		})
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestWebhookSignaturesAreStampedWithTheSendingTime(t *testing.T) {
	t.Parallel()
	srv, seen := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true}) // clock fixed at testNow
	cred := credential.Credential{SigningSecret: credential.NewSecret(whsecNew)}
	if _, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), cred, testCommand()); err != nil {
		t.Fatalf("PushPurchaseOrder: %v", err)
	}
	_, _, body, header := seen.snapshot()
	if got := header.Get("webhook-timestamp"); got != "1700000000" {
		t.Fatalf("webhook-timestamp = %q, want 1700000000", got)
	}
	// Long past: the verifiers' replay windows refuse it, and accept it
	// only when told to ignore the timestamp.
	wh := standardVerifier(t, whsecNew)
	if err := wh.Verify(body, header); !errors.Is(err, standardwebhooks.ErrMessageTooOld) {
		t.Errorf("standardwebhooks.Verify of an old call = %v, want ErrMessageTooOld", err)
	}
	if err := wh.VerifyIgnoringTimestamp(body, header); err != nil {
		t.Errorf("standardwebhooks.VerifyIgnoringTimestamp: %v", err)
	}
	outbox := header.Get("X-Outbox-Signature")
	if err := stripewebhook.ValidatePayloadWithTolerance(body, outbox, whsecNew, 5*time.Minute); !errors.Is(err, stripewebhook.ErrTooOld) {
		t.Errorf("stripe ValidatePayloadWithTolerance of an old call = %v, want ErrTooOld", err)
	}
	if err := stripewebhook.ValidatePayloadIgnoringTolerance(body, outbox, whsecNew); err != nil {
		t.Errorf("stripe ValidatePayloadIgnoringTolerance: %v", err)
	}
}

func TestWebhookWithoutSigningSecretSendsIDAndTimestampOnly(t *testing.T) {
	t.Parallel()
	_, header := pushAndCapture(t, credential.Credential{Token: credential.NewSecret(testToken)})
	if got := header.Get("webhook-id"); got != "idem-1" {
		t.Errorf("webhook-id = %q, want idem-1", got)
	}
	if header.Get("webhook-timestamp") == "" {
		t.Error("webhook-timestamp missing")
	}
	for _, name := range []string{"webhook-signature", "X-Outbox-Signature"} {
		if v, ok := header[http.CanonicalHeaderKey(name)]; ok {
			t.Errorf("%s = %q, want none without a signing secret", name, v)
		}
	}
}

func TestStandardWebhooksSignatureKnownAnswer(t *testing.T) {
	t.Parallel()
	// The vector of the Standard Webhooks reference library's own tests.
	key, err := credential.NewSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").StandardWebhooksKey()
	if err != nil {
		t.Fatal(err)
	}
	got := StandardWebhooksSignature([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("StandardWebhooksSignature = %s, want %s", got, want)
	}
	// Stripe's own signer agrees with X-Outbox-Signature, two secrets included.
	body := []byte(`{"a":1}`)
	ts := time.Unix(1614265330, 0)
	want := "t=1614265330"
	for _, secret := range []string{"new-secret", "old-secret"} {
		want += ",v1=" + hex.EncodeToString(stripewebhook.ComputeSignature(ts, body, secret))
	}
	if got := OutboxSignature([]string{"new-secret", "old-secret"}, ts, body); got != want {
		t.Errorf("OutboxSignature = %s, want %s", got, want)
	}
}

func TestWebhookRefusesAnUndecodableWhsecSecretBeforeSending(t *testing.T) {
	t.Parallel()
	srv, seen := testServer(t, false, nil)
	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})
	cred := credential.Credential{SigningSecrets: []credential.Secret{credential.NewSecret("whsec_SECRET-not-base64!")}}
	_, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), cred, testCommand())
	var perr *Error
	if !errors.As(err, &perr) || perr.Kind != ConfigInvalid {
		t.Fatalf("PushPurchaseOrder error = %v, want a ConfigInvalid *Error", err)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error %q quotes the secret", err)
	}
	if hits, _, _, _ := seen.snapshot(); hits != 0 {
		t.Errorf("server hits = %d, want 0", hits)
	}
}

func TestWebhookMasksEveryRotationSecretInErrorTexts(t *testing.T) {
	t.Parallel()
	encoded := strings.TrimPrefix(whsecNew, "whsec_")
	srv, _ := testServer(t, false, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte("bad keys: " + encoded + " / " + plainMid + " / " + whsecNew))
	})
	w := newTestWebhook(t, WebhookConfig{AllowPrivateNetworks: true})
	cred := credential.Credential{SigningSecrets: []credential.Secret{credential.NewSecret(whsecNew), credential.NewSecret(plainMid)}}
	_, err := w.PushPurchaseOrder(context.Background(), conn(srv.URL), cred, testCommand())
	if err == nil {
		t.Fatal("PushPurchaseOrder succeeded on a 400")
	}
	for _, secret := range []string{encoded, plainMid, "SECRET"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q holds a signing secret", err)
		}
	}
	if !strings.Contains(err.Error(), "bad keys: [redacted] / [redacted] / ") {
		t.Errorf("error %q does not show the masked quote", err)
	}
}
