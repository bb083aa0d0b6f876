package config

import (
	"strings"
	"testing"
	"time"
)

func TestRetentionAgeIsOffUnlessSet(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "720h": 720 * time.Hour, "86400": 24 * time.Hour, "1h": time.Hour} {
		c, err := Load(env(map[string]string{"DATABASE_URL": "x", "RETENTION_AGE": v}), 0)
		if err != nil || c.RetentionAge != want {
			t.Errorf("RETENTION_AGE=%q: %v, %v; want %v", v, c.RetentionAge, err, want)
		}
	}
	for _, v := range []string{"30m", "59", "ten days", "-1h"} {
		_, err := Load(env(map[string]string{"DATABASE_URL": "x", "RETENTION_AGE": v}), 0)
		if err == nil || !strings.Contains(err.Error(), "RETENTION_AGE") {
			t.Errorf("RETENTION_AGE=%q: error %v, want one naming RETENTION_AGE", v, err)
		}
	}
}
