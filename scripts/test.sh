#!/usr/bin/env bash
# Installs everything the tests need (Python packages, headless Chromium for the browser test)
# and runs the whole suite. GPU tests skip themselves on machines without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install -q --disable-pip-version-check -e ".[dev,e2e]"

if ! command -v chromium >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get install -y -q chromium chromium-driver >/dev/null \
        || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q chromium chromium-driver >/dev/null; }
fi

python3 -m ruff check .
python3 -m pytest -q "$@"
