package purchaseorder

// LoadStatement returns the statement Load runs: the bench's River harness
// (bench/river) runs the same text per job, with arrays of one element, so
// that River and the push worker race on the same purchase-order load.
func LoadStatement() string { return loadSQL }
