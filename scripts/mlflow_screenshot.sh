#!/usr/bin/env bash
# docs/mlflow_ui.png, redone by hand (CI does not run this): MLflow's UI showing a seed sweep's runs, as headless
# Chromium renders it from a local `mlflow server` over the sweep's own SQLite store.
#
# Usage: scripts/mlflow_screenshot.sh CHROMIUM SWEEP [OUT.png]
#   CHROMIUM  a headless Chromium binary. Where no Chrome can be installed, the npm package @sparticuz/chromium has
#             one: `npm pack @sparticuz/chromium`, untar it, and decompress bin/chromium.br and bin/al2023.tar.br with
#             Node's brotli (`zlib.brotliDecompressSync`); untar al2023.tar and point LD_LIBRARY_PATH at its lib/,
#             and FONTCONFIG_PATH at the fonts.tar.br's folder (its Open Sans) for readable text.
#   SWEEP     a sweep folder made with `logger=mlflow` and no tracking URI (its mlflow.db), e.g. the docs' one:
#               unlearnbench logger=mlflow 'seeds.train=range(3)' +method=ssd model.width=8 train.epochs=3 \
#                 'train.milestones=[2]' train.batch_size=64 train.lr=0.05 runtime.threads=1 report.figures=false \
#                 hydra.sweep.dir=/tmp/shot/seed_sweep
#   OUT.png   where the screenshot goes (default docs/mlflow_ui.png; about 130 KB)
# Needs node >= 20 (its WebSocket drives Chromium through the DevTools protocol: Chromium's own --screenshot waits
# forever in some containers) and the project's virtual environment (.venv, with the mlflow extra).
set -euo pipefail

chromium=$(realpath "$1")
sweep=$(realpath "$2")
out=${3:-docs/mlflow_ui.png}
python=${PYTHON:-.venv/bin/python}
[ -x "$chromium" ] || { echo "not an executable Chromium: $1" >&2; exit 1; }
[ -f "$sweep/mlflow.db" ] || { echo "no mlflow.db in $sweep: run the sweep with logger=mlflow and no tracking URI" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { "$python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
wait_for() {  # wait_for URL SECONDS
  for _ in $(seq "$2"); do curl -sf -m 2 "$1" > /dev/null && return 0; sleep 1; done
  echo "no answer from $1" >&2; return 1
}

port=$(free_port)
setsid "$python" -m mlflow server --host 127.0.0.1 --port "$port" --workers 1 \
  --backend-store-uri "sqlite:///$sweep/mlflow.db" > "$work/server.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$port/health" 180

experiment=$("$python" -c "
import sys
from mlflow.tracking import MlflowClient
found = MlflowClient(tracking_uri=sys.argv[1]).get_experiment_by_name(sys.argv[2])
print(found.experiment_id if found else '')" "sqlite:///$sweep/mlflow.db" "$(basename "$sweep")")
[ -n "$experiment" ] || { echo "no experiment named $(basename "$sweep") in $sweep/mlflow.db" >&2; exit 1; }

debug_port=$(free_port)
LANG=en_US.UTF-8 setsid "$chromium" --headless=shell --no-sandbox --no-zygote --single-process --in-process-gpu \
  --ignore-gpu-blocklist --use-gl=angle --use-angle=swiftshader --enable-unsafe-swiftshader --hide-scrollbars \
  --font-render-hinting=none --lang=en-US --user-data-dir="$work/profile" --remote-debugging-port="$debug_port" \
  about:blank > "$work/chromium.log" 2>&1 &
pids+=($!)
wait_for "http://127.0.0.1:$debug_port/json/version" 60

# The page's steps, each after a wait: close the assistant panel and the sidebar, unfold the sweep's run into its job
# runs, switch to the charts (each job's training curves, one colour per training seed), hide Plotly's toolbars.
cat > "$work/shot.js" <<'EOF'
const [debugPort, url, out] = process.argv.slice(2);
const fs = require('fs');
const steps = [  // [wait in ms, statements run in the page]
  [8000, `document.querySelector('button[aria-label=Close]')?.click();
          document.querySelector('button[aria-label="Toggle sidebar"]')?.click();`],
  [1500, `document.querySelector('button[data-component-id*=runnamecellrenderer]')?.click();`],
  [1500, `document.querySelector('input[name=runs-view-mode][value=CHART]')?.click();`],
  [500, `const style = document.createElement('style');
         style.textContent = '.modebar-container, .modebar { display: none !important; }';
         document.head.appendChild(style);`],
  [8000, ``],
];
(async () => {
  const pages = await (await fetch(`http://127.0.0.1:${debugPort}/json/list`)).json();
  const socket = new WebSocket(pages.find(target => target.type === 'page').webSocketDebuggerUrl);
  let last = 0; const waiting = new Map();
  socket.onmessage = message => {
    const answer = JSON.parse(message.data);
    if (waiting.has(answer.id)) { waiting.get(answer.id)(answer); waiting.delete(answer.id); }
  };
  const send = (method, params = {}) => new Promise(resolve => {
    waiting.set(++last, resolve); socket.send(JSON.stringify({id: last, method, params}));
  });
  await new Promise(resolve => { socket.onopen = resolve; });
  await send('Page.enable');
  await send('Emulation.setDeviceMetricsOverride', {width: 1400, height: 900, deviceScaleFactor: 1, mobile: false});
  await send('Emulation.setLocaleOverride', {locale: 'en-US'});
  await send('Page.navigate', {url});
  for (const [wait, code] of steps) {
    await new Promise(resolve => setTimeout(resolve, wait));
    await send('Runtime.evaluate', {expression: `(() => { ${code} })()`});
  }
  const charts = await send('Runtime.evaluate', {expression: "document.querySelectorAll('.js-plotly-plot').length",
                                                  returnByValue: true});
  if (!(charts.result.result.value > 0)) { console.error('no chart on the page: is the UI up?'); process.exit(1); }
  const shot = await send('Page.captureScreenshot', {format: 'png'});
  fs.writeFileSync(out, Buffer.from(shot.result.data, 'base64'));
  process.exit(0);
})();
EOF
websocket_flag=$(node -e "process.stdout.write(typeof WebSocket === 'undefined' ? '--experimental-websocket' : '')")
node $websocket_flag "$work/shot.js" "$debug_port" "http://127.0.0.1:$port/#/experiments/$experiment/runs" "$out"
echo "mlflow_screenshot: $out ($(du -k "$out" | cut -f1) KB)"
