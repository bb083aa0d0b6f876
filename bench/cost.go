package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// AWS list prices, us-east-1, as AWS publishes them for Lambda, SQS and
// Secrets Manager. They are not fetched by the run.
const (
	pricesAsOf = "2025-01 (well-known list prices, not re-fetched by this run)"

	lambdaRequestUSD        = 0.20 / 1e6   // per request
	lambdaGBSecondArm64USD  = 0.0000133334 // per GB-second, arm64, first tier
	lambdaGBSecondX86USD    = 0.0000166667 // per GB-second, x86_64, first tier
	sqsStandardRequestUSD   = 0.40 / 1e6   // per request (64 KiB chunk), standard queue, after the free tier
	secretsManagerCallUSD   = 0.05 / 10000 // per API call
	secretsManagerSecretUSD = 0.40         // per secret per month (not per command: left out of the sums)
)

// lambdaMemory is the memory the functions are given, from template.yaml.
type lambdaMemory struct {
	MB     int
	Arch   string
	Source string
}

var memorySizeRE = regexp.MustCompile(`(?m)^\s*MemorySize:\s*(\d+)\s*$`)

// templateMemory reads the first MemorySize (Globals come first) and the
// architecture of template.yaml; without them, Lambda's default 128 MB and
// the project's default arm64.
func templateMemory(repo string) lambdaMemory {
	m := lambdaMemory{MB: 128, Arch: "arm64", Source: "no template.yaml: Lambda's default 128 MB, arm64 (the Makefile's default ARCH)"}
	b, err := os.ReadFile(filepath.Join(repo, "template.yaml"))
	if err != nil {
		return m
	}
	if strings.Contains(string(b), "x86_64") && !strings.Contains(string(b), "arm64") {
		m.Arch = "x86_64"
	}
	if s := memorySizeRE.FindStringSubmatch(string(b)); s != nil {
		m.MB, _ = strconv.Atoi(s[1])
		m.Source = fmt.Sprintf("template.yaml MemorySize %d MB, %s", m.MB, m.Arch)
	} else {
		m.Source = "template.yaml sets no MemorySize: Lambda's default 128 MB, " + m.Arch
	}
	return m
}

func (m lambdaMemory) gbSecondUSD() float64 {
	if m.Arch == "x86_64" {
		return lambdaGBSecondX86USD
	}
	return lambdaGBSecondArm64USD
}

// cost is one million commands' bill, by service.
type cost struct {
	LambdaRequests, GBSeconds, SQSRequests, SecretCalls float64
}

func (c cost) lambdaUSD(m lambdaMemory) float64 {
	return c.LambdaRequests*lambdaRequestUSD + c.GBSeconds*m.gbSecondUSD()
}
func (c cost) sqsUSD() float64     { return c.SQSRequests * sqsStandardRequestUSD }
func (c cost) secretsUSD() float64 { return c.SecretCalls * secretsManagerCallUSD }
func (c cost) totalUSD(m lambdaMemory) float64 {
	return c.lambdaUSD(m) + c.sqsUSD() + c.secretsUSD()
}

// costPerMillion scales the requests counted for p's jobs to a million
// commands: Lambda invocations (dispatch runs + push batches) and their
// billed GB-seconds (each duration rounded up to 1 ms, as Lambda bills),
// SQS requests (SendMessageBatch calls counted; the event source mapping's
// one ReceiveMessage and one DeleteMessageBatch per batch delivered), and
// Secrets Manager calls. When pushDuration is set it replaces the measured
// push durations (e.g. a batch against a 100 ms provider).
func costPerMillion(p pipelineResult, m lambdaMemory, pushDuration time.Duration) cost {
	scale := 1e6 / float64(p.Jobs)
	billed := func(d time.Duration) float64 { return math.Ceil(float64(d)/float64(time.Millisecond)) / 1000 }
	var seconds float64
	for _, d := range p.DispatchRuns {
		seconds += billed(d)
	}
	for _, d := range p.PushRuns {
		if pushDuration > 0 {
			d = pushDuration
		}
		seconds += billed(d)
	}
	batches := float64(len(p.PushRuns))
	return cost{
		LambdaRequests: float64(len(p.DispatchRuns)+len(p.PushRuns)) * scale,
		GBSeconds:      seconds * float64(m.MB) / 1024 * scale,
		SQSRequests:    (float64(p.SendBatchCalls) + 2*batches) * scale,
		SecretCalls:    float64(p.secretCalls()) * scale,
	}
}
