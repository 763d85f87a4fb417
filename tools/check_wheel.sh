#!/usr/bin/env bash
# The install users and wheels get: build a wheel (no -e, no build isolation), install it into a fresh virtual
# environment beside the torch it was built against, and use it from outside the source tree. Checks issue 48's
# install defect: the wheel must require that exact torch and import under it.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
torch_release=$(python -c "import torch; print(torch.__version__.split('+')[0])")
python -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps -w "$work/dist" .
python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "torch==$torch_release" "$work"/dist/*.whl
cd "$work"
"$work/venv/bin/python" - "$torch_release" <<'PY'
import importlib.metadata
import sys

import torch
import torch_dsmhist

release = sys.argv[1]
requires = importlib.metadata.requires("torch_dsmhist")
assert f"torch=={release}" in requires, requires
metadata = importlib.metadata.metadata("torch_dsmhist")
assert metadata["License-Expression"] == "BSD-3-Clause", metadata["License-Expression"]
assert metadata["Requires-Python"] == ">=3.10", metadata["Requires-Python"]
import importlib.resources
assert importlib.resources.files("torch_dsmhist").joinpath("py.typed").is_file(), "py.typed is not in the wheel"
counts = torch_dsmhist.histogram(torch.tensor([0, 1, 1, 3]), 4)
assert counts.tolist() == [1, 2, 0, 1], counts
print(f"wheel: installed into a fresh venv beside torch {torch.__version__}, requires torch=={release}, "
      "BSD-3-Clause, py.typed, imports and counts")
PY
