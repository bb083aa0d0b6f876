package main

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestClusterCPUNeverGoesBack: children that burn CPU and exit while the
// sampler reads them never make a later reading smaller than an earlier
// one (their time moves from the live children to the reaped total; read
// across that moment it was lost or counted twice).
func TestClusterCPUNeverGoesBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			// A child that works for a few ticks, then exits and is reaped.
			cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
			if err := cmd.Run(); err != nil {
				t.Errorf("child: %v", err)
				return
			}
		}
	}()
	self := os.Getpid()
	prev := clusterCPU(self)
	for ctx.Err() == nil {
		now := clusterCPU(self)
		if now < prev {
			t.Errorf("reading went back from %v to %v", prev, now)
		}
		prev = now
	}
	<-done
	if prev == 0 {
		t.Fatal("no CPU time read at all")
	}
}
