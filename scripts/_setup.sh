# Sourced by scripts/serve and scripts/test: make sure uv exists and the workspace is synced.
# Works on a fresh Debian machine with only python3 present.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$HOME/.local/bin:$PATH"

if ! command -v uv >/dev/null 2>&1; then
  echo "setup: installing uv" >&2
  if ! python3 -m pip --version >/dev/null 2>&1; then
    python3 -m ensurepip --user >/dev/null 2>&1 || {
      apt-get update -qq && apt-get install -y -qq python3-pip python3-venv >/dev/null
    }
  fi
  python3 -m pip install --user --quiet uv 2>/dev/null \
    || python3 -m pip install --user --quiet --break-system-packages uv \
    || python3 -m pip install --quiet uv
  hash -r
  if ! command -v uv >/dev/null 2>&1; then
    # pip may have put it next to the interpreter rather than in ~/.local/bin
    UV_DIR="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
    export PATH="$UV_DIR:$(python3 -m site --user-base)/bin:$PATH"
  fi
fi

cd "$ROOT"
uv sync --quiet --all-packages
