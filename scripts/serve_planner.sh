#!/usr/bin/env bash
# Serves the planner page (docs/planner/, built by `make planner-web`) on http://localhost:PORT/
# (default 8043) with Python's static file server: the page needs no server logic, only that its
# files come over HTTP (browsers do not load WebAssembly from file://). Builds it first if needed.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
port="${1:-8043}"
case "$port" in (*[!0-9]*|'') echo "error: port '$port' is not a number" >&2; exit 1;; esac
[ -f "$root/docs/planner/planner.wasm" ] || make -C "$root" planner-web
echo "the planner: http://localhost:$port/ (Ctrl-C stops it)"
exec python3 -m http.server "$port" --bind 127.0.0.1 --directory "$root/docs/planner"
