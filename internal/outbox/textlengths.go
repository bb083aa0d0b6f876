package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// textLengths are the declared lengths of the host outbox's text columns
// the record writes (last_error, provider_reference, provider_status),
// read once per store. The record cuts what it sends to them in Go rather
// than in SQL: integration_outbox_fit in the record's update cost about
// 0.5 ms a command under load (bench/results.md, "The record on the host's
// real tables"). A host that shortens a column later makes one record fail
// with 22001; the store then reads them again and records again.
type textLengths struct {
	mu     sync.Mutex
	loaded bool
	max    map[string]int // column → characters; absent: no length
}

// get returns the lengths, reading them on the first call (or after reset).
func (l *textLengths) get(ctx context.Context, db DB) (map[string]int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded {
		return l.max, nil
	}
	rows, err := db.Query(ctx, textLengthsSQL)
	if err != nil {
		return nil, fmt.Errorf("reading the outbox's text lengths: %w", err)
	}
	defer rows.Close()
	max := map[string]int{}
	for rows.Next() {
		var col string
		var n int
		if err := rows.Scan(&col, &n); err != nil {
			return nil, fmt.Errorf("reading the outbox's text lengths: %w", err)
		}
		max[col] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the outbox's text lengths: %w", err)
	}
	l.max, l.loaded = max, true
	return max, nil
}

// ReadTextLengths reads the host outbox's text lengths the record cuts to,
// now rather than at the first record: a container reads them once as it
// starts, so that every push batch is three statements (start, load,
// record). A failure is only returned: the first record reads them again.
func (s *Store) ReadTextLengths(ctx context.Context) error {
	s.lengths.reset()
	_, err := s.lengths.get(ctx, s.db)
	return err
}

// reset makes the next get read the lengths again.
func (l *textLengths) reset() {
	l.mu.Lock()
	l.loaded = false
	l.mu.Unlock()
}

// isTooLong reports a value longer than its column (22001).
func isTooLong(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "22001"
}

// cut is s in at most n characters, its last kept character replaced by
// "…" when it was cut, as integration_outbox_fit cuts (migration 18); n 0:
// no length.
func cut(s *string, n int) *string {
	if s == nil || n <= 0 {
		return s
	}
	r := []rune(*s)
	if len(r) <= n {
		return s
	}
	c := string(r[:n-1]) + "…"
	return &c
}

// fit cuts the row's texts to the lengths.
func (r recordRow) fit(max map[string]int) recordRow {
	r.ProviderReference = cut(r.ProviderReference, max["provider_reference"])
	r.ProviderStatus = cut(r.ProviderStatus, max["provider_status"])
	r.LastError = cut(r.LastError, max["last_error"])
	return r
}
