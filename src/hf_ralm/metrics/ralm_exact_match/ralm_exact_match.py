"""``evaluate`` metric: exact match of open-domain QA answers, as In-Context RALM (Ram et al., 2023) and SQuAD
score it: a prediction is right when, after normalization (lower case, no punctuation, no articles a/an/the, single
spaces), it equals one of the gold answers.

Loads offline once hf-ralm is installed:

```python
import evaluate
metric = evaluate.load("ralm_exact_match")
# or by path: evaluate.load(hf_ralm.metrics.metric_path("ralm_exact_match"))
metric.compute(predictions=["The Eiffel tower"], references=[["Eiffel Tower", "la tour Eiffel"]])
```
"""

import datasets
import evaluate

from hf_ralm.metrics import CheckedInputs, metric_info
from hf_ralm.evaluation.qa import check_exact_match_inputs, exact_match_score

_DESCRIPTION = """Exact match for open-domain QA (Ram et al., 2023, §7): a prediction counts when its SQuAD
normalization (lower case, punctuation removed, articles a/an/the removed, white space collapsed) equals that of any
of its gold answers. exact_match is in percent (as SQuAD's metric and the paper report it)."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the predicted answers.
    references (list of list of str, or list of str): the gold answers of each question (any one may match).
Returns:
    exact_match (float, percent), num_correct (int), num_examples (int).
Examples:
    ```python
    metric = evaluate.load("ralm_exact_match")
    metric.compute(predictions=["the Beatles", "Paris"], references=[["Beatles"], ["Lyon", "Marseille"]])
    # {'exact_match': 50.0, 'num_correct': 1, 'num_examples': 2}
    ```
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class RalmExactMatch(CheckedInputs, evaluate.Metric):
    def check_inputs(self, predictions, references):
        check_exact_match_inputs(predictions, references)

    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, [
            datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
            ),
            datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
        ])

    def _compute(self, predictions, references):
        return exact_match_score(predictions, references)
