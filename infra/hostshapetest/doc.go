// Package hostshapetest runs the whole pipeline through the real handlers
// (dispatch, push, rerun, inspect, built by internal/app as the functions
// build them) on host databases as ORMs and the old worker's migrations
// create them (internal/testenv.HostShapes), each installed by make
// migrate's code and checked by the schema check first, against real
// PostgreSQL, moto_server and a webhook receiver. Its tests are its only
// content.
package hostshapetest
