#!/bin/sh
# pip install into the virtualenv of PYTHON: through uv when the repo's .venv has it (from PyPI,
# installed by `make install`; half of pip's time: it downloads, unpacks and compiles in
# parallel), else, or if uv fails, through that Python's own pip. Bytecode is compiled at
# install, as pip does: where PYTHONDONTWRITEBYTECODE is set (it is on the CI machine), nothing
# is compiled on import and every process would compile Ansible from source again (a CI run
# without it took 27 minutes instead of 19).
# usage: scripts/pip-install.sh PYTHON PIP-INSTALL-ARGUMENTS...
set -eu
python=$1
shift
uv="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/uv"
if [ -x "$uv" ]; then
    if "$uv" pip install --quiet --compile-bytecode --python "$python" "$@"; then
        exit 0
    fi
    echo "pip-install: uv failed; pip instead" >&2
fi
# a venv that uv made has no pip: seed it first
"$python" -m pip --version > /dev/null 2>&1 || "$python" -m ensurepip --default-pip > /dev/null
exec "$python" -m pip install -q --disable-pip-version-check "$@"
