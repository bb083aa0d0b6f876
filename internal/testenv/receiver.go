package testenv

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Receiver is a local webhook endpoint (an httptest server on 127.0.0.1):
// it records every request it gets and answers as its Answer says. It is
// closed when the test ends.
type Receiver struct {
	*httptest.Server

	answer   Answer
	mu       sync.Mutex
	requests []Request
}

// Request is one request a Receiver got.
type Request struct {
	Method string
	URI    string // path and query
	Header http.Header
	Raw    []byte         // the body as sent
	Body   map[string]any // the body decoded as a JSON object; nil when it is not one
}

// Answer writes the reply to the n-th request, counting from 1 (requests
// may arrive concurrently).
type Answer func(n int, w http.ResponseWriter, r *http.Request)

// Reply answers every request with status and body.
func Reply(status int, body string) Answer {
	return ReplyWithHeader(status, nil, body)
}

// ReplyWithHeader answers every request with status, the header fields and
// body.
func ReplyWithHeader(status int, header map[string]string, body string) Answer {
	return func(_ int, w http.ResponseWriter, _ *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// NewReceiver starts a Receiver answering with answer.
func NewReceiver(t testing.TB, answer Answer) *Receiver {
	t.Helper()
	rc := &Receiver{answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if json.Unmarshal(raw, &body) != nil {
		body = nil
	}
	rc.mu.Lock()
	rc.requests = append(rc.requests, Request{Method: r.Method, URI: r.URL.RequestURI(), Header: r.Header.Clone(), Raw: raw, Body: body})
	n := len(rc.requests)
	rc.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(raw)) // the answer may read it too
	rc.answer(n, w, r)
}

// Calls is how many requests the Receiver got.
func (rc *Receiver) Calls() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.requests)
}

// Requests returns the requests received so far, in arrival order.
func (rc *Receiver) Requests() []Request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Request(nil), rc.requests...)
}

// Keys returns the Idempotency-Key header of every request, in arrival
// order.
func (rc *Receiver) Keys() []string {
	var keys []string
	for _, r := range rc.Requests() {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
	}
	return keys
}
