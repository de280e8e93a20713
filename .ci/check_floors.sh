#!/usr/bin/env bash
# The oldest versions hf-ralm declares (the ">=" floors of pyproject.toml's dependencies and of its accelerate, dense
# and rerank extras) against the tests that use them, in a fresh virtual environment; CI runs the newest ones (what
# pip resolves). torch stays the local 2.13.0 CPU build: its floor, 2.4, is the first with torch.OutOfMemoryError
# (batching.py), read from its releases, not installed here. Usage, from the repository root:
#   bash .ci/check_floors.sh
# It prints the versions it ran and pytest's summary; the exit status is pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
pins="$(python3 - <<'EOF'
import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

project = tomllib.load(open("pyproject.toml", "rb"))["project"]
lines = project["dependencies"] + [line for extra in ("accelerate", "dense", "rerank")
                                   for line in project["optional-dependencies"][extra]]
floors = {}
for requirement in map(Requirement, lines):
    for spec in requirement.specifier:
        if spec.operator == ">=" and requirement.name != "torch":
            floors[requirement.name] = max(floors.get(requirement.name, spec.version), spec.version, key=Version)
print(" ".join(f"{name}=={version}" for name, version in sorted(floors.items())))
EOF
)"
venv="$(mktemp -d)/venv"
python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
pip install -q torch==2.13.0
# shellcheck disable=SC2086
pip install -q -e ".[test,accelerate,dense,rerank]" $pins
echo "floors: $pins"
python -c "import torch; print('torch', torch.__version__)"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
python -m pytest -q -p no:cacheprovider tests/test_retrieval.py tests/test_retrieval_datasets.py tests/test_dense.py \
  tests/test_hub.py tests/test_metric.py tests/test_modeling.py tests/test_transformers_citizen.py \
  tests/test_first_contact.py tests/test_predictive_reranker.py tests/test_declared_versions.py
