package app

import (
	"strings"
	"testing"
)

func TestDatabaseURL(t *testing.T) {
	full := rdsSecret{Username: "outbox", Password: "p@ss/word", Host: "db.example", Port: 5433, DBName: "backoffice"}
	for _, tc := range []struct {
		name     string
		secret   rdsSecret
		endpoint string
		want     string // prefix of the URL, or of the error with "error: "
	}{
		{"full secret", full, "", "postgres://outbox:p%40ss%2Fword@db.example:5433/backoffice?sslmode=require"},
		{"default port", rdsSecret{Username: "u", Password: "p", Host: "h", DBName: "d"}, "", "postgres://u:p@h:5432/d?sslmode=require"},
		{"managed master secret + endpoint", rdsSecret{Username: "u", Password: "Zq9-secret"}, "postgres://h:5432/d?sslmode=verify-full", "postgres://u:Zq9-secret@h:5432/d?sslmode=verify-full"},
		{"managed master secret alone", rdsSecret{Username: "u", Password: "Zq9-secret"}, "", "error: config: DATABASE_SECRET_ARN: the secret has no host"},
		{"endpoint with a password", full, "postgres://x:y@h/d", "error: config: DATABASE_URL: must not carry a password"},
		{"endpoint without host", full, "not a url", "error: config: DATABASE_URL"},
	} {
		got, err := databaseURL(tc.secret, tc.endpoint)
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), tc.secret.Password) && tc.secret.Password != "" {
			t.Errorf("%s: error leaks the password", tc.name)
		}
	}
}
