package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"integration-outbox/internal/metrics/metricstest"
)

func TestEmitWritesValidEMF(t *testing.T) {
	var buf bytes.Buffer
	e := NewEmitter(&buf, "push-purchase-order")
	e.now = func() time.Time { return time.UnixMilli(1_700_000_000_123) }
	latencies := make([]float64, 150)
	for i := range latencies {
		latencies[i] = float64(i)
	}
	if err := e.Emit("webhook", Counter("Completed", 3), Counter("Failed", 0),
		Value{Name: "ProviderLatency", Unit: Milliseconds, Values: latencies}, Value{Name: "Empty", Unit: Count}); err != nil {
		t.Fatal(err)
	}
	if err := e.Emit("", Counter("DuplicateDeliveriesIgnored", 2)); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != 3 { // 150 latencies split over two lines
		t.Fatalf("%d lines, want 3:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if err := metricstest.Validate([]byte(l)); err != nil {
			t.Errorf("invalid EMF %s: %v", l, err)
		}
	}
	var first map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	if first["Function"] != "push-purchase-order" || first["Provider"] != "webhook" || first["Completed"] != 3.0 ||
		len(first["ProviderLatency"].([]any)) != 100 || first["Empty"] != nil {
		t.Errorf("first line %s", lines[0])
	}
	if !strings.Contains(lines[0], `"Timestamp":1700000000123`) || !strings.Contains(lines[0], `"Dimensions":[["Function","Provider"]]`) {
		t.Errorf("metadata: %s", lines[0])
	}
	if !strings.Contains(lines[2], `"Dimensions":[["Function"]]`) || strings.Contains(lines[2], "Provider") {
		t.Errorf("function-level line: %s", lines[2])
	}
}

func TestNilEmitterIsANoOp(t *testing.T) {
	var e *Emitter
	if err := e.Emit("x", Counter("C", 1)); err != nil {
		t.Fatal(err)
	}
}
