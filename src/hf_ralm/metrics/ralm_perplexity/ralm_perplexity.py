"""``evaluate`` metric: In-Context RALM perplexity of a causal LM on texts (token and word level).

Loads offline once hf-ralm is installed:

```python
import evaluate
metric = evaluate.load("ralm_perplexity")
# or by path: evaluate.load(hf_ralm.metrics.metric_path("ralm_perplexity"))
metric.compute(model_id="path/to/model", predictions=["some text ..."], max_length=512)
```
"""

import datasets
import evaluate

from hf_ralm.metrics import CheckedInputs, metric_info
from hf_ralm.metrics.compute import compute_ralm_perplexity
from hf_ralm.utils.checks import check_texts

_DESCRIPTION = """In-Context RALM perplexity (Ram et al., 2023): the text is scored in windows that start every
`stride` tokens; each window after the first is conditioned on the top passage retrieved for the last
`query_length` tokens before it. token_ppl = exp(nll_sum / num_tokens), word_ppl = exp(nll_sum / num_words) with
num_words the number of spaces, as in the paper's code. Texts are joined as the reference joins dataset rows. Each
text is also scored on its own, as evaluate's `perplexity` scores it: perplexities[i] = exp(mean NLL of the tokens
after its first), mean_perplexity their mean."""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): the texts (joined into one text, empty rows as " \\n"; and each on its own).
    model_id (str): causal LM, Hub id or local folder.
    retriever (str): "none" (default) or "bm25" (then index_dir and, to build it, corpus).
    index_dir, corpus, forbidden_titles: as for `hf-ralm eval-lm`.
    stride (int, 4), query_length (int, 32), max_length (int, model max), max_doc_tokens (int, 256),
    max_eval_tokens (int), dtype ("float32"), batch_size (int, 8), bos_every_window (bool, False),
    device (str, the accelerator when there is one).
Returns:
    nll_sum, num_tokens, num_scored, num_words, token_ppl, word_ppl: the joined text's figures;
    perplexities (list of float): each prediction's own (NaN for one with fewer than two tokens);
    mean_perplexity (float): their mean, over the predictions that have one.
Examples:
    ```python
    metric = evaluate.load("ralm_perplexity")
    metric.compute(model_id="gpt2", predictions=["Hello world , this is a test ."])["token_ppl"]
    ```
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class RalmPerplexity(CheckedInputs, evaluate.Metric):
    def check_inputs(self, predictions, references):
        check_texts("predictions", predictions)

    def _info(self):
        features = datasets.Features({"predictions": datasets.Value("string")})
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, features)

    def _compute(self, predictions, model_id, **kwargs):
        return compute_ralm_perplexity(predictions, model_id, **kwargs)
