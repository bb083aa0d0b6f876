// Package qboschema checks a QuickBooks Online request body against
// Intuit's own data model: model.json, derived by ./gen from the XSD of
// Intuit's official Java SDK (the commit is in the file). The JSON API is
// that model: an element's name is a JSON key, an element that may repeat
// is an array, an attribute is a key of its own, a type with simple
// content (ReferenceType) is an object whose "value" holds it, and a type
// extends its base's elements (PurchaseOrder → PurchaseByVendor →
// Transaction → IntuitEntity).
//
// Validate refuses what QuickBooks' own parser would: a key the model does
// not have at that place, a value of the wrong JSON type, an enumeration
// value outside its list, an array where the element occurs at most once
// and a single value where it repeats. What Intuit documents beyond the
// XSD (required references, unique names, the SyncToken) is the stand-in's
// (testenv.QuickBooksStandIn).
package qboschema

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"
)

// Unbounded is an element's maxOccurs "unbounded".
const Unbounded = -1

// Model is the derived part of the data model.
type Model struct {
	Source Source           `json:"source"`
	Roots  []string         `json:"roots"`
	Types  map[string]*Type `json:"types"`
}

// Source names where the model comes from.
type Source struct {
	Repository string   `json:"repository"`
	Commit     string   `json:"commit"`
	Folder     string   `json:"folder"`
	Files      []string `json:"files"`
}

// Type is a complex type (Elements, Attributes, Base, SimpleContent) or a
// simple type (Base, Enum, MaxLength).
type Type struct {
	Base          string      `json:"base,omitempty"`
	Elements      []Element   `json:"elements,omitempty"`
	Attributes    []Attribute `json:"attributes,omitempty"`
	SimpleContent bool        `json:"simpleContent,omitempty"`
	// Value is the simple type of a simple content's "value".
	Value string `json:"value,omitempty"`
	// Open: the type takes any element (xs:any).
	Open      bool     `json:"open,omitempty"`
	Enum      []string `json:"enum,omitempty"`
	MaxLength int      `json:"maxLength,omitempty"`
	// Inline are the anonymous types of its elements.
	Inline []Named `json:"inline,omitempty"`
}

// Named is an anonymous type, named after its place.
type Named struct {
	Name string `json:"name"`
	Type *Type  `json:"type"`
}

// Element is one element of a complex type.
type Element struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Min  int    `json:"min"`
	Max  int    `json:"max"` // Unbounded: any number
}

// Attribute is one attribute of a complex type.
type Attribute struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// The XSD built-in types, by the JSON value each takes.
var (
	stringTypes  = []string{"string", "normalizedString", "token", "anyURI", "ID", "IDREF", "date", "dateTime", "time", "base64Binary", "hexBinary", "gYear", "gYearMonth", "duration", "language", "NMTOKEN", "Name", "QName"}
	numberTypes  = []string{"decimal", "double", "float"}
	integerTypes = []string{"int", "integer", "long", "short", "byte", "positiveInteger", "nonNegativeInteger", "negativeInteger", "nonPositiveInteger", "unsignedInt", "unsignedLong", "unsignedShort", "unsignedByte"}
)

// Builtin reports whether name is an XSD built-in type (without "xs:").
func Builtin(name string) bool {
	return slices.Contains(stringTypes, name) || slices.Contains(numberTypes, name) ||
		slices.Contains(integerTypes, name) || name == "boolean" || name == "anyType" || name == "anySimpleType"
}

//go:embed model.json
var modelJSON []byte

var (
	loadOnce sync.Once
	loaded   *Model
	loadErr  error
)

// Load returns the embedded model.
func Load() (*Model, error) {
	loadOnce.Do(func() {
		var m Model
		if loadErr = json.Unmarshal(modelJSON, &m); loadErr != nil {
			return
		}
		for _, t := range m.Types {
			for _, in := range t.Inline {
				m.Types[in.Name] = in.Type
			}
		}
		loaded = &m
	})
	return loaded, loadErr
}

// Violation is one place where a body breaks the model.
type Violation struct {
	Path    string // e.g. PurchaseOrder.Line[0].DetailType
	Message string
}

func (v Violation) String() string { return v.Path + ": " + v.Message }

// Error lists every violation of a body.
type Error struct{ Violations []Violation }

func (e *Error) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = v.String()
	}
	return strings.Join(parts, "; ")
}

// Validate checks body, a JSON object, as an entity of type root (e.g.
// "PurchaseOrder"): nil, or an *Error listing every violation.
func Validate(root string, body []byte) error {
	m, err := Load()
	if err != nil {
		return err
	}
	return m.Validate(root, body)
}

// Validate checks body as an entity of type root against m.
func (m *Model) Validate(root string, body []byte) error {
	if _, ok := m.Types[root]; !ok {
		return fmt.Errorf("qboschema: no type %q in the model", root)
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return &Error{Violations: []Violation{{Path: root, Message: "not JSON: " + err.Error()}}}
	}
	var vs []Violation
	m.check(root, root, v, &vs)
	if len(vs) > 0 {
		return &Error{Violations: vs}
	}
	return nil
}

// fields are a complex type's elements and attributes, its bases' first.
func (m *Model) fields(name string) (elems []Element, attrs []Attribute, open bool) {
	var chain []*Type
	for n := name; n != "" && !Builtin(n); {
		tt := m.Types[n]
		if tt == nil {
			break
		}
		chain = append(chain, tt)
		n = tt.Base
	}
	for i := len(chain) - 1; i >= 0; i-- {
		elems = append(elems, chain[i].Elements...)
		attrs = append(attrs, chain[i].Attributes...)
		open = open || chain[i].Open
	}
	return elems, attrs, open
}

// isComplex reports whether name is a complex type (elements, attributes
// or simple content), not a simple one.
func (m *Model) isComplex(name string) bool {
	t := m.Types[name]
	if t == nil {
		return false
	}
	if t.SimpleContent || len(t.Elements) > 0 || len(t.Attributes) > 0 || t.Open {
		return true
	}
	return t.Base != "" && m.isComplex(t.Base)
}

func (m *Model) check(path, typ string, v any, vs *[]Violation) {
	bad := func(format string, args ...any) {
		*vs = append(*vs, Violation{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if typ == "anyType" {
		return
	}
	if !m.isComplex(typ) {
		m.checkSimple(path, typ, v, vs)
		return
	}
	obj, ok := v.(map[string]any)
	if !ok {
		bad("a %s is a JSON object, got %s", typ, jsonKind(v))
		return
	}
	elems, attrs, open := m.fields(typ)
	value := m.simpleContent(typ) // the simple type of "value", if any
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		val := obj[k]
		at := path + "." + k
		if i := slices.IndexFunc(elems, func(e Element) bool { return e.Name == k }); i >= 0 {
			e := elems[i]
			arr, isArr := val.([]any)
			switch {
			case e.Max == 1 && isArr:
				*vs = append(*vs, Violation{Path: at, Message: fmt.Sprintf("%s occurs at most once (a %s), got an array", k, e.Type)})
			case e.Max != 1 && !isArr:
				*vs = append(*vs, Violation{Path: at, Message: fmt.Sprintf("%s may repeat: an array of %s, got %s", k, e.Type, jsonKind(val))})
			case isArr:
				if e.Max != Unbounded && len(arr) > e.Max {
					*vs = append(*vs, Violation{Path: at, Message: fmt.Sprintf("at most %d %s, got %d", e.Max, k, len(arr))})
				}
				for n, item := range arr {
					m.check(fmt.Sprintf("%s[%d]", at, n), e.Type, item, vs)
				}
			default:
				m.check(at, e.Type, val, vs)
			}
			continue
		}
		if i := slices.IndexFunc(attrs, func(a Attribute) bool { return a.Name == k }); i >= 0 {
			m.checkSimple(at, attrs[i].Type, val, vs)
			continue
		}
		if k == "value" && value != "" {
			m.checkSimple(at, value, val, vs)
			continue
		}
		if !open {
			*vs = append(*vs, Violation{Path: at, Message: fmt.Sprintf("%s has no %s", typ, k)})
		}
	}
}

// simpleContent is the simple type of a simple-content type's value, its
// bases' included.
func (m *Model) simpleContent(name string) string {
	for n := name; n != "" && !Builtin(n); {
		t := m.Types[n]
		if t == nil {
			return ""
		}
		if t.SimpleContent && t.Value != "" {
			if m.isComplex(t.Value) {
				return m.simpleContent(t.Value)
			}
			return t.Value
		}
		n = t.Base
	}
	return ""
}

var datePattern = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}([+-][0-9]{2}:[0-9]{2}|Z)?$`)

// checkSimple checks a value of a simple type: its JSON kind from its
// built-in root, its enumeration and its length.
func (m *Model) checkSimple(path, typ string, v any, vs *[]Violation) {
	bad := func(format string, args ...any) {
		*vs = append(*vs, Violation{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	root, enum, maxLen := typ, []string(nil), 0
	for !Builtin(root) {
		t := m.Types[root]
		if t == nil {
			bad("type %s is not in the model", root)
			return
		}
		if enum == nil {
			enum = t.Enum
		}
		if maxLen == 0 {
			maxLen = t.MaxLength
		}
		if t.Base == "" {
			root = "string"
			break
		}
		root = t.Base
	}
	switch {
	case root == "anyType" || root == "anySimpleType":
	case root == "boolean":
		if _, ok := v.(bool); !ok {
			bad("a %s is a JSON boolean, got %s", typ, jsonKind(v))
		}
	case slices.Contains(numberTypes, root) || slices.Contains(integerTypes, root):
		n, ok := v.(json.Number)
		if !ok {
			bad("a %s is a JSON number, got %s", typ, jsonKind(v))
			return
		}
		if slices.Contains(integerTypes, root) {
			if _, err := n.Int64(); err != nil {
				bad("a %s is a whole number, got %s", typ, n)
			}
		}
	default: // the string types
		s, ok := v.(string)
		if !ok {
			bad("a %s is a JSON string, got %s", typ, jsonKind(v))
			return
		}
		if root == "date" && !datePattern.MatchString(s) {
			bad("a %s is a date YYYY-MM-DD, got %q", typ, s)
		}
		if len(enum) > 0 && !slices.Contains(enum, s) {
			bad("%q is not a %s (one of %s)", s, typ, strings.Join(enum, ", "))
		}
		if maxLen > 0 && utf8.RuneCountInString(s) > maxLen {
			bad("a %s has at most %d characters, got %d", typ, maxLen, utf8.RuneCountInString(s))
		}
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
