#!/bin/sh
# pip install into the virtualenv of PYTHON: through uv when the repo's .venv has it (from PyPI,
# installed by `make install`; a third of pip's time: it downloads and unpacks in parallel and
# compiles no bytecode ahead), else, or if uv fails, through that Python's own pip.
# usage: scripts/pip-install.sh PYTHON PIP-INSTALL-ARGUMENTS...
set -eu
python=$1
shift
uv="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/uv"
if [ -x "$uv" ]; then
    if "$uv" pip install --quiet --python "$python" "$@"; then
        exit 0
    fi
    echo "pip-install: uv failed; pip instead" >&2
fi
exec "$python" -m pip install -q --disable-pip-version-check "$@"
