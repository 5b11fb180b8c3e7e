#!/usr/bin/env bash
# Renders a run's report.html in headless Chromium and saves a PNG screenshot, to look at a
# report the way a browser shows it (CI: `apt-get install -y chromium`).
# Usage: scripts/screenshot_report.sh RUN_DIR_OR_HTML [OUT_PNG] [WIDTH,HEIGHT]
set -euo pipefail
src="${1:?usage: screenshot_report.sh RUN_DIR_OR_HTML [OUT_PNG] [WIDTH,HEIGHT]}"
[[ -d "$src" ]] && src="$src/report.html"
[[ -f "$src" ]] || { echo "error: $src not found (run \`runner report RUN_DIR\` first)" >&2; exit 2; }
out="${2:-${src%.html}.png}"
size="${3:-1280,2000}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
[[ -n "$browser" ]] || { echo "error: no chromium on PATH (apt-get install -y chromium)" >&2; exit 2; }
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --hide-scrollbars --user-data-dir="$profile" --screenshot="$(realpath -m "$out")" \
  --window-size="$size" "file://$(realpath "$src")" 2>/dev/null
[[ -s "$out" ]] || { echo "error: chromium wrote no screenshot" >&2; exit 1; }
echo "$out"
