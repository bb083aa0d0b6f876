package provider

import (
	"net"
	"net/http"
	"time"
)

// newGuardedClient returns the http.Client every HTTP provider uses: no
// proxy from the environment, no redirects followed and, unless
// allowPrivate (WEBHOOK_ALLOW_PRIVATE_NETWORKS), every target address that
// is not public refused at connect time (see isPublicAddr). resolver looks
// host names up; nil means the system resolver.
func newGuardedClient(timeout time.Duration, allowPrivate bool, resolver *net.Resolver) *http.Client {
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Resolver: resolver}
	if !allowPrivate {
		// Control runs on the resolved address of every connection attempt,
		// before connect(2): DNS answers (rebinding included) cannot route
		// around it, and no packet reaches a refused address.
		dialer.Control = refuseNonPublic
	}
	transport := &http.Transport{
		Proxy:                 nil, // never a proxy from the environment: it would bypass the guard
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport: transport,
		// A redirect could lead to a target the config never named; the
		// 3xx is answered as a rejection instead.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
