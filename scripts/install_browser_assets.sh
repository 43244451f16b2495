#!/usr/bin/env bash
# Installs what pagemill's headless-browser code needs, and nothing when it is already there:
#   - Debian packages: chromium (driven by Playwright at /usr/bin/chromium) and fonts
#     (and nodejs/npm when npm is missing);
#   - KaTeX from the npm registry into assets/katex/node_modules/katex (version pinned in
#     assets/katex/package.json, exact tree in package-lock.json).
# Playwright's own browser download (`playwright install`) is not used: it fails on this network.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
KATEX_DIR="$ROOT/assets/katex"
# Fonts of the synth themes (synth/themes.py): serif, sans and mono families; wqy and arphic: Chinese pages.
DEB_PACKAGES=(chromium fonts-dejavu-core fonts-liberation fonts-freefont-ttf fonts-urw-base35 fonts-crosextra-carlito
              fonts-lmodern fonts-wqy-microhei fonts-wqy-zenhei fonts-arphic-uming)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node.js and npm fetch KaTeX; machines of this project normally have them already.
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install_browser_assets: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # The package lists may be stale or absent on a fresh machine: refresh only when needed.
  if ! $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

# The installed KaTeX must be the pinned one; a stale node_modules is reinstalled.
want="$(node -p "require('$KATEX_DIR/package.json').dependencies.katex")"
have=""
if [ -f "$KATEX_DIR/node_modules/katex/package.json" ]; then
  have="$(node -p "require('$KATEX_DIR/node_modules/katex/package.json').version")"
fi
if [ "$have" != "$want" ] || [ ! -f "$KATEX_DIR/node_modules/katex/dist/katex.min.js" ]; then
  echo "install_browser_assets: installing katex@$want with npm"
  cd "$KATEX_DIR"
  npm_flags=(--no-audit --no-fund --ignore-scripts --loglevel=error)
  if [ -f package-lock.json ]; then
    npm ci "${npm_flags[@]}"
  else
    npm install "${npm_flags[@]}"
  fi
fi

test -x "${PAGEMILL_CHROMIUM:-/usr/bin/chromium}" || {
  echo "install_browser_assets: no Chromium at ${PAGEMILL_CHROMIUM:-/usr/bin/chromium}" >&2
  exit 1
}
test -f "$KATEX_DIR/node_modules/katex/dist/katex.min.js"
