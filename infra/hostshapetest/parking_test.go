package hostshapetest

import (
	"context"
	"testing"
	"time"

	"integration-outbox/internal/outbox"
	"integration-outbox/internal/testenv"
)

// TestFollowersAreParkedOnEveryHostShape: on each host shape the contract
// accepts, three commands of one purchase order go one at a time through
// the real outbox statements: the claim that meets the two behind the one
// in flight parks them (each names the one before it), and each recorded end
// makes the next one due, oldest first. The parking writes the host's
// next_attempt_at (a timestamp or a timestamptz beside created_at of either
// type) and reads the entity order index each shape builds.
func TestFollowersAreParkedOnEveryHostShape(t *testing.T) {
	t.Parallel()
	for _, shape := range testenv.HostShapes() {
		if len(shape.Refused) > 0 {
			continue
		}
		t.Run(shape.Name, func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, shape)
			ctx := context.Background()
			order := p.order(t, "PO-P")
			var ids []string
			for i := range 3 {
				var id string
				if err := p.conn.QueryRow(ctx, `select integration_outbox_enqueue($1, $2, 'push_purchase_order',
					'purchase_order', $3, $4::jsonb, $5)::text`, p.org, p.connID, order, `{"externalSupplierId":"SUP-1"}`,
					"purchase_order:"+order+":"+string(rune('a'+i))).Scan(&id); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			s := outbox.NewStore(p.a.Pool)
			params := outbox.ClaimParams{Limit: 10, MaxAttempts: 10, Lease: time.Minute}
			claim := func(step string, want ...string) []outbox.Claim {
				t.Helper()
				b, err := s.ClaimBatch(ctx, params)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if len(b.Claims) != len(want) || (len(want) == 1 && b.Claims[0].ID != want[0]) {
					t.Fatalf("%s: claimed %v, want %v", step, b.Claims, want)
				}
				return b.Claims
			}
			head := claim("first claim", ids[0])
			claim("the claim that parks the followers")
			for i, id := range ids[1:] {
				var waits string
				if err := p.conn.QueryRow(ctx, `select coalesce(waiting_for_outbox_id::text, '') from external_integration_outbox
					where id = $1 and status = 'queued'`, id).Scan(&waits); err != nil {
					t.Fatal(err)
				}
				if waits != ids[i] {
					t.Errorf("follower %d waits for %q, want %s", i+1, waits, ids[i])
				}
			}
			for _, next := range ids[1:] {
				jobs, err := s.Start(ctx, []outbox.StartRequest{{OutboxID: head[0].ID, OrganizationID: head[0].OrganizationID,
					ConnectionID: head[0].ConnectionID, ClaimToken: head[0].ClaimToken}})
				if err != nil || len(jobs) != 1 {
					t.Fatalf("starting %s: %d jobs, %v", head[0].ID, len(jobs), err)
				}
				if _, err := s.Record(ctx, []outbox.Outcome{{OutboxID: head[0].ID, OrganizationID: head[0].OrganizationID,
					ConnectionID: head[0].ConnectionID, ClaimToken: head[0].ClaimToken, Status: outbox.StatusCompleted}}); err != nil {
					t.Fatal(err)
				}
				head = claim("after the end of the one before it", next)
			}
		})
	}
}
