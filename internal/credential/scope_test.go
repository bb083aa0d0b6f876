package credential

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

const (
	testRegion    = "us-east-1"
	testAccount   = "123456789012" // moto's default account
	testARNPrefix = "arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/"
)

func mustScope(t testing.TB, prefix, region string) scope {
	t.Helper()
	s, err := parseScope(prefix, region)
	if err != nil {
		t.Fatalf("parseScope(%q, %q): %v", prefix, region, err)
	}
	return s
}

func TestScopeCheck(t *testing.T) {
	t.Parallel()
	plain := mustScope(t, "integrations/", testRegion)
	byARN := mustScope(t, testARNPrefix, testRegion)
	gov := mustScope(t, "integrations/", "us-gov-west-1")
	govARN := mustScope(t, "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:integrations/", "us-gov-west-1")
	cn := mustScope(t, "arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:integrations/", "cn-north-1")

	arn := func(partition, region, account, name string) string {
		return "arn:" + partition + ":secretsmanager:" + region + ":" + account + ":secret:" + name
	}
	tests := []struct {
		name      string
		scope     scope
		reference string
		wantErr   string // substring of the reason; "" = in scope
	}{
		{"name inside prefix", plain, "integrations/acme", ""},
		{"nested name", plain, "integrations/acme/webhook_1+=.@-x", ""},
		{"name equal to prefix", plain, "integrations/", ""},
		{"name outside prefix", plain, "other/acme", "outside CREDENTIAL_REFERENCE_PREFIX"},
		{"prefix is case-sensitive", plain, "Integrations/acme", "outside CREDENTIAL_REFERENCE_PREFIX"},
		{"name sharing the prefix's start only", plain, "integrationsX/acme", "outside CREDENTIAL_REFERENCE_PREFIX"},
		{"leading slash", plain, "/integrations/acme", "outside CREDENTIAL_REFERENCE_PREFIX"},
		{"ARN inside prefix", plain, arn("aws", testRegion, testAccount, "integrations/acme-AbCdEf"), ""},
		{"ARN of any account with a name prefix", plain, arn("aws", testRegion, "999999999999", "integrations/acme-AbCdEf"), ""},
		{"partial ARN without suffix", plain, arn("aws", testRegion, testAccount, "integrations/acme"), ""},
		{"ARN outside prefix", plain, arn("aws", testRegion, testAccount, "other/acme-AbCdEf"), "outside CREDENTIAL_REFERENCE_PREFIX"},
		{"ARN in another region", plain, arn("aws", "eu-west-1", testAccount, "integrations/acme-AbCdEf"), `region "eu-west-1"`},
		{"ARN of another service", plain, "arn:aws:s3:us-east-1:123456789012:secret:integrations/acme", "not of a Secrets Manager secret"},
		{"ARN of another resource type", plain, "arn:aws:secretsmanager:us-east-1:123456789012:parameter:integrations/acme", "not of a Secrets Manager secret"},
		{"SSM parameter ARN", plain, "arn:aws:ssm:us-east-1:123456789012:parameter/integrations/acme", "not an ARN of the form"},
		{"ARN with a bad account", plain, arn("aws", testRegion, "12345", "integrations/acme"), "invalid account"},
		{"ARN with an upper-case partition", plain, arn("AWS", testRegion, testAccount, "integrations/acme"), "unknown partition"},
		{"ARN with an empty partition", plain, arn("", testRegion, testAccount, "integrations/acme"), "unknown partition"},
		{"ARN with an empty region", plain, arn("aws", "", testAccount, "integrations/acme"), "invalid region"},
		{"ARN with an empty name", plain, arn("aws", testRegion, testAccount, ""), "empty secret name"},
		{"ARN with a colon in its name", plain, arn("aws", testRegion, testAccount, "integrations/acme:x"), `':'`},
		{"ARN prefix: plain name", byARN, "integrations/acme", ""},
		{"ARN prefix: ARN in its account", byARN, arn("aws", testRegion, testAccount, "integrations/acme-AbCdEf"), ""},
		{"ARN prefix: ARN in another account", byARN, arn("aws", testRegion, "999999999999", "integrations/acme-AbCdEf"), `account "999999999999"`},
		{"ARN prefix: ARN in another partition", byARN, arn("aws-cn", testRegion, testAccount, "integrations/acme-AbCdEf"), `partition "aws-cn"`},
		{"ARN prefix: ARN outside the name prefix", byARN, arn("aws", testRegion, testAccount, "other/acme-AbCdEf"), "outside CREDENTIAL_REFERENCE_PREFIX"},
		{"GovCloud ARN", gov, arn("aws-us-gov", "us-gov-west-1", testAccount, "integrations/acme-AbCdEf"), ""},
		{"GovCloud ARN prefix", govARN, arn("aws-us-gov", "us-gov-west-1", testAccount, "integrations/acme-AbCdEf"), ""},
		{"GovCloud ARN prefix, commercial ARN", govARN, arn("aws", "us-gov-west-1", testAccount, "integrations/acme-AbCdEf"), `partition "aws"`},
		{"China ARN prefix", cn, arn("aws-cn", "cn-north-1", testAccount, "integrations/acme-AbCdEf"), ""},
		{"China ARN from a GovCloud function", gov, arn("aws-cn", "cn-north-1", testAccount, "integrations/acme-AbCdEf"), `region "cn-north-1"`},
		{"empty", plain, "", "is empty"},
		{"traversal", plain, "integrations/../admin", `".."`},
		{"traversal at the end", plain, "integrations/acme/..", `".."`},
		{"traversal in an ARN", plain, arn("aws", testRegion, testAccount, "integrations/../x"), `".."`},
		{"encoded traversal", plain, "integrations/%2e%2e/admin", `'%'`},
		{"space", plain, "integrations/ac me", "whitespace or control"},
		{"leading space", plain, " integrations/acme", "whitespace or control"},
		{"trailing newline", plain, "integrations/acme\n", "whitespace or control"},
		{"tab", plain, "integrations/\tacme", "whitespace or control"},
		{"NUL", plain, "integrations/acme\x00", "whitespace or control"},
		{"DEL", plain, "integrations/acme\x7f", "whitespace or control"},
		{"non-breaking space", plain, "integrations/\u00a0acme", "whitespace or control"},
		{"invalid UTF-8", plain, "integrations/\xffacme", "not valid UTF-8"},
		{"non-ASCII letter", plain, "integrations/äcme", `'ä'`},
		{"colon in a name", plain, "integrations/acme:x", `':'`},
		{"backslash", plain, `integrations\acme`, `'\\'`},
		{"name too long", plain, "integrations/" + strings.Repeat("a", 600), "longer than 512"},
		{"reference too long", plain, "integrations/" + strings.Repeat("a", 3000), "longer than 2048"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.scope.check(tt.reference)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("check(%q) = %v, want in scope", tt.reference, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("check(%q) = nil, want error containing %q", tt.reference, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("check(%q) = %q, want it to contain %q", tt.reference, err, tt.wantErr)
			}
			wrapped := rejected(tt.reference, err)
			if !errors.Is(wrapped, ErrRejected) || !strings.Contains(wrapped.Error(), "credential_reference") {
				t.Fatalf("rejected(...) = %v, want ErrRejected naming credential_reference", wrapped)
			}
		})
	}
}

func TestParseScope(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, prefix, region string
		wantErr              string // "" = valid
		wantPrefix           string
	}{
		{"default prefix", "", testRegion, "", DefaultPrefix},
		{"name prefix", "tenants/creds-", testRegion, "", "tenants/creds-"},
		{"ARN prefix", testARNPrefix, testRegion, "", "integrations/"},
		{"missing region", "integrations/", "", "AWS_REGION", ""},
		{"malformed region", "integrations/", "US East", "AWS_REGION", ""},
		{"ARN prefix in another region", "arn:aws:secretsmanager:eu-west-1:123456789012:secret:integrations/", testRegion, "CREDENTIAL_REFERENCE_PREFIX", ""},
		{"ARN prefix without a name", "arn:aws:secretsmanager:us-east-1:123456789012:secret:", testRegion, "CREDENTIAL_REFERENCE_PREFIX", ""},
		{"ARN prefix with a bad account", "arn:aws:secretsmanager:us-east-1:1234:secret:integrations/", testRegion, "CREDENTIAL_REFERENCE_PREFIX", ""},
		{"truncated ARN prefix", "arn:aws:secretsmanager:us-east-1:123456789012:secret", testRegion, "CREDENTIAL_REFERENCE_PREFIX", ""},
		{"traversal", "integrations/../", testRegion, "CREDENTIAL_REFERENCE_PREFIX", ""},
		{"whitespace", "integ rations/", testRegion, "CREDENTIAL_REFERENCE_PREFIX", ""},
		{"colon", "integrations:x/", testRegion, "CREDENTIAL_REFERENCE_PREFIX", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := parseScope(tt.prefix, tt.region)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("parseScope: %v", err)
				}
				if s.namePrefix != tt.wantPrefix {
					t.Fatalf("name prefix = %q, want %q", s.namePrefix, tt.wantPrefix)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("parseScope(%q, %q) = %v, want an error naming %s", tt.prefix, tt.region, err, tt.wantErr)
			}
		})
	}
}

func TestNewResolverNamesBadPrefix(t *testing.T) {
	t.Parallel()
	_, err := NewResolver(&fakeAPI{}, ResolverConfig{Prefix: "in tegrations/", Region: testRegion})
	if err == nil || !strings.Contains(err.Error(), "CREDENTIAL_REFERENCE_PREFIX") {
		t.Fatalf("NewResolver = %v, want an error naming CREDENTIAL_REFERENCE_PREFIX", err)
	}
}

func FuzzScopeCheck(f *testing.F) {
	for _, seed := range []string{
		"integrations/acme",
		"other/acme",
		"",
		"integrations/../x",
		"integrations/a b",
		testARNPrefix + "acme-AbCdEf",
		"arn:aws:secretsmanager:eu-west-1:123456789012:secret:integrations/acme",
		"arn:aws-us-gov:secretsmanager:us-east-1:999999999999:secret:integrations/x",
		"arn:aws:secretsmanager:us-east-1:123456789012:secret:integrations/a:b",
		"arn:::::::",
		"integrations/\xff",
	} {
		f.Add(seed)
	}
	plain := mustScope(f, "integrations/", testRegion)
	byARN := mustScope(f, testARNPrefix, testRegion)
	f.Fuzz(func(t *testing.T, reference string) {
		for _, s := range []scope{plain, byARN} {
			err := s.check(reference)
			if err != nil {
				if e := rejected(reference, err); !errors.Is(e, ErrRejected) {
					t.Fatalf("rejected(%q) does not wrap ErrRejected", reference)
				}
				continue
			}
			if !utf8.ValidString(reference) || strings.Contains(reference, "..") ||
				strings.IndexFunc(reference, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
				t.Fatalf("check accepted %q", reference)
			}
			name := reference
			if strings.HasPrefix(reference, "arn:") {
				parts := strings.SplitN(reference, ":", 7)
				if parts[3] != testRegion || parts[2] != "secretsmanager" || parts[5] != "secret" {
					t.Fatalf("check accepted ARN %q outside region or service", reference)
				}
				if s.account != "" && (parts[4] != testAccount || parts[1] != "aws") {
					t.Fatalf("check accepted ARN %q outside the prefix's account", reference)
				}
				name = parts[6]
			}
			if !strings.HasPrefix(name, "integrations/") || strings.Contains(name, ":") {
				t.Fatalf("check accepted %q whose name %q is outside the prefix", reference, name)
			}
		}
	})
}
