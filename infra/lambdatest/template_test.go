package lambdatest_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"integration-outbox/internal/config"
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
			if len(c.deadLetterSources()[queue]) > 0 {
				continue // a dead-letter consumer: deadLetterConsumerProblems
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

// deadLetterSources maps each queue that a RedrivePolicy names as its
// dead-letter queue to those source queues.
func (c cfnTemplate) deadLetterSources() map[string][]string {
	out := map[string][]string{}
	for _, src := range c.resourcesOfType("AWS::SQS::Queue") {
		if dlq, ok := c.redriveTarget(src); ok {
			out[dlq] = append(out[dlq], src)
		}
	}
	return out
}

// redriveTarget is the queue a queue's RedrivePolicy moves messages to.
func (c cfnTemplate) redriveTarget(queue string) (string, bool) {
	rp, err := object(c.property(queue, "RedrivePolicy"))
	if err != nil || rp == nil {
		return "", false
	}
	dlq, attr, ok := getAtt(get(rp, "deadLetterTargetArn"))
	return dlq, ok && attr == "Arn"
}

// sqsEventSource is one SQS event of a function.
type sqsEventSource struct {
	where, function string
	props           *yaml.Node
}

// sqsEventSources maps each queue to the SQS event sources that consume it.
func (c cfnTemplate) sqsEventSources() map[string][]sqsEventSource {
	out := map[string][]sqsEventSource{}
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
			if queue, _, ok := getAtt(get(ev, "Properties", "Queue")); ok {
				out[queue] = append(out[queue], sqsEventSource{
					where: fmt.Sprintf("%s.Events.%s", fn, events.Content[i].Value), function: fn, props: get(ev, "Properties")})
			}
		}
	}
	return out
}

// deadLetterConsumerProblems checks the dead-letter queue of every queue a
// function consumes. It must itself be consumed (a message there means the
// push function failed on every delivery; its row keeps its lease and its
// place in the in-flight caps until LEASE_SECONDS unless the consumer
// releases it), and that consumer must be deployable and lossless:
//   - the queue's VisibilityTimeout at least the consumer's Timeout (Lambda
//     refuses the event source otherwise), and at least six times it (AWS's
//     advice for SQS event sources, room for throttle retries);
//   - ReportBatchItemFailures, or the records the consumer reports as
//     failed (database unreachable) would be deleted with the batch;
//   - a MessageRetentionPeriod longer than the source queue's (SQS keeps a
//     message's original enqueue time when it moves it, so a shorter one
//     drops messages before they are read);
//   - no RedrivePolicy chain leading back to a source queue (a loop that
//     would push stale commands again).
func deadLetterConsumerProblems(c cfnTemplate) []string {
	var out []string
	consumers := c.sqsEventSources()
	sources := c.deadLetterSources()
	retention := func(q string) (int, error) {
		if n := c.property(q, "MessageRetentionPeriod"); n != nil {
			return c.intValue(n, q+".MessageRetentionPeriod")
		}
		return 345600, nil // SQS's default, 4 days
	}
	dlqs := make([]string, 0, len(sources))
	for dlq := range sources {
		dlqs = append(dlqs, dlq)
	}
	sort.Strings(dlqs)
	for _, dlq := range dlqs {
		consumedSources := 0
		for _, src := range sources[dlq] {
			if len(consumers[src]) > 0 {
				consumedSources++
			}
		}
		if consumedSources == 0 {
			continue // not the dead-letter queue of a function's queue
		}
		if len(consumers[dlq]) == 0 {
			out = append(out, fmt.Sprintf("%s: no function consumes it: the rows of its messages stay leased until LEASE_SECONDS", dlq))
			continue
		}
		for _, ev := range consumers[dlq] {
			timeout, err := c.intValue(c.functionProperty(ev.function, "Timeout"), ev.function+".Timeout")
			if err != nil {
				out = append(out, ev.where+": "+err.Error())
				continue
			}
			visibility := 30 // SQS's default
			if n := c.property(dlq, "VisibilityTimeout"); n != nil {
				if visibility, err = c.intValue(n, dlq+".VisibilityTimeout"); err != nil {
					out = append(out, ev.where+": "+err.Error())
					continue
				}
			}
			if visibility < timeout {
				out = append(out, fmt.Sprintf("%s: %s.VisibilityTimeout %d is under the function's Timeout %d: Lambda refuses the event source",
					ev.where, dlq, visibility, timeout))
			} else if visibility < 6*timeout {
				out = append(out, fmt.Sprintf("%s: %s.VisibilityTimeout %d is under 6 × the function's Timeout %d", ev.where, dlq, visibility, timeout))
			}
			reports := false
			if types := get(ev.props, "FunctionResponseTypes"); types != nil {
				for _, t := range types.Content {
					reports = reports || t.Value == "ReportBatchItemFailures"
				}
			}
			if !reports {
				out = append(out, ev.where+": FunctionResponseTypes lacks ReportBatchItemFailures: records it reports as failed would be deleted")
			}
		}
		kept, err := retention(dlq)
		if err != nil {
			out = append(out, err.Error())
		}
		for _, src := range sources[dlq] {
			if srcKept, err := retention(src); err != nil {
				out = append(out, err.Error())
			} else if kept <= srcKept {
				out = append(out, fmt.Sprintf("%s: MessageRetentionPeriod %d must exceed its source %s's %d (a moved message keeps its enqueue time)",
					dlq, kept, src, srcKept))
			}
		}
		seen := map[string]bool{dlq: true}
		for q, ok := c.redriveTarget(dlq); ok && !seen[q]; q, ok = c.redriveTarget(q) {
			seen[q] = true
			if slices.Contains(sources[dlq], q) {
				out = append(out, fmt.Sprintf("%s: its RedrivePolicy leads back to its source %s: a loop", dlq, q))
				break
			}
		}
	}
	return out
}

// ------------------------------------------------ every function's settings

// functionSetting is a parameter that every function gets as an environment
// variable: its ParameterGroup, and what internal/config does with the
// variable (def when it is unset, lo to hi accepted), which the parameter
// must agree with: its Default is def, so that a function run without the
// template (sam local, the tests) behaves as deployed, and its MinValue and
// MaxValue lie within lo to hi, so that no value the stack accepts fails
// the functions' cold start.
type functionSetting struct {
	env, param, group string
	def, lo, hi       int
}

// everyFunctionSettings are the settings every function must get.
var everyFunctionSettings = []functionSetting{
	{env: "PUSH_MAXIMUM_CONCURRENCY", param: "PushMaximumConcurrency", group: "Push consumer", def: 5, lo: 1, hi: 10_000},
	{env: "DATABASE_POOL_SIZE", param: "DatabasePoolSize", group: "Database", def: config.DefaultDatabasePoolSize, lo: 1, hi: 100},
}

// settingProblems checks that every AWS::Serverless::Function gets each
// setting's variable as !Ref <its parameter> (from Globals, and not
// replaced in its own Environment), and that the parameter is a Number
// whose Default, MinValue and MaxValue agree with internal/config and that
// is listed in its ParameterGroup.
func settingProblems(c cfnTemplate, settings []functionSetting) []string {
	var out []string
	functions := c.resourcesOfType("AWS::Serverless::Function")
	if len(functions) == 0 {
		out = append(out, "no AWS::Serverless::Function")
	}
	for _, s := range settings {
		p := get(c.root, "Parameters", s.param)
		if p == nil {
			out = append(out, fmt.Sprintf("parameter %s is missing", s.param))
			continue
		}
		if typ := get(p, "Type"); typ == nil || typ.Value != "Number" {
			out = append(out, fmt.Sprintf("parameter %s: Type must be Number", s.param))
		}
		for _, b := range []struct {
			key    string
			lo, hi int
		}{{"Default", s.def, s.def}, {"MinValue", s.lo, s.hi}, {"MaxValue", s.lo, s.hi}} {
			v, err := c.intValue(get(p, b.key), s.param+"."+b.key)
			switch {
			case err != nil:
				out = append(out, "parameter "+err.Error())
			case b.key == "Default" && v != s.def:
				out = append(out, fmt.Sprintf("parameter %s.Default %d is not %s's default in internal/config, %d", s.param, v, s.env, s.def))
			case v < b.lo || v > b.hi:
				out = append(out, fmt.Sprintf("parameter %s.%s %d is outside what internal/config accepts for %s, %d to %d", s.param, b.key, v, s.env, b.lo, b.hi))
			}
		}
		if !c.parameterInGroup(s.param, s.group) {
			out = append(out, fmt.Sprintf("parameter %s is not in the %q ParameterGroup of AWS::CloudFormation::Interface", s.param, s.group))
		}
		for _, fn := range functions {
			if name, ok := ref(c.functionEnv(fn, s.env)); !ok || name != s.param {
				out = append(out, fmt.Sprintf("%s: %s must be !Ref %s", fn, s.env, s.param))
			}
		}
	}
	return out
}

// parameterInGroup says whether the ParameterGroup labelled group lists
// param.
func (c cfnTemplate) parameterInGroup(param, group string) bool {
	groups := get(c.root, "Metadata", "AWS::CloudFormation::Interface", "ParameterGroups")
	if groups == nil || groups.Kind != yaml.SequenceNode {
		return false
	}
	for _, g := range groups.Content {
		if label := get(g, "Label", "default"); label == nil || label.Value != group {
			continue
		}
		if ps := get(g, "Parameters"); ps != nil && ps.Kind == yaml.SequenceNode {
			for _, n := range ps.Content {
				if n.Value == param {
					return true
				}
			}
		}
	}
	return false
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

func TestTemplateDeadLetterQueueIsConsumedSafely(t *testing.T) {
	t.Parallel()
	c := loadTemplate(t)
	if problems := deadLetterConsumerProblems(c); len(problems) > 0 {
		t.Fatalf("template.yaml:\n%s", strings.Join(problems, "\n"))
	}
	for _, dlq := range []string{"PushPurchaseOrderDeadLetterQueue", "PushSupplierDeadLetterQueue"} {
		if len(c.sqsEventSources()[dlq]) == 0 {
			t.Errorf("template.yaml: nothing consumes %s", dlq)
		}
	}
}

// The dead-letter consumer rules catch what they are for, on small templates.
func TestTemplateDeadLetterRulesCatchTheirCases(t *testing.T) {
	t.Parallel()
	const tmpl = `
Globals:
  Function:
    Timeout: 60
Resources:
  Dlq:
    Type: AWS::SQS::Queue
    Properties:
      MessageRetentionPeriod: %d
      VisibilityTimeout: %d
%s
  Q:
    Type: AWS::SQS::Queue
    Properties:
      MessageRetentionPeriod: 86400
      VisibilityTimeout: 360
      RedrivePolicy: {deadLetterTargetArn: !GetAtt Dlq.Arn, maxReceiveCount: 5}
  Push:
    Type: AWS::Serverless::Function
    Properties:
      Events:
        Queue: {Type: SQS, Properties: {Queue: !GetAtt Q.Arn, FunctionResponseTypes: [ReportBatchItemFailures]}}
%s
`
	const consumer = `  Release:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 30
      Events:
        Dead: {Type: SQS, Properties: {Queue: !GetAtt Dlq.Arn%s}}`
	const reports = ", FunctionResponseTypes: [ReportBatchItemFailures]"
	for _, tc := range []struct {
		name                  string
		retention, visibility int
		dlqExtra, consumer    string
		want                  []string
	}{
		{"consistent", 1209600, 180, "", fmt.Sprintf(consumer, reports), nil},
		{"no consumer", 1209600, 180, "", "", []string{"no function consumes it"}},
		{"visibility under the timeout", 1209600, 20, "", fmt.Sprintf(consumer, reports), []string{"Lambda refuses"}},
		{"visibility under 6 × the timeout", 1209600, 60, "", fmt.Sprintf(consumer, reports), []string{"under 6"}},
		{"no partial batch responses", 1209600, 180, "", fmt.Sprintf(consumer, ""), []string{"ReportBatchItemFailures"}},
		{"retention not longer than the source's", 86400, 180, "", fmt.Sprintf(consumer, reports), []string{"must exceed"}},
		{"redrive back to the source", 1209600, 180,
			"      RedrivePolicy: {deadLetterTargetArn: !GetAtt Q.Arn, maxReceiveCount: 5}", fmt.Sprintf(consumer, reports),
			// Q is then Dlq's dead-letter queue too, so the loop shows from both ends.
			[]string{"leads back to its source Q", "must exceed its source Dlq", "leads back to its source Dlq"}},
	} {
		got := deadLetterConsumerProblems(parseTemplate(t, fmt.Appendf(nil, tmpl, tc.retention, tc.visibility, tc.dlqExtra, tc.consumer)))
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

// Every function gets the settings every function needs (the most
// connections its container opens, the push side's concurrency) from the
// template's parameters, and the parameters agree with internal/config.
func TestTemplateEveryFunctionGetsItsSettings(t *testing.T) {
	t.Parallel()
	if problems := settingProblems(loadTemplate(t), everyFunctionSettings); len(problems) > 0 {
		t.Fatalf("template.yaml:\n%s", strings.Join(problems, "\n"))
	}
}

// The settings rule catches what it is for, on small templates.
func TestTemplateSettingRulesCatchTheirCases(t *testing.T) {
	t.Parallel()
	const tmpl = `
Metadata:
  AWS::CloudFormation::Interface:
    ParameterGroups:
      - Label: { default: Database }
        Parameters: [%s]
Parameters:
  DatabasePoolSize: {Type: %s, Default: %d, MinValue: 1, MaxValue: %d}
Globals:
  Function:
    Environment:
      Variables:
%s
Resources:
  A:
    Type: AWS::Serverless::Function
  B:
    Type: AWS::Serverless::Function
%s
`
	const global = "        DATABASE_POOL_SIZE: !Ref DatabasePoolSize"
	const own = "    Properties:\n      Environment:\n        Variables:\n          DATABASE_POOL_SIZE: \"8\""
	setting := []functionSetting{{env: "DATABASE_POOL_SIZE", param: "DatabasePoolSize", group: "Database", def: 4, lo: 1, hi: 100}}
	for _, tc := range []struct {
		name, group, typ string
		def, max         int
		global, own      string
		want             []string
	}{
		{"consistent", "DatabasePoolSize", "Number", 4, 20, global, "", nil},
		{"not passed", "DatabasePoolSize", "Number", 4, 20, "        OTHER: x", "", []string{"A: DATABASE_POOL_SIZE must be", "B: DATABASE_POOL_SIZE must be"}},
		{"replaced by one function", "DatabasePoolSize", "Number", 4, 20, global, own, []string{"B: DATABASE_POOL_SIZE must be"}},
		{"another default", "DatabasePoolSize", "Number", 10, 20, global, "", []string{"Default 10 is not"}},
		{"a maximum the functions refuse", "DatabasePoolSize", "Number", 4, 200, global, "", []string{"MaxValue 200 is outside"}},
		{"a String", "DatabasePoolSize", "String", 4, 20, global, "", []string{"Type must be Number"}},
		{"in no group", "DatabaseSecretArn", "Number", 4, 20, global, "", []string{"ParameterGroup"}},
	} {
		got := settingProblems(parseTemplate(t, fmt.Appendf(nil, tmpl, tc.group, tc.typ, tc.def, tc.max, tc.global, tc.own)), setting)
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
