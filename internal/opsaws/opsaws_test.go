package opsaws

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// Named profiles work: the region and credentials come from the profile of
// AWS_PROFILE in the shared config files, as the AWS CLI reads them.
func TestNamedProfileFromSharedConfig(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "config")
	credFile := filepath.Join(dir, "credentials")
	os.WriteFile(cfgFile, []byte("[profile ops]\nregion = eu-central-1\n"), 0o600)
	os.WriteFile(credFile, []byte("[ops]\naws_access_key_id = AKIAOPS\naws_secret_access_key = opssecret\n"), 0o600)
	t.Setenv("AWS_CONFIG_FILE", cfgFile)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credFile)
	for _, k := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"} {
		t.Setenv(k, "")
	}
	cfg, err := Load(t.Context(), env(map[string]string{"AWS_PROFILE": "ops"}), true)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(t.Context())
	if err != nil || cfg.Region != "eu-central-1" || creds.AccessKeyID != "AKIAOPS" {
		t.Errorf("region %q creds %q err %v: want the ops profile's", cfg.Region, creds.AccessKeyID, err)
	}
}

// What the caller's environment says wins: the demo points the tools at its
// local stand-ins this way.
func TestCallerEnvironmentWins(t *testing.T) {
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	cfg, err := Load(t.Context(), env(map[string]string{"AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "AKIA",
		"AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "tok", "AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}), true)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(t.Context())
	if err != nil || cfg.Region != "us-west-2" || cfg.BaseEndpoint == nil || *cfg.BaseEndpoint != "http://127.0.0.1:5000" ||
		creds.AccessKeyID != "AKIA" || creds.SessionToken != "tok" {
		t.Errorf("config region %q endpoint %v creds %+v err %v", cfg.Region, cfg.BaseEndpoint, creds, err)
	}
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	if _, err := Load(t.Context(), env(nil), true); err == nil || !strings.Contains(err.Error(), "AWS_REGION") {
		t.Errorf("missing region: %v", err)
	}
}
