// Package strictjson decodes the JSON payloads we own (console events, rerun
// requests, our SQS bodies) the way the contract reads them: keys are
// case-sensitive, and an unknown key is an error that names it. The standard
// library matches keys case-insensitively and ignores unknown ones; this
// package walks the object itself and hands each value to encoding/json.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// FieldError names the field a decoding failure is about.
type FieldError struct {
	Field string // dotted path, e.g. "filter.statuses"
	Msg   string
}

func (e *FieldError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Msg) }

// Fieldf returns a *FieldError naming field.
func Fieldf(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// DecodePayload decodes like Decode a payload an operator typed: its errors
// are *FieldError, and the empty key ({"": 1}) is named the way it is
// written, `""`, so the message always points at something.
func DecodePayload(data []byte, dst any) error {
	err := Decode(data, dst)
	var fe *FieldError
	if errors.As(err, &fe) && fe.Field == "" {
		return &FieldError{Field: `""`, Msg: fe.Msg}
	}
	return err
}

// Decode decodes the JSON object data into the struct dst points to. Only
// keys equal to a field's json tag are accepted.
func Decode(data []byte, dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("strictjson: dst must point to a struct, got %T", dst)
	}
	return decodeObject(bytes.TrimSpace(data), v.Elem(), "")
}

func decodeObject(data []byte, dst reflect.Value, path string) error {
	var obj map[string]json.RawMessage
	if len(data) == 0 || data[0] != '{' {
		return &FieldError{Field: orRoot(path), Msg: "must be a JSON object"}
	}
	if err := json.Unmarshal(data, &obj); err != nil {
		return &FieldError{Field: orRoot(path), Msg: "malformed JSON: " + syntaxMessage(err)}
	}
	fields := fieldsByTag(dst.Type())
	for key, raw := range obj {
		idx, ok := fields[key]
		name := join(path, key)
		if !ok {
			return &FieldError{Field: name, Msg: "unknown field"}
		}
		if err := decodeValue(raw, dst.Field(idx), name); err != nil {
			return err
		}
	}
	return nil
}

func decodeValue(raw json.RawMessage, dst reflect.Value, path string) error {
	if string(raw) == "null" {
		return nil
	}
	t := dst.Type()
	if t.Kind() == reflect.String && isPlainString(raw) && !implementsUnmarshaler(t) {
		// The common case, without a second pass of the JSON decoder: the
		// document was already validated when it was split into fields.
		dst.SetString(string(raw[1 : len(raw)-1]))
		return nil
	}
	if t.Kind() == reflect.Struct && !implementsUnmarshaler(t) {
		return decodeObject(raw, dst, path)
	}
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && !implementsUnmarshaler(t) {
		v := reflect.New(t.Elem())
		if err := decodeObject(raw, v.Elem(), path); err != nil {
			return err
		}
		dst.Set(v)
		return nil
	}
	if err := json.Unmarshal(raw, dst.Addr().Interface()); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return &FieldError{Field: path, Msg: "must be " + describe(t) + ", got " + typeErr.Value}
		}
		return &FieldError{Field: path, Msg: err.Error()}
	}
	return nil
}

// isPlainString reports whether raw is a JSON string without escapes.
func isPlainString(raw []byte) bool {
	return len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0
}

func fieldsByTag(t reflect.Type) map[string]int {
	out := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = i
	}
	return out
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func implementsUnmarshaler(t reflect.Type) bool {
	return t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType)
}

func describe(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array of " + strings.TrimPrefix(describe(t.Elem()), "a ")
	case reflect.Pointer:
		return describe(t.Elem())
	}
	return t.String()
}

func syntaxMessage(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	return err.Error()
}

func join(path, key string) string {
	if key == "" {
		key = `""`
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "payload"
	}
	return path
}
