#!/usr/bin/env bash
# One device script (issue #35): every speed and memory figure of this machine as one JSON document on stdout.
#   bash benchmarks/device.sh                        # a GPU, full size (over 10 min on one H200 on 2026-12-04; use --budget on a lent one)
#   bash benchmarks/device.sh --device cpu --small   # the check make test runs (about 1-2 minutes)
# Progress goes to stderr. See benchmarks/device.py for the sections.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-$here/../.venv/bin/python}"
[ -x "$python" ] || python="$(command -v python3)"
export HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$python" "$here/device.py" "$@"
