package appbase

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

func TestAWSConfigFromEnvironment(t *testing.T) {
	env := map[string]string{"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s3cret",
		"AWS_SESSION_TOKEN": "tok", "AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}
	cfg, err := awsConfig(func(k string) string { return env[k] }, true)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(t.Context())
	if err != nil || cfg.Region != "eu-west-1" || *cfg.BaseEndpoint != "http://127.0.0.1:5000" ||
		creds.AccessKeyID != "AKIA" || creds.SecretAccessKey != "s3cret" || creds.SessionToken != "tok" {
		t.Errorf("config %+v creds %+v err %v", cfg, creds, err)
	}
	if _, err := awsConfig(func(string) string { return "" }, true); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Errorf("missing region: %v", err)
	}
	if cfg, err := awsConfig(func(string) string { return "" }, false); err != nil || cfg.Region != "" {
		t.Errorf("region not required: %v", err)
	}
	cfg, _ = awsConfig(func(k string) string { return map[string]string{"AWS_DEFAULT_REGION": "us-west-2"}[k] }, true)
	if _, err := cfg.Credentials.Retrieve(t.Context()); cfg.Region != "us-west-2" || err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Errorf("no credentials: region %q err %v", cfg.Region, err)
	}
}
