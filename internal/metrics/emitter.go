// Package metrics writes CloudWatch Embedded Metric Format (EMF) lines to the
// function's stdout: CloudWatch Logs extracts them into metrics, so counting
// costs no API call. Metrics are dimensioned by function and provider, never
// by tenant id (that would be one metric per organization).
package metrics

import (
	"encoding/json"
	"io"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every metric.
const Namespace = "IntegrationOutbox"

// Units used here (EMF accepts CloudWatch's unit names).
const (
	Count        = "Count"
	Milliseconds = "Milliseconds"
)

// Value is one metric: a name, a unit and one or more observations (EMF
// allows up to 100 values per metric per line).
type Value struct {
	Name   string
	Unit   string
	Values []float64
}

// Emitter writes EMF lines. A nil *Emitter emits nothing.
type Emitter struct {
	mu       sync.Mutex
	w        io.Writer
	function string
	now      func() time.Time
}

// NewEmitter returns an emitter for function writing to w (nil: discard).
func NewEmitter(w io.Writer, function string) *Emitter {
	if w == nil {
		w = io.Discard
	}
	return &Emitter{w: w, function: function, now: time.Now}
}

type metricDef struct {
	Name string `json:"Name"`
	Unit string `json:"Unit,omitempty"`
}

type directive struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []metricDef `json:"Metrics"`
}

type metadata struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

// maxValues is EMF's limit of values per metric per line.
const maxValues = 100

// Emit writes the values, dimensioned by Function and, when provider is not
// empty, by Provider. Values with no observations are left out.
func (e *Emitter) Emit(provider string, values ...Value) error {
	if e == nil {
		return nil
	}
	for len(values) > 0 {
		line, rest := e.line(provider, values)
		values = rest
		if line == nil {
			continue
		}
		b, err := json.Marshal(line)
		if err != nil {
			return err
		}
		e.mu.Lock()
		_, err = e.w.Write(append(b, '\n'))
		e.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// line builds one EMF document; values over the per-line limit are returned
// for the next line.
func (e *Emitter) line(provider string, values []Value) (map[string]any, []Value) {
	doc := map[string]any{"Function": e.function}
	dims := []string{"Function"}
	if provider != "" {
		doc["Provider"] = provider
		dims = append(dims, "Provider")
	}
	var defs []metricDef
	var rest []Value
	for _, v := range values {
		if len(v.Values) == 0 {
			continue
		}
		obs := v.Values
		if len(obs) > maxValues {
			rest = append(rest, Value{Name: v.Name, Unit: v.Unit, Values: obs[maxValues:]})
			obs = obs[:maxValues]
		}
		defs = append(defs, metricDef{Name: v.Name, Unit: v.Unit})
		if len(obs) == 1 {
			doc[v.Name] = obs[0]
		} else {
			doc[v.Name] = obs
		}
	}
	if len(defs) == 0 {
		return nil, rest
	}
	doc["_aws"] = metadata{Timestamp: e.now().UnixMilli(), CloudWatchMetrics: []directive{{
		Namespace: Namespace, Dimensions: [][]string{dims}, Metrics: defs}}}
	return doc, rest
}

// Counter is a shorthand for a count metric with one observation.
func Counter(name string, n int) Value {
	return Value{Name: name, Unit: Count, Values: []float64{float64(n)}}
}
