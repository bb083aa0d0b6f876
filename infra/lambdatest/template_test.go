package lambdatest_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"integration-outbox/internal/testenv/cfntemplate"

	"gopkg.in/yaml.v3"
)

// Rules on template.yaml that neither cfn-lint, SAM's translator nor moto
// check, kept as tests. They read the template with internal/testenv/cfntemplate as
// yaml.v3 nodes, on which CloudFormation's short forms (!Ref, !GetAtt, !Sub,
// !If, ...) stay tags; the helpers below walk them.

// cfnTemplate is a parsed CloudFormation/SAM template.
type cfnTemplate struct {
	root *yaml.Node // the top-level mapping
}

// loadTemplate parses the repository's template.yaml.
func loadTemplate(t testing.TB) cfnTemplate {
	t.Helper()
	return cfnTemplate{root: cfntemplate.Load(t, filepath.Join(repoRoot, "template.yaml")).Root}
}

// parseTemplate parses a template's text.
func parseTemplate(t testing.TB, src []byte) cfnTemplate {
	t.Helper()
	return cfnTemplate{root: cfntemplate.Parse(t, src).Root}
}

// get follows mapping keys from n; nil when a key is missing or n is not a
// mapping.
func get(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
				break
			}
		}
		n = next
	}
	return n
}

// resource is the resource logicalID (nil when absent).
func (c cfnTemplate) resource(logicalID string) *yaml.Node {
	return get(c.root, "Resources", logicalID)
}

// resourceType is the Type of a resource ("" when absent).
func (c cfnTemplate) resourceType(logicalID string) string {
	if n := get(c.resource(logicalID), "Type"); n != nil {
		return n.Value
	}
	return ""
}

// resourcesOfType lists the logical ids of a type, in template order.
func (c cfnTemplate) resourcesOfType(typ string) []string {
	var out []string
	res := get(c.root, "Resources")
	if res == nil {
		return nil
	}
	for i := 0; i+1 < len(res.Content); i += 2 {
		if t := get(res.Content[i+1], "Type"); t != nil && t.Value == typ {
			out = append(out, res.Content[i].Value)
		}
	}
	return out
}

// property is Properties.<path> of a resource.
func (c cfnTemplate) property(logicalID string, path ...string) *yaml.Node {
	return get(c.resource(logicalID), append([]string{"Properties"}, path...)...)
}

// functionProperty is a property of an AWS::Serverless::Function, falling
// back to Globals.Function.
func (c cfnTemplate) functionProperty(logicalID, name string) *yaml.Node {
	if n := c.property(logicalID, name); n != nil {
		return n
	}
	return get(c.root, "Globals", "Function", name)
}

// functionEnv is an environment variable of an AWS::Serverless::Function as
// deployed: its own Environment, else Globals.Function's.
func (c cfnTemplate) functionEnv(logicalID, name string) *yaml.Node {
	if n := c.property(logicalID, "Environment", "Variables", name); n != nil {
		return n
	}
	return get(c.root, "Globals", "Function", "Environment", "Variables", name)
}

// getAtt reads !GetAtt Res.Attr, !GetAtt [Res, Attr] or {Fn::GetAtt: ...}.
func getAtt(n *yaml.Node) (logicalID, attr string, ok bool) {
	if n == nil {
		return "", "", false
	}
	arg := n
	if n.Tag != "!GetAtt" {
		if arg = get(n, "Fn::GetAtt"); arg == nil {
			return "", "", false
		}
	}
	switch arg.Kind {
	case yaml.ScalarNode:
		id, at, found := strings.Cut(arg.Value, ".")
		return id, at, found
	case yaml.SequenceNode:
		if len(arg.Content) == 2 {
			return arg.Content[0].Value, arg.Content[1].Value, true
		}
	}
	return "", "", false
}

// ref reads !Ref Name or {Ref: Name}.
func ref(n *yaml.Node) (string, bool) {
	if n == nil {
		return "", false
	}
	if n.Tag == "!Ref" && n.Kind == yaml.ScalarNode {
		return n.Value, true
	}
	if r := get(n, "Ref"); r != nil && r.Kind == yaml.ScalarNode {
		return r.Value, true
	}
	return "", false
}

// sub reads the string of !Sub "..." or {Fn::Sub: "..."}.
func sub(n *yaml.Node) (string, bool) {
	if n == nil {
		return "", false
	}
	if n.Tag == "!Sub" && n.Kind == yaml.ScalarNode {
		return n.Value, true
	}
	if s := get(n, "Fn::Sub"); s != nil && s.Kind == yaml.ScalarNode {
		return s.Value, true
	}
	return "", false
}

// intValue is the integer a node deploys with by default: a literal or a
// !Ref to a parameter (its Default). what names the node in errors.
func (c cfnTemplate) intValue(n *yaml.Node, what string) (int, error) {
	if n == nil {
		return 0, fmt.Errorf("%s: not set", what)
	}
	if name, ok := ref(n); ok {
		p := get(c.root, "Parameters", name)
		if p == nil {
			return 0, fmt.Errorf("%s: !Ref %s is not a parameter", what, name)
		}
		return c.intValue(get(p, "Default"), what+" (parameter "+name+" Default)")
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!Sub" {
		return 0, fmt.Errorf("%s: not a literal or a parameter reference (line %d)", what, n.Line)
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not an integer (line %d)", what, n.Value, n.Line)
	}
	return v, nil
}

// object is a JSON-valued property (RedrivePolicy, RedriveAllowPolicy): a
// mapping, or a JSON string, which YAML reads as well.
func object(n *yaml.Node) (*yaml.Node, error) {
	if n == nil || n.Kind == yaml.MappingNode {
		return n, nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(n.Value), &doc); err == nil && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
			return doc.Content[0], nil
		}
	}
	return nil, fmt.Errorf("line %d: not an object or a JSON string", n.Line)
}

// ------------------------------------------------------------- queue rules

// redriveProblems checks that every queue named by a RedrivePolicy lets
// that source queue use it: SQS refuses a RedrivePolicy whose dead-letter
// queue's RedriveAllowPolicy does not allow the source (denyAll, or byQueue
// without it), and the stack cannot be created. An absent policy or allowAll
// allows every queue; byQueue must list the source's ARN, built with !Sub
// from its QueueName (a !GetAtt of the source would be a circular
// reference: the source already depends on its dead-letter queue).
func redriveProblems(c cfnTemplate) []string {
	var out []string
	for _, src := range c.resourcesOfType("AWS::SQS::Queue") {
		rp, err := object(c.property(src, "RedrivePolicy"))
		if err != nil {
			out = append(out, fmt.Sprintf("%s: RedrivePolicy: %v", src, err))
			continue
		}
		if rp == nil {
			continue
		}
		dlq, attr, ok := getAtt(get(rp, "deadLetterTargetArn"))
		if !ok || attr != "Arn" || c.resourceType(dlq) != "AWS::SQS::Queue" {
			out = append(out, fmt.Sprintf("%s: RedrivePolicy.deadLetterTargetArn must be !GetAtt <queue of this template>.Arn", src))
			continue
		}
		allow, err := object(c.property(dlq, "RedriveAllowPolicy"))
		if err != nil {
			out = append(out, fmt.Sprintf("%s: RedriveAllowPolicy: %v", dlq, err))
			continue
		}
		if allow == nil {
			continue
		}
		perm := get(allow, "redrivePermission")
		switch {
		case perm == nil:
			out = append(out, fmt.Sprintf("%s: RedriveAllowPolicy has no redrivePermission", dlq))
		case perm.Value == "allowAll":
		case perm.Value == "denyAll":
			out = append(out, fmt.Sprintf("%s: RedriveAllowPolicy denyAll forbids every source queue, so SQS refuses the RedrivePolicy of %s", dlq, src))
		case perm.Value == "byQueue":
			out = append(out, c.byQueueProblems(src, dlq, get(allow, "sourceQueueArns"))...)
		default:
			out = append(out, fmt.Sprintf("%s: RedriveAllowPolicy.redrivePermission %q is not allowAll, denyAll or byQueue", dlq, perm.Value))
		}
	}
	return out
}

func (c cfnTemplate) byQueueProblems(src, dlq string, arns *yaml.Node) []string {
	name := c.property(src, "QueueName")
	nameText, isSub := sub(name)
	if !isSub && name != nil && name.Kind == yaml.ScalarNode {
		nameText = name.Value
	}
	if arns == nil || arns.Kind != yaml.SequenceNode {
		return []string{fmt.Sprintf("%s: RedriveAllowPolicy byQueue needs sourceQueueArns", dlq)}
	}
	for _, arn := range arns.Content {
		if id, _, ok := getAtt(arn); ok && id == src {
			return []string{fmt.Sprintf("%s: RedriveAllowPolicy lists !GetAtt %s: a circular reference (%s's RedrivePolicy names %s); build the ARN with !Sub from a fixed QueueName", dlq, src, src, dlq)}
		}
		text, ok := sub(arn)
		if !ok && arn.Kind == yaml.ScalarNode {
			text = arn.Value
		}
		if nameText != "" && strings.HasPrefix(text, "arn:") && strings.HasSuffix(text, ":"+nameText) {
			return nil
		}
	}
	if nameText == "" {
		return []string{fmt.Sprintf("%s: RedriveAllowPolicy byQueue cannot name %s, which has no QueueName", dlq, src)}
	}
	return []string{fmt.Sprintf("%s: RedriveAllowPolicy byQueue does not list %s (QueueName %q)", dlq, src, nameText)}
}

// leaseProblems checks that a claim's lease outlasts every way its message
// can wait before the push starts it, with the defaults the template
// deploys: LEASE_SECONDS > VisibilityTimeout × maxReceiveCount + the
// function's Timeout, for every SQS event source (a message redelivered
// maxReceiveCount times waits up to that long). It also keeps AWS's advice
// for SQS event sources: a VisibilityTimeout of at least six times the
// function's Timeout. A queue backlog is not bounded here: Start refuses a
// claim whose lease has expired.
func leaseProblems(c cfnTemplate) []string {
	var out []string
	for _, fn := range c.resourcesOfType("AWS::Serverless::Function") {
		events := c.property(fn, "Events")
		if events == nil {
			continue
		}
		for i := 0; i+1 < len(events.Content); i += 2 {
			ev := events.Content[i+1]
			if typ := get(ev, "Type"); typ == nil || typ.Value != "SQS" {
				continue
			}
			where := fmt.Sprintf("%s.Events.%s", fn, events.Content[i].Value)
			queue, _, ok := getAtt(get(ev, "Properties", "Queue"))
			if !ok || c.resourceType(queue) != "AWS::SQS::Queue" {
				out = append(out, where+": Queue must be !GetAtt <queue of this template>.Arn")
				continue
			}
			problem := func(err error) { out = append(out, where+": "+err.Error()) }
			timeout, err := c.intValue(c.functionProperty(fn, "Timeout"), fn+".Timeout")
			if err != nil {
				problem(err)
				continue
			}
			visibility := 30 // SQS's default
			if n := c.property(queue, "VisibilityTimeout"); n != nil {
				if visibility, err = c.intValue(n, queue+".VisibilityTimeout"); err != nil {
					problem(err)
					continue
				}
			}
			rp, err := object(c.property(queue, "RedrivePolicy"))
			if err != nil || rp == nil {
				out = append(out, fmt.Sprintf("%s: %s has no RedrivePolicy: its messages are redelivered without bound, longer than any lease", where, queue))
				continue
			}
			receives, err := c.intValue(get(rp, "maxReceiveCount"), queue+".RedrivePolicy.maxReceiveCount")
			if err != nil {
				problem(err)
				continue
			}
			lease, err := c.intValue(c.functionEnv(fn, "LEASE_SECONDS"), fn+" LEASE_SECONDS")
			if err != nil {
				problem(err)
				continue
			}
			if wait := visibility*receives + timeout; lease <= wait {
				out = append(out, fmt.Sprintf("%s: LEASE_SECONDS %d must exceed VisibilityTimeout %d × maxReceiveCount %d + Timeout %d = %d",
					where, lease, visibility, receives, timeout, wait))
			}
			if visibility < 6*timeout {
				out = append(out, fmt.Sprintf("%s: %s.VisibilityTimeout %d is under 6 × the function's Timeout %d", where, queue, visibility, timeout))
			}
			if p, ok := ref(c.functionEnv(fn, "LEASE_SECONDS")); ok {
				if min, err := c.intValue(get(c.root, "Parameters", p, "MinValue"), p+".MinValue"); err != nil {
					problem(err)
				} else if wait := visibility*receives + timeout; min <= wait {
					out = append(out, fmt.Sprintf("%s: parameter %s allows %d, not above VisibilityTimeout × maxReceiveCount + Timeout = %d",
						where, p, min, wait))
				}
			}
		}
	}
	return out
}

// ------------------------------------------------------------------- tests

func TestTemplateDeadLetterQueuesAllowTheirSources(t *testing.T) {
	t.Parallel()
	if problems := redriveProblems(loadTemplate(t)); len(problems) > 0 {
		t.Fatalf("template.yaml:\n%s", strings.Join(problems, "\n"))
	}
}

func TestTemplateLeaseOutlastsQueueRedeliveries(t *testing.T) {
	t.Parallel()
	if problems := leaseProblems(loadTemplate(t)); len(problems) > 0 {
		t.Fatalf("template.yaml:\n%s", strings.Join(problems, "\n"))
	}
}

// The rules catch what they are for, on small templates.
func TestTemplateRulesCatchTheirCases(t *testing.T) {
	t.Parallel()
	const queues = `
Resources:
  Dlq:
    Type: AWS::SQS::Queue
    Properties:
%s
  Src:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: !Sub "${AWS::StackName}-src"
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt Dlq.Arn
        maxReceiveCount: 5
`
	for _, tc := range []struct {
		name, dlq string
		want      string // "" when allowed
	}{
		{"no RedriveAllowPolicy", "      MessageRetentionPeriod: 60", ""},
		{"allowAll", "      RedriveAllowPolicy:\n        redrivePermission: allowAll", ""},
		{"allowAll as JSON", `      RedriveAllowPolicy: '{"redrivePermission": "allowAll"}'`, ""},
		{"denyAll", "      RedriveAllowPolicy:\n        redrivePermission: denyAll", "denyAll forbids"},
		{"byQueue by name", "      RedriveAllowPolicy:\n        redrivePermission: byQueue\n        sourceQueueArns:\n" +
			`          - !Sub "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${AWS::StackName}-src"`, ""},
		{"byQueue of another queue", "      RedriveAllowPolicy:\n        redrivePermission: byQueue\n        sourceQueueArns:\n" +
			`          - !Sub "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:other"`, "does not list Src"},
		{"byQueue by GetAtt", "      RedriveAllowPolicy:\n        redrivePermission: byQueue\n        sourceQueueArns:\n" +
			"          - !GetAtt Src.Arn", "circular reference"},
	} {
		got := strings.Join(redriveProblems(parseTemplate(t, fmt.Appendf(nil, queues, tc.dlq))), "\n")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, got, tc.want)
		}
	}

	const consumer = `
Parameters:
  Lease: {Type: Number, Default: %d, MinValue: %d}
Globals:
  Function:
    Timeout: 60
    Environment:
      Variables:
        LEASE_SECONDS: !Ref Lease
Resources:
  Dlq: {Type: AWS::SQS::Queue}
  Q:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: %d
      RedrivePolicy: {deadLetterTargetArn: !GetAtt Dlq.Arn, maxReceiveCount: 5}
  Fn:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Queue: {Type: SQS, Properties: {Queue: !GetAtt Q.Arn}}
`
	for _, tc := range []struct {
		name                   string
		lease, min, visibility int
		want                   []string
	}{
		{"consistent", 2400, 1900, 360, nil},
		{"lease shorter than redeliveries", 900, 1, 360, []string{"LEASE_SECONDS 900 must exceed", "allows 1"}},
		{"visibility under 6 × timeout", 2400, 1900, 120, []string{"under 6"}},
	} {
		got := leaseProblems(parseTemplate(t, fmt.Appendf(nil, consumer, tc.lease, tc.min, tc.visibility)))
		if len(got) != len(tc.want) {
			t.Errorf("%s: problems %q, want %d", tc.name, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %q, want %q", tc.name, got[i], w)
			}
		}
	}
}
