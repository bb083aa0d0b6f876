package push

// CheckIdempotencyKey is the worker's key rule, for the test that holds the
// enqueue function to it.
var CheckIdempotencyKey = checkIdempotencyKey
