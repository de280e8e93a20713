#!/usr/bin/env bash
# The oldest transformers hf-ralm declares (pyproject: transformers>=5.0) against the test suite's model-facing
# tests, in a fresh virtual environment; CI runs the newest one (what pip resolves). Usage, from the repository root:
#   bash .ci/check_oldest_transformers.sh [VERSION]      # default: the lower bound in pyproject.toml
# It prints the versions it ran and pytest's summary; the exit status is pytest's.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-$(python3 -c "import re; print(re.search(r'\"transformers>=([0-9.]+)', open('pyproject.toml').read()).group(1))")}"
venv="$(mktemp -d)/venv"
python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
pip install -q torch==2.13.0
pip install -q -e ".[test,rerank]" "transformers==$version"   # rerank brings accelerate, as CI's extras do
python -c "import transformers, torch; print('transformers', transformers.__version__, '| torch', torch.__version__)"
export HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
# the tests that drive the models: scoring and its KV caches, generation, evaluation, the deprecation guard
python -m pytest -q -p no:cacheprovider tests/test_scoring.py tests/test_generation.py tests/test_modeling.py \
  tests/test_deprecations.py tests/test_passages.py tests/test_reranking.py
