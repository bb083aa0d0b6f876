package metricstest_test

import (
	"testing"

	"integration-outbox/internal/metrics/metricstest"
)

func TestValidatorRejectsBrokenShapes(t *testing.T) {
	for _, bad := range []string{
		`{"Function":"f","X":1}`,
		`{"_aws":{"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[["Function"]],"Metrics":[{"Name":"X"}]}]},"Function":"f","X":1}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[["Function"]],"Metrics":[{"Name":"X"}]}]},"X":1}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[["Function"]],"Metrics":[{"Name":"X"}]}]},"Function":"f"}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Dimensions":[["Function"]],"Metrics":[{"Name":"X"}]}]},"Function":"f","X":1}`,
		`{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"n","Dimensions":[["Function"]],"Metrics":[{"Name":"X"}]}]},"Function":"f","X":"many"}`,
	} {
		if metricstest.Validate([]byte(bad)) == nil {
			t.Errorf("validator accepted %s", bad)
		}
	}
}
