package credential

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// Redacted replaces a secret value in every text Mask cleans.
const Redacted = "[redacted]"

// Mask replaces in text every form in which a provider or a library may echo
// one of values back by Redacted: the raw value, JSON-escaped (as
// encoding/json writes it, with "\/" for '/' as PHP writes it, and with every
// non-ASCII character as \uXXXX in either hex case), URL-encoded
// (url.QueryEscape, url.PathEscape, either hex case) and base64-encoded
// (standard and URL alphabets, padded or not). It is the one masking
// function: every text that may reach a column, a log line or a metric goes
// through it.
func Mask(text string, values ...string) string {
	for _, f := range Forms(values...) {
		text = strings.ReplaceAll(text, f, Redacted)
	}
	return text
}

// Mask masks c's values in text (see the package function Mask).
func (c Credential) Mask(text string) string { return Mask(text, c.Values()...) }

// Forms returns every text form of values that Mask replaces, longest first
// (so a form that holds another is replaced whole), without empty ones or
// repeats. Callers that cut a text use it to spot the start of a secret at
// the cut.
func Forms(values ...string) []string {
	var forms []string
	for _, v := range values {
		if v == "" {
			continue
		}
		forms = append(forms, v)
		for _, j := range jsonForms(v) {
			forms = append(forms, j, strings.ReplaceAll(j, "/", `\/`))
		}
		q, p := url.QueryEscape(v), url.PathEscape(v)
		forms = append(forms, q, p, lowerHexEscapes(q, '%'), lowerHexEscapes(p, '%'))
		b := []byte(v)
		forms = append(forms,
			base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
			base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b))
	}
	slices.SortFunc(forms, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
	return slices.Compact(forms)
}

// jsonForms returns v as the inside of a JSON string: as encoding/json
// writes it (HTML characters escaped), without the HTML escaping, and with
// every character outside printable ASCII as \uXXXX (lower and upper case
// hex), as PHP's json_encode and many others write it.
func jsonForms(v string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		_ = enc.Encode(v) // a string always encodes
		s := strings.TrimSuffix(b.String(), "\n")
		out = append(out, s[1:len(s)-1])
	}
	for _, html := range []bool{true, false} {
		ascii := asciiJSON(v, html)
		out = append(out, ascii, upperHexEscapes(ascii))
	}
	return out
}

// asciiJSON escapes v for a JSON string with only printable ASCII left:
// '"' and '\' with a backslash, the usual short escapes for control
// characters, and everything else outside printable ASCII as \uXXXX
// (a surrogate pair above U+FFFF). Invalid UTF-8 becomes \ufffd. With html,
// '<', '>' and '&' are escaped too, as encoding/json does by default.
func asciiJSON(v string, html bool) string {
	var b strings.Builder
	for _, r := range v {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case html && (r == '<' || r == '>' || r == '&'):
			fmt.Fprintf(&b, `\u%04x`, r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r > 0xffff:
			r -= 0x10000
			fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		default:
			if r == utf8.RuneError {
				r = 0xfffd
			}
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// upperHexEscapes upper-cases the hex digits of every \uXXXX in s.
func upperHexEscapes(s string) string {
	b := []byte(s)
	for i := 0; i+6 <= len(b); i++ {
		if b[i] == '\\' && b[i+1] == 'u' {
			copy(b[i+2:i+6], strings.ToUpper(string(b[i+2:i+6])))
			i += 5
		} else if b[i] == '\\' {
			i++ // an escaped character: "\\u" is not an escape
		}
	}
	return string(b)
}

// lowerHexEscapes lower-cases the two hex digits after every mark ('%') in s.
func lowerHexEscapes(s string, mark byte) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == mark {
			copy(b[i+1:i+3], strings.ToLower(string(b[i+1:i+3])))
			i += 2
		}
	}
	return string(b)
}
