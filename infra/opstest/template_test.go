package opstest

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"integration-outbox/internal/testenv/cfntemplate"
)

// repoRoot is the module root, two levels up from this package.
var repoRoot = filepath.Join("..", "..")

// tmpl is template.yaml decoded into maps, slices and scalars; an intrinsic
// function tag becomes a one-key map as in JSON templates: !Ref x is
// {"Ref": x}, !GetAtt A.B is {"Fn::GetAtt": "A.B"}, !Sub s is {"Fn::Sub": s}.
type tmpl map[string]any

func loadTemplate(t *testing.T) tmpl {
	t.Helper()
	return cfntemplate.Load(t, filepath.Join(repoRoot, "template.yaml")).Map(t)
}

func (tp tmpl) resources() map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range tp["Resources"].(map[string]any) {
		out[id] = r.(map[string]any)
	}
	return out
}

func (tp tmpl) ofType(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range tp.resources() {
		if r["Type"] == typ {
			out[id] = props(r)
		}
	}
	return out
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	if p == nil {
		p = map[string]any{}
	}
	return p
}

// get walks a path of map keys and slice indexes ("a", "b", 0).
func get(v any, path ...any) any {
	if tp, ok := v.(tmpl); ok {
		v = map[string]any(tp)
	}
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				return nil
			}
			v = s[k]
		}
	}
	return v
}

// ref returns the logical id of {"Ref": id}, {"Fn::GetAtt": "id.Attr"} or
// {"Fn::GetAtt": [id, Attr]} and the attribute ("" for Ref).
func ref(v any) (id, attr string) {
	m, ok := v.(map[string]any)
	if !ok {
		return "", ""
	}
	if r, ok := m["Ref"].(string); ok {
		return r, ""
	}
	switch g := m["Fn::GetAtt"].(type) {
	case string:
		id, attr, _ = strings.Cut(g, ".")
		return id, attr
	case []any:
		if len(g) == 2 {
			a, _ := g[0].(string)
			b, _ := g[1].(string)
			return a, b
		}
	}
	return "", ""
}

// paramDefault resolves {"Ref": Param} to the parameter's Default.
func (tp tmpl) paramDefault(v any) any {
	if id, attr := ref(v); id != "" && attr == "" {
		if p, ok := get(tp, "Parameters", id).(map[string]any); ok {
			return p["Default"]
		}
	}
	return v
}

func strs(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// statements returns the inline policy statements of an IAM role, with the
// HasKmsKey-style {"Fn::If": [cond, stmt, NoValue]} taken as its stmt.
func statements(role map[string]any) []map[string]any {
	var out []map[string]any
	for _, p := range get(role, "Policies").([]any) {
		for _, s := range get(p, "PolicyDocument", "Statement").([]any) {
			if f, ok := get(s, "Fn::If").([]any); ok {
				s = f[1]
			}
			if m, ok := s.(map[string]any); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// allows reports whether a statement of role allows action on resource
// (compared structurally, e.g. {"Fn::GetAtt": "Q.Arn"} or "*").
func allows(role map[string]any, action string, resource any) bool {
	for _, s := range statements(role) {
		if s["Effect"] != "Allow" || !contains(strs(s["Action"]), action) {
			continue
		}
		for _, r := range anySlice(s["Resource"]) {
			if equal(r, resource) {
				return true
			}
		}
	}
	return false
}

func anySlice(v any) []any {
	if s, ok := v.([]any); ok {
		return s
	}
	return []any{v}
}

func equal(a, b any) bool {
	ai, aa := ref(a)
	bi, ba := ref(b)
	if ai != "" || bi != "" {
		return ai == bi && aa == ba
	}
	return a == b
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

var subVar = regexp.MustCompile(`\$\{([^}!]+)\}`)

// substitute replaces the ${...} of a Fn::Sub string with stand-ins: a
// resource's Ref or attribute becomes "<Id>" or "<Id.Attr>", pseudo
// parameters "<AWS::Region>".
func substitute(s string) string {
	return subVar.ReplaceAllString(s, "<$1>")
}
