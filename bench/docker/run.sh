#!/usr/bin/env bash
# Side-by-side benchmark: the sysbox docker driver (N containers created+started, then deleted,
# in parallel) against a sequential `docker run -d` / `docker rm -f` loop of the same busybox
# image. Needs root, dockerd running, the docker CLI and busybox-static. Not a test: it reports.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/go/bin:$PATH
docker version >/dev/null 2>&1 || { echo "dockerd is not running (start it: dockerd >/tmp/dockerd.log 2>&1 &)" >&2; exit 1; }
exec go run ./bench/docker "$@"
