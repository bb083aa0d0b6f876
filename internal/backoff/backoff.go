// Package backoff computes when a failed delivery is tried again.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Base and Cap bound the exponential delay: min(Cap, Base·2^(attempts−1)).
const (
	Base = 30 * time.Second
	Cap  = time.Hour
)

// Delay returns the wait before the next attempt after the given number of
// attempts (attempt_count after the claim that failed). jitter is in [0, 1)
// and may only add, at most 10%. A provider's Retry-After lengthens the
// delay, never shortens it.
func Delay(attempts int, retryAfter time.Duration, jitter float64) time.Duration {
	d := Cap
	if attempts <= 1 {
		d = Base
	} else if attempts-1 < 7 { // 30s·2^7 > 1h: no overflow past that
		d = min(Cap, Base<<(attempts-1))
	}
	jitter = max(0, min(jitter, 1))
	d += time.Duration(float64(d) * 0.1 * jitter)
	return max(d, retryAfter)
}

// Jitter returns a random jitter for Delay.
func Jitter() float64 { return rand.Float64() }
