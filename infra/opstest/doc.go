// Package opstest checks template.yaml's operations resources against the
// code and against the rules AWS applies that cfn-lint, SAM's translator and
// moto do not: every metric an alarm or the dashboard names is one the
// functions emit (captured from the real emitters), each function's logging,
// tracing and role agree, the schedule's dead-letter queue is writable by
// its role and watched, README's alarm table matches the template, and in a
// simulated provider outage the failure-ratio alarm fires before the
// dead-letter alarm. It holds tests only.
package opstest
