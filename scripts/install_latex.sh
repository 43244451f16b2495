#!/usr/bin/env bash
# Installs the minimal TeX Live that synth/render_latex.py needs (pdflatex with amsmath, amssymb,
# mathrsfs, bm, geometry, fancyhdr, multicol, booktabs, xcolor, lmodern and the psnfss fonts; and
# multirow for row spans, which Debian ships only in texlive-latex-extra: ~19 MB, plus
# texlive-pictures), and nothing when `pdflatex` and multirow.sty are already there. Idempotent;
# uses sudo only when not root; refreshes the apt package lists only when a first install fails.
set -euo pipefail

DEB_PACKAGES=(texlive-latex-base texlive-latex-recommended texlive-fonts-recommended lmodern texlive-latex-extra)

if command -v pdflatex >/dev/null 2>&1 && kpsewhich multirow.sty >/dev/null 2>&1; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

echo "install_latex: installing Debian packages: ${DEB_PACKAGES[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -q --no-install-recommends "${DEB_PACKAGES[@]}" >/dev/null 2>&1; then
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q --no-install-recommends "${DEB_PACKAGES[@]}" >/dev/null
fi

command -v pdflatex >/dev/null 2>&1 || { echo "install_latex: pdflatex still missing" >&2; exit 1; }
kpsewhich multirow.sty >/dev/null 2>&1 || { echo "install_latex: multirow.sty still missing" >&2; exit 1; }
echo "install_latex: $(pdflatex --version | head -1)"
