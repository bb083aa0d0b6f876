// Package metricstest checks the metric lines internal/metrics writes
// against the CloudWatch Embedded Metric Format; tests use it, the functions
// do not.
package metricstest

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Validate checks one line against the EMF specification's required
// shape: a root "_aws" object with an integer Timestamp (ms) and a
// CloudWatchMetrics array of directives, each with a Namespace, Dimensions
// (arrays of at most 30 dimension keys that are root members with string
// values) and Metrics (each Name a root member holding a number or an array
// of at most 100 numbers; Unit, when given, a CloudWatch unit).
func Validate(line []byte) error {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(line, &doc); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	var meta struct {
		Timestamp         *json.Number `json:"Timestamp"`
		CloudWatchMetrics []struct {
			Namespace  *string    `json:"Namespace"`
			Dimensions [][]string `json:"Dimensions"`
			Metrics    []struct {
				Name *string `json:"Name"`
				Unit string  `json:"Unit"`
			} `json:"Metrics"`
		} `json:"CloudWatchMetrics"`
	}
	raw, ok := doc["_aws"]
	if !ok {
		return fmt.Errorf("no _aws member")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&meta); err != nil {
		return fmt.Errorf("_aws: %w", err)
	}
	if meta.Timestamp == nil {
		return fmt.Errorf("_aws.Timestamp missing")
	}
	if _, err := meta.Timestamp.Int64(); err != nil {
		return fmt.Errorf("_aws.Timestamp not an integer")
	}
	if len(meta.CloudWatchMetrics) == 0 {
		return fmt.Errorf("_aws.CloudWatchMetrics empty")
	}
	units := map[string]bool{"": true, "Count": true, "Milliseconds": true, "Seconds": true, "None": true}
	for _, d := range meta.CloudWatchMetrics {
		if d.Namespace == nil || *d.Namespace == "" {
			return fmt.Errorf("directive without Namespace")
		}
		if d.Dimensions == nil {
			return fmt.Errorf("directive without Dimensions")
		}
		for _, set := range d.Dimensions {
			if len(set) > 30 {
				return fmt.Errorf("dimension set over 30 keys")
			}
			for _, k := range set {
				var s string
				if err := json.Unmarshal(doc[k], &s); err != nil {
					return fmt.Errorf("dimension %q is not a string root member", k)
				}
			}
		}
		if len(d.Metrics) == 0 || len(d.Metrics) > 100 {
			return fmt.Errorf("directive has %d metrics", len(d.Metrics))
		}
		for _, m := range d.Metrics {
			if m.Name == nil || *m.Name == "" {
				return fmt.Errorf("metric without Name")
			}
			if !units[m.Unit] {
				return fmt.Errorf("metric %s: unit %q", *m.Name, m.Unit)
			}
			v, ok := doc[*m.Name]
			if !ok {
				return fmt.Errorf("metric %s has no root member", *m.Name)
			}
			var f float64
			var fs []float64
			if json.Unmarshal(v, &f) != nil && (json.Unmarshal(v, &fs) != nil || len(fs) > 100) {
				return fmt.Errorf("metric %s: %s is not a number or an array of ≤100 numbers", *m.Name, v)
			}
		}
	}
	return nil
}
