// Package statebench measures state saves and reads per backend at topology scale (10,000
// resources): `go test -bench . ./bench/state/` or ./run.sh. It holds no assertions on time.
package statebench
