// Package lambdatest is the SAM-local parity check for a machine without
// Docker. Its tests build each function's real bootstrap, run it under the
// AWS Lambda Runtime Interface Emulator (aws-lambda-rie, the runtime API that
// `sam local invoke` puts in front of a function) against a throwaway
// PostgreSQL and moto_server, invoke it with every file in the function's
// events/ folder, and check the responses and the database effects. They also
// check that every function folder has its build-<LogicalId> Makefile target
// and its sample events.
//
// The emulator comes from AWS_LAMBDA_RIE, else ./bin/aws-lambda-rie (make
// tools), else it is installed from the Go module proxy into a temporary
// directory. First-invoke latencies are logged: go test -v -run RIE ./infra/lambdatest
package lambdatest
