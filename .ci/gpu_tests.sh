#!/usr/bin/env bash
# The model-facing tests on a GPU (issue 39 §2; docs/gpu.md "Tests on the GPU"): the test files that need nothing the
# GPU machine lacks (no datasets, evaluate or bm25s there), on HF_RALM_TEST_DEVICE (default cuda). Run before the suite
# in the same device call; `--render --tests-log` puts its summary into docs/gpu.md.
#
#   bash .ci/gpu_tests.sh > $OUT/gpu_tests.log 2>&1
#   HF_RALM_TEST_DEVICE=cpu bash .ci/gpu_tests.sh -x    # the same files here
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_RALM_TEST_DEVICE="${HF_RALM_TEST_DEVICE:-cuda}" PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
echo "HF_RALM_TEST_DEVICE=$HF_RALM_TEST_DEVICE"
# the two deselected tests build the tiny BM25 index (bm25s, datasets); a time limit keeps the suite's share of the call
exec timeout "${HF_RALM_GPU_TESTS_TIMEOUT:-150}" "${PYTHON:-python3}" -m pytest -q -rfE -p no:cacheprovider \
    tests/test_scoring.py tests/test_reranking.py tests/test_generation.py tests/test_generation_gates.py \
    tests/test_gates.py tests/test_passages.py tests/test_candidates.py tests/test_testing.py tests/test_deprecations.py \
    --deselect tests/test_passages.py::test_cli_several_passages_ensembles_and_gates \
    --deselect tests/test_gates.py::test_bm25_max_score_is_the_sum_of_the_query_terms_idf "$@"
