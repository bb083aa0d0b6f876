package provider

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A token endpoint on loopback is refused unless private networks are
// allowed, at connect time.
func TestGuardedHTTPClient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"access_token":"at"}`))
	}))
	defer srv.Close()

	guarded := GuardedHTTPClient(false, 5*time.Second)
	defer guarded.CloseIdleConnections()
	_, err := guarded.Post(srv.URL+"/token", "application/x-www-form-urlencoded", nil)
	var refused *nonPublicAddressError
	if !errors.As(err, &refused) {
		t.Fatalf("loopback token URL: err = %v, want a refused non-public address", err)
	}

	open := GuardedHTTPClient(true, 5*time.Second)
	defer open.CloseIdleConnections()
	resp, err := open.Post(srv.URL+"/token", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatalf("with private networks allowed: %v", err)
	}
	resp.Body.Close()
}
