// Command gen derives model.json, the part of Intuit's QuickBooks Online
// data model our requests use, from the XSD files of Intuit's official
// Java SDK (intuit/QuickBooks-V3-Java-SDK, ipp-v3-java-data/src/main/xsd:
// Finance.xsd, IntuitBaseTypes.xsd, IntuitNamesTypes.xsd):
//
//	go run ./internal/testenv/qboschema/gen -xsd DIR -commit SHA > internal/testenv/qboschema/model.json
//
// It keeps every type reachable from the roots (the entities we send), each
// complex type with its base type, its elements in order with their
// cardinalities, its attributes and its simple content, and each simple
// type with its base, enumeration and length facets. It refuses an XSD
// construct it does not know rather than guess.
package main

import (
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"integration-outbox/internal/testenv/qboschema"
)

// node is any XML element of an XSD file.
type node struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Children []node     `xml:",any"`
}

func (n node) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (n node) kind() string { return n.XMLName.Local }

func main() {
	dir := flag.String("xsd", "", "the SDK's ipp-v3-java-data/src/main/xsd folder")
	commit := flag.String("commit", "", "the SDK commit the files come from")
	roots := flag.String("roots", "PurchaseOrder,Vendor", "the entities we send")
	flag.Parse()
	if *dir == "" || *commit == "" {
		fmt.Fprintln(os.Stderr, "gen: -xsd and -commit are required")
		os.Exit(2)
	}
	m, err := derive(*dir, *commit, strings.Split(*roots, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	out, _ := json.MarshalIndent(m, "", "  ")
	os.Stdout.Write(append(out, '\n'))
}

var files = []string{"Finance.xsd", "IntuitBaseTypes.xsd", "IntuitNamesTypes.xsd"}

func derive(dir, commit string, roots []string) (*qboschema.Model, error) {
	defs := map[string]node{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, err
		}
		var schema node
		if err := xml.Unmarshal(b, &schema); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, c := range schema.Children {
			if name := c.attr("name"); name != "" && (c.kind() == "complexType" || c.kind() == "simpleType") {
				defs[name] = c
			}
		}
	}
	m := &qboschema.Model{Source: qboschema.Source{Repository: "intuit/QuickBooks-V3-Java-SDK",
		Commit: commit, Folder: "ipp-v3-java-data/src/main/xsd", Files: files}, Roots: roots,
		Types: map[string]*qboschema.Type{}}
	queue := slices.Clone(roots)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, done := m.Types[name]; done || qboschema.Builtin(name) {
			continue
		}
		def, ok := defs[name]
		if !ok {
			return nil, fmt.Errorf("type %q is referenced but not defined", name)
		}
		t, refs, err := convert(name, def)
		if err != nil {
			return nil, err
		}
		m.Types[name] = t
		queue = append(queue, refs...)
	}
	return m, nil
}

// convert turns one named type definition into the model's and returns
// the types it references.
func convert(name string, def node) (*qboschema.Type, []string, error) {
	t := &qboschema.Type{}
	var refs []string
	ref := func(typ string) string {
		typ = strings.TrimPrefix(typ, "xs:")
		if !qboschema.Builtin(typ) {
			refs = append(refs, typ)
		}
		return typ
	}
	if def.kind() == "simpleType" {
		for _, c := range def.Children {
			switch c.kind() {
			case "annotation":
			case "restriction":
				t.Base = ref(c.attr("base"))
				for _, f := range c.Children {
					switch f.kind() {
					case "enumeration":
						t.Enum = append(t.Enum, f.attr("value"))
					case "maxLength":
						n, _ := strconv.Atoi(f.attr("value"))
						t.MaxLength = n
					case "annotation", "minLength", "pattern", "minInclusive", "maxInclusive", "totalDigits", "fractionDigits":
						// not checked: the JSON type and enumeration are
					default:
						return nil, nil, fmt.Errorf("simple type %s: facet %s", name, f.kind())
					}
				}
			case "list", "union":
				t.Base = "string"
			default:
				return nil, nil, fmt.Errorf("simple type %s: %s", name, c.kind())
			}
		}
		return t, refs, nil
	}
	var walk func(group node, min, max int) error
	walk = func(group node, gmin, gmax int) error {
		for _, c := range group.Children {
			switch c.kind() {
			case "annotation":
			case "element":
				e := qboschema.Element{Name: c.attr("name"), Min: occurs(c.attr("minOccurs"), 1) * gmin,
					Max: mul(occurs(c.attr("maxOccurs"), 1), gmax)}
				switch {
				case c.attr("type") != "":
					e.Type = ref(c.attr("type"))
				case c.attr("ref") != "":
					return fmt.Errorf("complex type %s: element ref %s", name, c.attr("ref"))
				default:
					// An anonymous type of its own: named after its place.
					anon := name + "." + e.Name
					for _, d := range c.Children {
						if d.kind() == "complexType" || d.kind() == "simpleType" {
							sub, subRefs, err := convert(anon, d)
							if err != nil {
								return err
							}
							t.Inline = append(t.Inline, qboschema.Named{Name: anon, Type: sub})
							refs = append(refs, subRefs...)
							e.Type = anon
						}
					}
					if e.Type == "" {
						e.Type = "anyType"
					}
				}
				t.Elements = append(t.Elements, e)
			case "sequence", "all":
				if err := walk(c, gmin*occurs(c.attr("minOccurs"), 1), mul(gmax, occurs(c.attr("maxOccurs"), 1))); err != nil {
					return err
				}
			case "choice":
				// One of the choice's elements: none of them is required alone.
				if err := walk(c, 0, mul(gmax, occurs(c.attr("maxOccurs"), 1))); err != nil {
					return err
				}
			case "any":
				t.Open = true
			default:
				return fmt.Errorf("complex type %s: %s in a group", name, c.kind())
			}
		}
		return nil
	}
	var body func(n node) error
	body = func(n node) error {
		for _, c := range n.Children {
			switch c.kind() {
			case "annotation":
			case "sequence", "all":
				if err := walk(c, occurs(c.attr("minOccurs"), 1), occurs(c.attr("maxOccurs"), 1)); err != nil {
					return err
				}
			case "choice":
				if err := walk(c, 0, occurs(c.attr("maxOccurs"), 1)); err != nil {
					return err
				}
			case "attribute":
				typ := c.attr("type")
				if typ == "" {
					typ = "xs:string"
				}
				t.Attributes = append(t.Attributes, qboschema.Attribute{Name: c.attr("name"), Type: ref(typ)})
			case "complexContent":
				if err := body(c); err != nil {
					return err
				}
			case "simpleContent":
				t.SimpleContent = true
				if err := body(c); err != nil {
					return err
				}
			case "extension", "restriction":
				if t.SimpleContent {
					t.Value = ref(c.attr("base"))
				} else {
					t.Base = ref(c.attr("base"))
				}
				if err := body(c); err != nil {
					return err
				}
			case "anyAttribute":
			default:
				return fmt.Errorf("complex type %s: %s", name, c.kind())
			}
		}
		return nil
	}
	if err := body(def); err != nil {
		return nil, nil, err
	}
	return t, refs, nil
}

// occurs reads minOccurs/maxOccurs: "unbounded" is qboschema.Unbounded.
func occurs(v string, def int) int {
	switch v {
	case "":
		return def
	case "unbounded":
		return qboschema.Unbounded
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		panic("occurs " + v)
	}
	return n
}

func mul(a, b int) int {
	if a == qboschema.Unbounded || b == qboschema.Unbounded {
		return qboschema.Unbounded
	}
	return a * b
}
