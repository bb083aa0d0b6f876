package main

import "testing"

// -pg-setting takes name=value and nothing else, each one added in order.
func TestSettingListTakesNameEqualsValue(t *testing.T) {
	var l settingList
	for _, bad := range []string{"", "track", "=top"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("-pg-setting %q was taken", bad)
		}
	}
	for _, good := range []string{"pg_stat_statements.track=top", "auto_explain.log_min_duration=0"} {
		if err := l.Set(good); err != nil {
			t.Errorf("-pg-setting %q: %v", good, err)
		}
	}
	if got := l.String(); got != "pg_stat_statements.track=top auto_explain.log_min_duration=0" {
		t.Errorf("settings %q", got)
	}
}
