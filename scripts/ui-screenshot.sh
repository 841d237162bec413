#!/usr/bin/env bash
# ui-screenshot.sh [OUT.png] — starts the iot-portal demo (`starter demo`:
# Temporal dev server with its web UI, the workers, the simulator), waits
# until the pipeline's checkpoint coordinator has finished a round (asked
# for with `starter checkpoint now`), and takes a headless chromium
# screenshot of the coordinator's page in the web UI, whose first screen
# shows the input (durations as text) and the rounds in its history: one
# activity per worker with its summary ("round 71 of iot-portal: 2 shards
# on central-1"), then the timer before the next round, whose summary is
# the round's story ("round 71: 2 workers, 4 shards, 3.2 kB, 85ms, 0
# failed, archived 15 rows (3.6 kB); next at 21:02:33"); the static
# summary and details and the current details are on its User Metadata
# tab.
# Needs bin/temporal and bin/influxd (make demo builds them) and chromium
# (apt-get install chromium). Not part of make test.
set -euo pipefail
out=$(realpath -m "${1:-coordinator.png}")
cd "$(dirname "$0")/.."
command -v chromium >/dev/null || { echo "ui-screenshot: chromium not found (apt-get install chromium)" >&2; exit 1; }
tmp=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
go build -o "$tmp/starter" ./starter
"$tmp/starter" demo --duration 10m --dir "$tmp/work" --progress 5s --checkpoint-interval 2s >"$tmp/demo.out" 2>&1 &
pid=$!

ui="" fe=""
for _ in $(seq 180); do
	ui=$(awk '$1 == "Temporal" && $2 == "web" {print $4; exit}' "$tmp/demo.out")
	fe=$(awk '$1 == "Temporal" && $2 == "frontend" {print $3; exit}' "$tmp/demo.out")
	[ -n "$ui" ] && [ -n "$fe" ] && break
	kill -0 "$pid" 2>/dev/null || { cat "$tmp/demo.out" >&2; echo "ui-screenshot: the demo stopped" >&2; exit 1; }
	sleep 1
done
[ -n "$ui" ] || { cat "$tmp/demo.out" >&2; echo "ui-screenshot: the demo printed no web UI address" >&2; exit 1; }

# A round the coordinator finished (the workers start it when they
# announce their partitions; until then checkpoint now exits 3).
for _ in $(seq 60); do
	if "$tmp/starter" --address "$fe" checkpoint now --pipeline iot-portal --timeout 20s; then break; fi
	sleep 2
done
run=$("$tmp/starter" --address "$fe" checkpoint list --pipeline iot-portal --json | grep -o '"run_id": *"[^"]*"' | head -1 | sed 's/.*"\([^"]*\)"$/\1/')
[ -n "$run" ] || { echo "ui-screenshot: no running coordinator of iot-portal" >&2; exit 1; }
url="$ui/namespaces/default/workflows/tflo-coordinator%3Aiot-portal/$run/history"
echo "screenshot of $url"
# The web UI long-polls a running workflow's history, so the page never
# goes idle and chromium's own --screenshot (with --virtual-time-budget)
# waits for ever: load the page, give it 10 s, and take the screenshot
# over the DevTools protocol.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
chromium --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/chromium" --window-size=1400,1000 \
	--remote-debugging-port="$port" "$url" >"$tmp/chromium.log" 2>&1 &
cpid=$!
sleep 10 # the page renders; not synchronisation with anything we could wait on
timeout 60 python3 scripts/cdp-screenshot.py "$port" "$out" || { tail -5 "$tmp/chromium.log" >&2; }
kill "$cpid" 2>/dev/null || true
wait "$cpid" 2>/dev/null || true
[ -s "$out" ] || { echo "ui-screenshot: chromium wrote no screenshot" >&2; exit 1; }
echo "wrote $out"
