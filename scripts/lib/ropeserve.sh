# Sourced by scripts that need a ropeserve process on 127.0.0.1 (demo,
# benchmarks). Not executable on its own.
#
#   start_ropeserve BINARY [FLAGS...]  starts BINARY --listen=127.0.0.1:0 FLAGS,
#       waits (at most 30 s) for its "listening on HOST:PORT" line and sets
#       ROPESERVE_PID and ROPESERVE_TARGET; on failure prints the server's log
#       and returns 1.
#   stop_ropeserve                     sends SIGTERM and waits; returns the
#       server's exit status (0 after a clean drain).

ROPESERVE_PID=""
ROPESERVE_TARGET=""
ROPESERVE_LOG=""

start_ropeserve() {
  local binary=$1
  shift
  ROPESERVE_LOG=$(mktemp)
  "$binary" --listen=127.0.0.1:0 "$@" >"$ROPESERVE_LOG" 2>&1 &
  ROPESERVE_PID=$!
  for _ in $(seq 1 300); do
    ROPESERVE_TARGET=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$ROPESERVE_LOG" | head -n1)
    [ -n "$ROPESERVE_TARGET" ] && return 0
    if ! kill -0 "$ROPESERVE_PID" 2>/dev/null; then
      cat "$ROPESERVE_LOG" >&2
      echo "ropeserve exited before it listened" >&2
      return 1
    fi
    sleep 0.1
  done
  cat "$ROPESERVE_LOG" >&2
  echo "ropeserve did not start listening in 30 s" >&2
  return 1
}

stop_ropeserve() {
  local status=0
  if [ -n "$ROPESERVE_PID" ]; then
    kill -TERM "$ROPESERVE_PID" 2>/dev/null || true
    wait "$ROPESERVE_PID" 2>/dev/null || status=$?
    ROPESERVE_PID=""
  fi
  [ -n "$ROPESERVE_LOG" ] && rm -f "$ROPESERVE_LOG"
  ROPESERVE_LOG=""
  return "$status"
}
