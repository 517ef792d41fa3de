# Sourced by scripts/serve and scripts/test: make sure uv exists and the workspace is synced.
# Works on a fresh Debian machine with only python3 present.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# the PATH a new terminal has, to tell below whether uv will be found there
USER_PATH="$PATH"
export PATH="$HOME/.local/bin:$PATH"

if ! command -v uv >/dev/null 2>&1; then
  echo "setup: installing uv" >&2
  UV_INSTALLED=1
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
UV_BIN="$(command -v uv)"
# A new terminal does not get the PATH set above: say where uv is, and how to reach it there
# (the README's `uv run …` and the web client's commands need it).
if ! PATH="$USER_PATH" command -v uv >/dev/null 2>&1; then
  echo "setup: uv is $UV_BIN, which is not on your PATH; in a new terminal run" >&2
  echo "  export PATH=\"$(dirname "$UV_BIN"):\$PATH\"    (add it to ~/.bashrc to keep it)" >&2
  echo "  or call it by that full path: $UV_BIN run codey-worker --server …" >&2
elif [ -n "${UV_INSTALLED:-}" ]; then
  echo "setup: uv is $UV_BIN" >&2
fi

cd "$ROOT"
# Bytecode compiled once, here: where PYTHONDONTWRITEBYTECODE is set (as on many CI machines
# and containers) Python would otherwise compile every module it imports at every start — the
# server's imports took 1.1 s instead of 0.5 s, each of the suite's hundreds of server starts
# paid it, and so does a user's server and worker. uv compiles the dependencies (again only
# when they change), compileall our own packages (those up to date are skipped).
uv sync --quiet --all-packages --compile-bytecode
uv run --no-sync python -m compileall -q -j 0 packages/*/src >/dev/null
