package push

import (
	"strings"
	"unicode/utf8"

	"integration-outbox/internal/credential"
)

// MaxLastError is the longest last_error stored, in characters.
const MaxLastError = 1000

// cleanError makes an error text safe to store in last_error: every secret
// value masked in every encoding credential.Mask knows, valid UTF-8 without NUL bytes (PostgreSQL text refuses them),
// at most MaxLastError characters.
func cleanError(text string, secrets []string) string {
	// Clean the text before masking: dropping a NUL byte could otherwise
	// join the two halves of a secret after masking looked for it.
	text = storable(text)
	forms := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		forms = append(forms, s, storable(s))
	}
	text = credential.Mask(text, forms...)
	if utf8.RuneCountInString(text) <= MaxLastError {
		return text
	}
	n := 0
	for i := range text {
		if n == MaxLastError {
			return text[:i]
		}
		n++
	}
	return text
}

// storable makes s valid UTF-8 without NUL bytes (PostgreSQL text refuses
// them).
func storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}
