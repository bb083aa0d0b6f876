// Package cfntemplate is the one reader of template.yaml for the tests that
// check it (infra/lambdatest, infra/opstest). It lives apart from testenv so
// that modules using testenv (bench) do not need yaml.v3.
package cfntemplate

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// Template is a CloudFormation/SAM template (template.yaml) as the tests of
// the template read it: one reader for all of them.
type Template struct {
	// Root is the top-level mapping as yaml.v3 nodes, on which the short
	// forms of intrinsic functions (!Ref, !GetAtt, !Sub, !If, ...) stay tags.
	Root *yaml.Node
}

// Load reads and parses the template at path.
func Load(t testing.TB, path string) Template {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Parse(t, src)
}

// Parse parses a template's text; the test fails unless it is a YAML
// mapping.
func Parse(t testing.TB, src []byte) Template {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		t.Fatalf("template: %v", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		t.Fatal("template: not a YAML mapping")
	}
	return Template{Root: doc.Content[0]}
}

// Map returns the template decoded into maps, slices and typed scalars, an
// intrinsic function tag turned into its one-key JSON form: !Ref x is
// {"Ref": x}, !Condition c is {"Condition": c}, !GetAtt A.B is
// {"Fn::GetAtt": "A.B"}, !Sub s is {"Fn::Sub": s}.
func (tp Template) Map(t testing.TB) map[string]any {
	t.Helper()
	v, err := decodeTemplateNode(tp.Root)
	if err != nil {
		t.Fatalf("template: %v", err)
	}
	return v.(map[string]any)
}

func decodeTemplateNode(n *yaml.Node) (any, error) {
	var v any
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			val, err := decodeTemplateNode(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			m[n.Content[i].Value] = val
		}
		v = m
	case yaml.SequenceNode:
		s := []any{}
		for _, c := range n.Content {
			val, err := decodeTemplateNode(c)
			if err != nil {
				return nil, err
			}
			s = append(s, val)
		}
		v = s
	case yaml.AliasNode:
		return decodeTemplateNode(n.Alias)
	default:
		if isIntrinsic(n.Tag) {
			v = n.Value
		} else if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
	}
	if isIntrinsic(n.Tag) {
		name := strings.TrimPrefix(n.Tag, "!")
		if name != "Ref" && name != "Condition" {
			name = "Fn::" + name
		}
		return map[string]any{name: v}, nil
	}
	return v, nil
}

// isIntrinsic tells a CloudFormation short form (!Ref) from a YAML type
// tag (!!str).
func isIntrinsic(tag string) bool {
	return strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")
}
