package opstest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// This file evaluates the template's alarms over metric data the functions
// emitted, one datapoint per alarm period, the way CloudWatch does for the
// subset the template uses: Sum statistics, metric math with + - * /,
// comparisons, FILL and IF, GreaterThanThreshold, EvaluationPeriods and
// DatapointsToAlarm ("M of N"), and missing data as not breaching.

// periodData is the metric data of one alarm period: the emitted values
// summed by metric and dimensions.
type periodData map[string]float64

func seriesKey(ns, name string, dims map[string]string) string {
	keys := sortedKeys(dims)
	parts := []string{ns, name}
	for _, k := range keys {
		parts = append(parts, k+"="+dims[k])
	}
	return strings.Join(parts, "|")
}

func sumPeriod(lines []emfLine) periodData {
	d := periodData{}
	for _, l := range lines {
		for name, vs := range l.Values {
			k := seriesKey(l.Namespace, name, l.Dims)
			for _, v := range vs {
				d[k] += v
			}
		}
	}
	return d
}

// alarmDef is what the evaluator needs of an AWS::CloudWatch::Alarm.
type alarmDef struct {
	id                  string
	threshold           float64
	evaluation, toAlarm int
	// datapoint computes the alarm's value for a period; NaN is missing.
	datapoint func(periodData) float64
}

func toFloat(t *testing.T, v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case float64:
		return x
	case string:
		f, err := strconv.ParseFloat(x, 64)
		if err == nil {
			return f
		}
	}
	t.Fatalf("not a number: %v", v)
	return 0
}

// alarmDefs reads the template's alarms on our namespace (AWS metrics have
// no data here: not breaching).
func alarmDefs(t *testing.T, tp tmpl) map[string]alarmDef {
	t.Helper()
	out := map[string]alarmDef{}
	for id, a := range tp.ofType("AWS::CloudWatch::Alarm") {
		if a["ComparisonOperator"] != "GreaterThanThreshold" {
			t.Fatalf("%s: the evaluator knows GreaterThanThreshold only, got %v", id, a["ComparisonOperator"])
		}
		def := alarmDef{id: id, threshold: toFloat(t, tp.paramDefault(a["Threshold"])), evaluation: a["EvaluationPeriods"].(int)}
		def.toAlarm = def.evaluation
		if n, ok := a["DatapointsToAlarm"].(int); ok {
			def.toAlarm = n
		}
		series := func(ns, name string, dims any, stat any) func(periodData) float64 {
			if stat != "Sum" {
				t.Fatalf("%s: the evaluator knows Sum only, got %v", id, stat)
			}
			k := seriesKey(ns, name, dimsOf(dims))
			return func(d periodData) float64 {
				if v, ok := d[k]; ok {
					return v
				}
				return math.NaN()
			}
		}
		if name, ok := a["MetricName"].(string); ok {
			if a["Namespace"] != "IntegrationOutbox" {
				continue
			}
			def.datapoint = series(a["Namespace"].(string), name, a["Dimensions"], a["Statistic"])
		} else {
			ids := map[string]func(periodData) float64{}
			exprs := map[string]string{}
			var result string
			for _, m := range anySlice(a["Metrics"]) {
				mid := get(m, "Id").(string)
				if ms := get(m, "MetricStat"); ms != nil {
					ids[mid] = series(get(ms, "Metric", "Namespace").(string), get(ms, "Metric", "MetricName").(string),
						get(ms, "Metric", "Dimensions"), get(ms, "Stat"))
				} else {
					exprs[mid] = get(m, "Expression").(string)
				}
				if get(m, "ReturnData") == true {
					result = mid
				}
			}
			def.datapoint = func(d periodData) float64 {
				vals := map[string]float64{}
				for k, f := range ids {
					vals[k] = f(d)
				}
				var eval func(string) float64
				eval = func(id string) float64 {
					if v, ok := vals[id]; ok {
						return v
					}
					v, err := evalExpr(exprs[id], func(name string) (float64, error) {
						if _, ok := vals[name]; !ok && exprs[name] == "" {
							return 0, fmt.Errorf("unknown id %s", name)
						}
						return eval(name), nil
					})
					if err != nil {
						t.Fatalf("%s: %s: %v", id, exprs[id], err)
					}
					vals[id] = v
					return v
				}
				return eval(result)
			}
		}
		out[id] = def
	}
	return out
}

// firesAt returns the first period index at which the alarm is in ALARM,
// or -1.
func (a alarmDef) firesAt(periods []periodData) int {
	var breaching []bool
	for i, p := range periods {
		v := a.datapoint(p)
		breaching = append(breaching, !math.IsNaN(v) && v > a.threshold) // missing: notBreaching
		n := 0
		for j := max(0, i-a.evaluation+1); j <= i; j++ {
			if breaching[j] {
				n++
			}
		}
		if n >= a.toAlarm {
			return i
		}
	}
	return -1
}

// evalExpr evaluates a metric-math expression: numbers, ids, + - * /,
// comparisons (1 or 0), parentheses, FILL(x, v) and IF(c, a, b). A missing
// value is NaN and propagates, as CloudWatch drops the datapoint.
func evalExpr(src string, lookup func(string) (float64, error)) (float64, error) {
	p := &exprParser{src: src, lookup: lookup}
	p.next()
	v, err := p.comparison()
	if err == nil && p.tok != "" {
		err = fmt.Errorf("unexpected %q", p.tok)
	}
	return v, err
}

type exprParser struct {
	src    string
	pos    int
	tok    string
	lookup func(string) (float64, error)
}

func (p *exprParser) next() {
	for p.pos < len(p.src) && p.src[p.pos] == ' ' {
		p.pos++
	}
	if p.pos >= len(p.src) {
		p.tok = ""
		return
	}
	start := p.pos
	c := rune(p.src[p.pos])
	switch {
	case unicode.IsLetter(c) || unicode.IsDigit(c) || c == '.' || c == '_':
		for p.pos < len(p.src) && (unicode.IsLetter(rune(p.src[p.pos])) || unicode.IsDigit(rune(p.src[p.pos])) || p.src[p.pos] == '.' || p.src[p.pos] == '_') {
			p.pos++
		}
	case strings.HasPrefix(p.src[p.pos:], ">=") || strings.HasPrefix(p.src[p.pos:], "<=") || strings.HasPrefix(p.src[p.pos:], "=="):
		p.pos += 2
	default:
		p.pos++
	}
	p.tok = p.src[start:p.pos]
}

func (p *exprParser) comparison() (float64, error) {
	l, err := p.additive()
	if err != nil {
		return 0, err
	}
	op := p.tok
	if op != ">" && op != ">=" && op != "<" && op != "<=" && op != "==" {
		return l, nil
	}
	p.next()
	r, err := p.additive()
	if err != nil {
		return 0, err
	}
	if math.IsNaN(l) || math.IsNaN(r) {
		return math.NaN(), nil
	}
	ok := map[string]bool{">": l > r, ">=": l >= r, "<": l < r, "<=": l <= r, "==": l == r}[op]
	if ok {
		return 1, nil
	}
	return 0, nil
}

func (p *exprParser) additive() (float64, error) {
	l, err := p.multiplicative()
	for err == nil && (p.tok == "+" || p.tok == "-") {
		op := p.tok
		p.next()
		var r float64
		if r, err = p.multiplicative(); op == "+" {
			l += r
		} else {
			l -= r
		}
	}
	return l, err
}

func (p *exprParser) multiplicative() (float64, error) {
	l, err := p.primary()
	for err == nil && (p.tok == "*" || p.tok == "/") {
		op := p.tok
		p.next()
		var r float64
		if r, err = p.primary(); op == "*" {
			l *= r
		} else if r == 0 {
			l = math.NaN()
		} else {
			l /= r
		}
	}
	return l, err
}

func (p *exprParser) primary() (float64, error) {
	tok := p.tok
	p.next()
	switch {
	case tok == "(":
		v, err := p.comparison()
		if err == nil && p.tok != ")" {
			err = fmt.Errorf("missing )")
		}
		p.next()
		return v, err
	case tok == "":
		return 0, fmt.Errorf("unexpected end")
	case unicode.IsDigit(rune(tok[0])):
		return strconv.ParseFloat(tok, 64)
	case p.tok == "(":
		p.next()
		var args []float64
		for {
			v, err := p.comparison()
			if err != nil {
				return 0, err
			}
			args = append(args, v)
			if p.tok == ")" {
				p.next()
				break
			}
			if p.tok != "," {
				return 0, fmt.Errorf("%s: want , or )", tok)
			}
			p.next()
		}
		switch {
		case tok == "FILL" && len(args) == 2:
			if math.IsNaN(args[0]) {
				return args[1], nil
			}
			return args[0], nil
		case tok == "IF" && len(args) == 3:
			if math.IsNaN(args[0]) {
				return math.NaN(), nil
			}
			if args[0] != 0 {
				return args[1], nil
			}
			return args[2], nil
		}
		return 0, fmt.Errorf("function %s/%d unknown to the evaluator", tok, len(args))
	default:
		return p.lookup(tok)
	}
}

func TestExpressionEvaluator(t *testing.T) {
	t.Parallel()
	vals := map[string]float64{"a": 3, "b": 1, "gone": math.NaN()}
	look := func(n string) (float64, error) { return vals[n], nil }
	for expr, want := range map[string]float64{
		"a + b * 2": 5, "(a + b) * 2": 8, "IF(a >= 3, 100 * b / a, 0)": 100.0 / 3, "IF(a >= 5, 1, 0)": 0,
		"FILL(gone, 7) + a": 10, "a / 0 + 1": math.NaN(),
	} {
		got, err := evalExpr(expr, look)
		if err != nil || (got != want && !(math.IsNaN(got) && math.IsNaN(want))) {
			t.Errorf("%s = %v, %v; want %v", expr, got, err, want)
		}
	}
	a := alarmDef{threshold: 0, evaluation: 3, toAlarm: 2, datapoint: func(d periodData) float64 {
		if v, ok := d["x"]; ok {
			return v
		}
		return math.NaN()
	}}
	if got := a.firesAt([]periodData{{"x": 1}, {}, {"x": 0}, {"x": 2}, {"x": 3}}); got != 4 {
		t.Errorf("2 of 3 fired at %d, want 4 (missing data is not breaching)", got)
	}
}
