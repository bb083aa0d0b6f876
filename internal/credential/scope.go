package credential

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultPrefix is CREDENTIAL_REFERENCE_PREFIX when none is configured.
const DefaultPrefix = "integrations/"

const (
	maxReferenceLen = 2048 // Secrets Manager's limit for a SecretId
	maxNameLen      = 512  // Secrets Manager's limit for a secret name
)

// scope is the part of Secrets Manager a credential_reference may name: secret
// names starting with namePrefix, in region, and, when the prefix was given
// as an ARN prefix, in that partition and account.
type scope struct {
	namePrefix string
	region     string
	partition  string // "" when the prefix is a plain name: any partition
	account    string // "" when the prefix is a plain name: any account
}

// parseScope builds the scope from CREDENTIAL_REFERENCE_PREFIX (a secret name
// prefix, or a full ARN prefix
// "arn:<partition>:secretsmanager:<region>:<account>:secret:<name prefix>")
// and AWS_REGION. An empty prefix means DefaultPrefix.
func parseScope(prefix, region string) (scope, error) {
	if region == "" {
		return scope{}, errors.New("AWS_REGION is required to check credential_reference ARNs")
	}
	if !isRegion(region) {
		return scope{}, fmt.Errorf("AWS_REGION %q is not a region name", region)
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	bad := func(why string) (scope, error) {
		return scope{}, fmt.Errorf("CREDENTIAL_REFERENCE_PREFIX %q %s", prefix, why)
	}
	if why := checkText(prefix); why != "" {
		return bad(why)
	}
	s := scope{namePrefix: prefix, region: region}
	if strings.HasPrefix(prefix, "arn:") {
		a, why := parseARN(prefix)
		if why != "" {
			return bad(why)
		}
		if a.region != region {
			return bad(fmt.Sprintf("is in region %q but AWS_REGION is %q", a.region, region))
		}
		s.namePrefix, s.partition, s.account = a.name, a.partition, a.account
	}
	if s.namePrefix == "" {
		return bad("has an empty secret name prefix (it would allow every secret)")
	}
	if why := checkName(s.namePrefix); why != "" {
		return bad(why)
	}
	return s, nil
}

// check reports why reference is outside the scope, or nil when it is inside.
// It looks at the text only: it makes no AWS call.
func (s scope) check(reference string) error {
	if why := checkText(reference); why != "" {
		return errors.New(why)
	}
	name := reference
	if strings.HasPrefix(reference, "arn:") {
		a, why := parseARN(reference)
		if why != "" {
			return errors.New(why)
		}
		if a.region != s.region {
			return fmt.Errorf("is an ARN in region %q, not AWS_REGION %q", a.region, s.region)
		}
		if s.partition != "" && a.partition != s.partition {
			return fmt.Errorf("is an ARN in partition %q, not the CREDENTIAL_REFERENCE_PREFIX partition %q", a.partition, s.partition)
		}
		if s.account != "" && a.account != s.account {
			return fmt.Errorf("is an ARN in account %q, not the CREDENTIAL_REFERENCE_PREFIX account %q", a.account, s.account)
		}
		name = a.name
	}
	if why := checkName(name); why != "" {
		return errors.New(why)
	}
	if !strings.HasPrefix(name, s.namePrefix) {
		return fmt.Errorf("names secret %q, outside CREDENTIAL_REFERENCE_PREFIX %q", name, s.namePrefix)
	}
	return nil
}

// checkText rejects texts no reference may be: empty, over-long, not UTF-8,
// holding whitespace or control characters, or "..".
func checkText(v string) string {
	switch {
	case v == "":
		return "is empty"
	case len(v) > maxReferenceLen:
		return fmt.Sprintf("is longer than %d bytes", maxReferenceLen)
	case !utf8.ValidString(v):
		return "is not valid UTF-8"
	case strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return "contains whitespace or control characters"
	case strings.Contains(v, ".."):
		return `contains ".."`
	}
	return ""
}

// checkName rejects what Secrets Manager does not allow in a secret name:
// 1 to 512 of the ASCII letters, digits and /_+=.@- .
func checkName(name string) string {
	if name == "" {
		return "has an empty secret name"
	}
	if len(name) > maxNameLen {
		return fmt.Sprintf("has a secret name longer than %d bytes", maxNameLen)
	}
	for _, r := range name {
		if !isNameRune(r) {
			return fmt.Sprintf("has %q in its secret name, which Secrets Manager names cannot hold", r)
		}
	}
	return ""
}

func isNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/_+=.@-", r)
}

// secretARN is a parsed "arn:<partition>:secretsmanager:<region>:<account>:secret:<name>".
type secretARN struct {
	partition, region, account, name string
}

// parseARN parses a Secrets Manager secret ARN. The name keeps the random
// "-AbCdEf" suffix Secrets Manager appends; prefix checks do not mind it. It
// returns why the text is not such an ARN, or "".
func parseARN(v string) (secretARN, string) {
	parts := strings.SplitN(v, ":", 7)
	if len(parts) != 7 || parts[0] != "arn" {
		return secretARN{}, "is not an ARN of the form arn:<partition>:secretsmanager:<region>:<account>:secret:<name>"
	}
	a := secretARN{partition: parts[1], region: parts[3], account: parts[4], name: parts[6]}
	switch {
	case !isPartition(a.partition):
		return secretARN{}, fmt.Sprintf("is an ARN with an unknown partition %q", a.partition)
	case parts[2] != "secretsmanager" || parts[5] != "secret":
		return secretARN{}, "is an ARN but not of a Secrets Manager secret"
	case !isRegion(a.region):
		return secretARN{}, fmt.Sprintf("is an ARN with an invalid region %q", a.region)
	case !isAccount(a.account):
		return secretARN{}, fmt.Sprintf("is an ARN with an invalid account %q", a.account)
	}
	return a, ""
}

// isPartition accepts "aws" and its dashed variants: aws-cn, aws-us-gov, aws-iso-b...
func isPartition(v string) bool {
	words := strings.Split(v, "-")
	if words[0] != "aws" {
		return false
	}
	for _, w := range words[1:] {
		if w == "" || strings.IndexFunc(w, func(r rune) bool { return r < 'a' || r > 'z' }) >= 0 {
			return false
		}
	}
	return true
}

// isRegion accepts region names such as us-east-1 or us-gov-west-1.
func isRegion(v string) bool {
	if v == "" || v[0] == '-' || v[len(v)-1] == '-' {
		return false
	}
	return strings.IndexFunc(v, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}) < 0
}

// isAccount accepts a 12-digit AWS account id.
func isAccount(v string) bool {
	return len(v) == 12 && strings.IndexFunc(v, func(r rune) bool { return r < '0' || r > '9' }) < 0
}
