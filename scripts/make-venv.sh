#!/bin/sh
# Create the virtualenv DIR for PYTHON (default python3) if it has no python yet: through uv when
# the repo's .venv has it (0.1 s: no pip seeded; scripts/pip-install.sh installs through uv),
# else `PYTHON -m venv` (5-6 s, most of it seeding pip). pip-install.sh seeds pip itself when it
# has to fall back to it.
# usage: scripts/make-venv.sh DIR [PYTHON]
set -eu
dir=$1
python=${2:-python3}
[ -x "$dir/bin/python" ] && exit 0
uv="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/uv"
if [ -x "$uv" ] && "$uv" venv --quiet --python "$python" "$dir"; then
    exit 0
fi
exec "$python" -m venv "$dir"
