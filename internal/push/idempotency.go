package push

import (
	"errors"
	"fmt"
	"strings"
)

// MaxIdempotencyKeyLength is the longest idempotency key sent, in bytes.
const MaxIdempotencyKeyLength = 255

// checkIdempotencyKey refuses a key that cannot travel as an HTTP header
// value as it is (the rule of net/http, golang.org/x/net/http/httpguts
// ValidHeaderFieldValue: no control character but tab), or that a receiver
// would read differently (leading or trailing white space is trimmed), or
// longer than MaxIdempotencyKeyLength. Such a key fails every attempt the
// same way, so it is refused before any provider call.
func checkIdempotencyKey(key string) error {
	switch {
	case key == "":
		return errors.New("idempotency_key: must not be empty")
	case len(key) > MaxIdempotencyKeyLength:
		return fmt.Errorf("idempotency_key: %d bytes, at most %d can be sent", len(key), MaxIdempotencyKeyLength)
	case strings.TrimLeft(key, " \t") != key || strings.TrimRight(key, " \t") != key:
		return errors.New("idempotency_key: leading or trailing white space cannot be sent as a header value")
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("idempotency_key: control character %#02x at byte %d cannot be sent as a header value", c, i)
		}
	}
	return nil
}
