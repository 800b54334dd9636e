#!/usr/bin/env bash
# Starts (or stops) the Redis servers the remote tier's tests use, on loopback:
# a standalone server on 6390 and a 3-node cluster on 7001-7003, data under
# ${KVTIER_REDIS_DIR:-/tmp/kvtier-redis}. Prints the environment the tests read:
#   eval "$(.ci/redis.sh start)"; go test ./remote/; .ci/redis.sh stop
set -euo pipefail
dir=${KVTIER_REDIS_DIR:-/tmp/kvtier-redis}
cmd=${1:-start}
if [ "$cmd" = stop ]; then
  for p in 6390 7001 7002 7003; do redis-cli -p $p shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$dir"
  exit 0
fi
command -v redis-server >/dev/null || { echo "redis-server is not installed (apt-get install redis-server)" >&2; exit 1; }
mkdir -p "$dir"
start() { # port, extra args
  local p=$1; shift
  mkdir -p "$dir/$p"
  redis-server --port "$p" --bind 127.0.0.1 --dir "$dir/$p" --save '' --appendonly no \
    --maxmemory 512mb --maxmemory-policy allkeys-lru --enable-debug-command local \
    --daemonize yes --logfile "$dir/$p/log" "$@" >&2
}
start 6390
for p in 7001 7002 7003; do start $p --cluster-enabled yes --cluster-config-file "$dir/$p/nodes.conf" --cluster-node-timeout 2000; done
for p in 6390 7001 7002 7003; do
  for _ in $(seq 50); do redis-cli -p $p ping >/dev/null 2>&1 && break; sleep 0.1; done
done
if ! redis-cli -p 7001 cluster info 2>/dev/null | grep -q 'cluster_state:ok'; then
  redis-cli --cluster create 127.0.0.1:7001 127.0.0.1:7002 127.0.0.1:7003 --cluster-replicas 0 --cluster-yes >&2
  for _ in $(seq 100); do redis-cli -p 7001 cluster info | grep -q 'cluster_state:ok' && break; sleep 0.1; done
fi
echo "export KVTIER_REDIS=127.0.0.1:6390 KVTIER_REDIS_CLUSTER=127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"
