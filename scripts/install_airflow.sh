#!/usr/bin/env bash
# Airflow in its own venv (.venv-airflow by default), for the refresh DAG's tests and local runs.
# Airflow never imports pagemill: its tasks call pagemill's CLIs with pagemill's own interpreter
# (.venv/bin/python), so the two dependency sets stay apart. The version spec is the `airflow`
# extra of pyproject.toml (one place). Creates the venv on first use; a no-op once installed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-airflow}"
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
SPEC=$(sed -n 's/^airflow = \["\(.*\)"\]$/\1/p' pyproject.toml)
[ -n "$SPEC" ] || { echo "no airflow extra in pyproject.toml" >&2; exit 1; }
if [ -f "$VENV/.installed" ] && [ "$(cat "$VENV/.installed")" = "$SPEC" ]; then
  exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "$SPEC"
echo "$SPEC" > "$VENV/.installed"
