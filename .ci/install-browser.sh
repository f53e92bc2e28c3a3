#!/usr/bin/env bash
# Install what the browser test (tests/test_browser.py) needs: Debian's chromium and the playwright
# Python package. Never `playwright install`: it downloads its own browser build, which CI cannot.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
fi
python -c "import playwright" 2>/dev/null || python -m pip install -q "playwright>=1.40"
chromium --version
