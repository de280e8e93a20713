"""Text generation with In-Context RALM: re-retrieve every ``s`` new tokens and decode on ``[passage; prefix]``.

Semantics (exact; ``s`` = ``retrieval_stride``, ``ℓ`` = ``query_length``, ``L`` = ``max_length``):

* Generation runs in strides of ``s`` tokens. At the start of stride ``j`` (after ``j·s`` generated tokens, ``j = 0``
  included) the query is the decoded last ``ℓ`` tokens of ``x`` = prompt + output so far, and the top passage
  ``d_j`` is retrieved, encoded as the evaluation does (:func:`hf_ralm.evaluation.passage_prefix`: the tokenizer's
  default special tokens, cut to ``max_doc_tokens``).
* Every token of stride ``j`` is predicted from ``[d_j; x[a_j:]]``, where ``x`` grows within the stride and
  ``a_j = max(0, len(x) + s_j + len(d_j) - L)`` with ``s_j = min(s, tokens still to generate)``, computed once at the
  start of the stride: the oldest tokens are dropped once per stride so that the whole stride fits in ``L``.
* A stride whose retrieval returns nothing uses ``x[a_j:]`` alone (``[BOS] + x[a_j:]`` with ``bos_every_window``).
* Each row of a batch retrieves for itself; padding (left or right, from ``attention_mask``) is not part of ``x``.

How it is computed (:mod:`.contexts`, :mod:`.decoder`): each row keeps the KV cache of its context
``[d_j; x[a_j:]]`` and feeds it only the tokens it lacks. When the next stride has the same passage and the same
``a`` the context is unchanged and its cache simply keeps growing; otherwise the context starts from the passage's
keys/values, taken from a :class:`~hf_ralm.passage_cache.PassageKVCache` (a passage sits at position 0, so its
keys/values are the same for every stride and row that uses it), and only ``x[a_j:]`` is prefilled. With
``use_cache=False`` every step runs the whole context instead (the slow reference). A rebuilt context is prefilled
row by row (each row has its own passage and length); the steps where every row takes one token on a full-attention
cache are run as one batch, the rows' caches left-padded into one with an attention mask and each row's own
positions (models with sliding-window or other special cache layers stay row by row). Logits processors, stopping
criteria and streamers see the whole batch, as in ``transformers``.

The decoding loop (:mod:`.utils`) is handed to ``transformers``' ``generate(custom_generate=...)``, so the
generation config, the logits processors/warpers (temperature, top-k/top-p, repetition penalty, user
``logits_processor``), the stopping criteria (``max_new_tokens``, ``eos_token_id``, user ``stopping_criteria``,
``stop_strings``) and streamers are prepared by ``transformers`` itself. Only greedy decoding and sampling
(``num_beams=1``) are supported. :class:`RalmLogitsProcessor` (:mod:`.logits_process`) computes the same next-token
scores inside any other model's ``generate``.

Example:
    >>> out = model.generate(ids, max_new_tokens=32, return_dict_in_generate=True)    # doctest: +SKIP
    >>> out.sources[0][0]                                                             # doctest: +SKIP
    {'start': 0, 'end': 4, 'id': '...', 'title': '...', 'text': '...', 'score': 12.3}
"""

from .decoder import encode_passage, stride_start
from .logits_process import RalmLogitsProcessor
from .utils import RalmGenerateOutput, ralm_generate

__all__ = ["RalmGenerateOutput", "RalmLogitsProcessor", "encode_passage", "ralm_generate", "stride_start"]
