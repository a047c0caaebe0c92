#!/usr/bin/env bash
# State save/read benchmarks at 10,000 resources per backend (local, sqlite, and postgres when
# SYSBOX_TEST_PG_DSN names a PostgreSQL). Target: a local save under 100 ms.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH
go test -run '^$' -bench . -benchtime "${BENCHTIME:-10x}" -count "${COUNT:-1}" ./bench/state/ | tee "${OUT:-/dev/null}"
