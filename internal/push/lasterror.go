package push

import (
	"strings"
	"unicode/utf8"
)

// MaxLastError is the longest last_error stored, in characters.
const MaxLastError = 1000

// cleanError makes an error text safe to store in last_error: every secret
// value masked, valid UTF-8 without NUL bytes (PostgreSQL text refuses them),
// at most MaxLastError characters.
func cleanError(text string, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			text = strings.ReplaceAll(text, s, "[redacted]")
		}
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	text = strings.ReplaceAll(text, "\x00", "")
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
