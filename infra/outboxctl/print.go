package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"integration-outbox/internal/report"
)

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func printRows(w io.Writer, rows []report.Row) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no rows")
		return
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tORGANIZATION\tSTATUS\tATTEMPTS\tNEXT ATTEMPT\tPROVIDER STATUS\tCREATED\tCOMMAND\tCONNECTION\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d (%d left)\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.OrganizationID, r.Status,
			r.AttemptCount, r.AttemptsLeft, nextAttempt(r), dash(r.ProviderStatus), stamp(&r.CreatedAt),
			dash(r.CommandType), dash(r.ConnectionID), dash(oneLine(r.LastError, 80)))
	}
	tw.Flush()
}

// nextAttempt says when a queued or failed row is claimed next.
func nextAttempt(r report.Row) string {
	if r.Status != "queued" && r.Status != "failed" {
		return "-"
	}
	if r.AttemptsLeft == 0 {
		return "never (no attempts left)"
	}
	if r.NextAttemptAt == nil || !r.NextAttemptAt.After(time.Now()) {
		return "due now"
	}
	return stamp(r.NextAttemptAt)
}

func printDetail(w io.Writer, d report.Detail) {
	fmt.Fprintln(w, "row")
	tw := table(w)
	for _, c := range d.Columns {
		fmt.Fprintf(tw, "  %s\t%s\n", c.Name, jsonValue(c.Value))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nattempts (%d)\n", len(d.Attempts))
	if len(d.Attempts) > 0 {
		tw = table(w)
		fmt.Fprintln(tw, "  #\tSTARTED\tFINISHED\tOUTCOME\tHTTP\tPROVIDER STATUS\tREFERENCE\tERROR")
		for _, a := range d.Attempts {
			code := "no call"
			if a.ProviderCalled {
				code = "-"
			}
			if a.HTTPStatus != nil {
				code = fmt.Sprint(*a.HTTPStatus)
			}
			if a.OutcomeUnknown {
				code += " (outcome unknown)"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, stamp(a.StartedAt), stamp(a.FinishedAt),
				a.Outcome, code, dash(a.ProviderStatus), dash(a.ProviderReference), dash(oneLine(a.ErrorExcerpt, 80)))
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nconflicts (%d)\n", len(d.Conflicts))
	if len(d.Conflicts) > 0 {
		tw = table(w)
		fmt.Fprintln(tw, "  ID\tTYPE\tSEVERITY\tSTATUS\tCREATED\tRESOLVED\tRESOLUTION\tSUMMARY")
		for _, c := range d.Conflicts {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ID, c.ConflictType, c.Severity, c.Status,
				stamp(&c.CreatedAt), stamp(c.ResolvedAt), dash(oneLine(c.ResolutionReason, 60)), dash(oneLine(c.Summary, 80)))
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\nhistory: reruns (%d)\n", len(d.History))
	if len(d.History) > 0 {
		tw = table(w)
		fmt.Fprintln(tw, "  AT\tOUTCOME\tREQUESTED BY\tDISPATCH NOW\tREASON\tAUDIT ID")
		for _, e := range d.History {
			outcome := "requeued"
			if !e.Requeued {
				outcome = "skipped: " + e.SkipReason
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%t\t%s\t%s\n", stamp(&e.CreatedAt), outcome, dash(e.RequestedBy),
				e.DispatchNow, oneLine(e.Reason, 80), e.AuditID)
		}
		tw.Flush()
	}
}

func printStuck(w io.Writer, s report.Stuck, accepted, overdue time.Duration) {
	for i, sec := range []struct {
		title string
		s     report.Section
	}{
		{"processing with an expired lease (the next dispatch claims them again, or dead-letters them with no attempts left)", s.ExpiredLeases},
		{"accepted by the provider, waiting longer than " + accepted.String(), s.AcceptedWaiting},
		{"queued and due for longer than " + overdue.String() + " (is the scheduled dispatch running?)", s.OverdueQueued},
		{"failed, waiting for their next attempt", s.Failed},
	} {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s: %d\n", sec.title, sec.s.Total)
		if len(sec.s.Rows) > 0 {
			printRows(w, sec.s.Rows)
			if sec.s.Total > len(sec.s.Rows) {
				fmt.Fprintf(w, "(%d more: raise -limit)\n", sec.s.Total-len(sec.s.Rows))
			}
		}
	}
	c := s.Circuits
	fmt.Fprintf(w, "\nconnections with a tripped or failing circuit (open: rows held back, using no attempts; half-open: one probe row): %d\n", c.Total)
	if len(c.Circuits) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CONNECTION\tORGANIZATION\tPROVIDER\tSTATE\tFAILURES\tOPENED\tOPEN UNTIL\tWAITING ROWS")
		for _, x := range c.Circuits {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\n", x.ConnectionID, x.OrganizationID, dash(x.Provider),
				x.State, x.ConsecutiveFailures, x.OpenedCount, stamp(x.OpenUntil), x.Waiting)
		}
		tw.Flush()
		if c.Total > len(c.Circuits) {
			fmt.Fprintf(w, "(%d more: raise -limit)\n", c.Total-len(c.Circuits))
		}
	}
	fmt.Fprintf(w, "\nconnections disabled (rows held until enabled: rerun enableConnection), unauthorized (held until its credentials are replaced) or failing: %d\n", len(s.Connections))
	if len(s.Connections) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CONNECTION\tORGANIZATION\tPROVIDER\tSTATE\tSINCE\tFAILING SINCE\tWAITING ROWS\tWHY")
		for _, x := range s.Connections {
			since := x.Since
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", x.ConnectionID, x.OrganizationID, dash(x.Provider),
				x.State, stamp(&since), stamp(x.FailingSince), x.Waiting, dash(x.Reason))
		}
		tw.Flush()
	}
	o := s.OldWorker
	fmt.Fprintf(w, "\nleft in processing by the old worker, waiting for the lease or follow-up time make migrate gave them: %d\n", o.Total)
	if len(o.Rows) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tATTEMPTS\tAT\tWHAT HAPPENS")
		for _, l := range o.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", l.ID, l.Kind, l.AttemptCount, stamp(l.NextAt), l.Next)
		}
		tw.Flush()
	}
}

// jsonValue prints a column value: strings without quotes, null as "-".
func jsonValue(v json.RawMessage) string {
	s := string(v)
	if s == "null" {
		return "-"
	}
	var str string
	if strings.HasPrefix(s, `"`) && json.Unmarshal(v, &str) == nil {
		return oneLine(str, 0)
	}
	return s
}

func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a value on one table line, cut to n runes when n > 0.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); n > 0 && len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
