package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	for _, tc := range []struct {
		attempts   int
		retryAfter time.Duration
		jitter     float64
		want       time.Duration
	}{
		{0, 0, 0, 30 * time.Second},
		{1, 0, 0, 30 * time.Second},
		{2, 0, 0, 60 * time.Second},
		{3, 0, 0, 120 * time.Second},
		{7, 0, 0, 1920 * time.Second},
		{8, 0, 0, time.Hour},
		{10, 0, 0, time.Hour},
		{1000, 0, 0, time.Hour},
		{1, 0, 0.999999, 30*time.Second + 2999997*time.Microsecond},
		{10, 0, 1, time.Hour + 6*time.Minute},
		{1, 0, 5, 33 * time.Second},  // jitter clamped to +10%
		{1, 0, -1, 30 * time.Second}, // jitter never subtracts
		{1, 120 * time.Second, 0, 120 * time.Second},
		{3, 10 * time.Second, 0, 120 * time.Second}, // Retry-After never shortens
	} {
		if got := Delay(tc.attempts, tc.retryAfter, tc.jitter); got != tc.want {
			t.Errorf("Delay(%d, %v, %v) = %v, want %v", tc.attempts, tc.retryAfter, tc.jitter, got, tc.want)
		}
	}
}

func TestJitterIsInRange(t *testing.T) {
	for range 1000 {
		if j := Jitter(); j < 0 || j >= 1 {
			t.Fatalf("jitter %v out of [0,1)", j)
		}
	}
}
