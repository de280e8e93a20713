"""Text generation with In-Context RALM: re-retrieve every ``s`` new tokens and decode on ``[passage; prefix]``.

Semantics (exact; ``s`` = ``retrieval_stride``, ``ℓ`` = ``query_length``, ``L`` = ``max_length``):

* Generation runs in strides of ``s`` tokens. At the start of stride ``j`` (after ``j·s`` generated tokens, ``j = 0``
  included) the query is the decoded last ``ℓ`` tokens of ``x`` = prompt + output so far, and the top passage
  ``d_j`` is retrieved, encoded as the evaluation does ([`passage_prefix`][hf_ralm.core.model_inputs.passage_prefix]:
  the tokenizer's default special tokens, cut to ``max_doc_tokens``).
* Every token of stride ``j`` is predicted from ``[d_j; x[a_j:]]``, where ``x`` grows within the stride and
  ``a_j = max(0, len(x) + s_j + len(d_j) - L)`` with ``s_j = min(s, tokens still to generate)``, computed once at the
  start of the stride: the oldest tokens are dropped once per stride so that the whole stride fits in ``L``. ``L``
  must hold ``max_doc_tokens + s`` (refused otherwise, as in evaluation:
  [`window_length`][hf_ralm.core.plan.window_length]),
  so a passage never crowds the stride's own tokens out of the context.
* A stride whose retrieval returns nothing uses ``x[a_j:]`` alone (``[BOS] + x[a_j:]`` with ``bos_every_window``).
* Each row of a batch retrieves for itself; padding (left or right, from ``attention_mask``) is not part of ``x``.

Reranking (``config.rerank``, the paper's §6; a strategy of ``hf_ralm.selection.strategies``, ranked through
``ranker``): at the start of stride ``j`` each row retrieves
``k = rerank_candidates`` candidates for its query instead of one, and one of them, ``d``, is chosen; the stride then
uses ``d`` exactly as it would use a retrieved top passage (its ``a_j``, its context), or with the no-passage
choice it runs as a stride whose retrieval returned nothing. A stride that retrieves nothing has nothing to rank.

* ``"lm"``, the reader ranks: each candidate ``d_i`` (with ``rerank_allow_no_passage`` one more, no passage: what
  [`passage_prefix`][hf_ralm.core.model_inputs.passage_prefix] puts for none, nothing or a BOS) gets the context the
  stride would give it, ``[d_i; x[a_i:]]`` with ``a_i = stride_start(len(x), s_j, len(d_i), L)``, and its ranking score
  is the reader's summed NLL there of the *ranking tokens* ``x[r:]``: the last ``s' = rerank_tokens`` tokens of ``x``
  (prompt + output so far), fewer when ``x`` is shorter or a context holds fewer, ``r = max(len(x) - s', max_i a_i +
  1)`` (``ranker.ranking_start``), so that every candidate ranks on the same tokens and none is the first of ``x`` in a
  context. The lowest wins, ties to the better retrieval rank (``choose_lowest``); with no token to rank on (``r =
  len(x)``) retrieval's top. The inputs of all rows × candidates of a stride run in one ``score_inputs`` call (the
  evaluation's scorer), batched, a passage's keys/values taken from the decoder's passage cache.
* ``"lm"`` with another LM (``reranker_model``; an ``LMReranker``): the same ranking
  tokens, in text, as the evaluation ranks (``fit_reranker_input``): its tokens of the
  passage, of the decoded ``x[:r]`` cut from the left, and of the decoded ``x[r:]``, whose summed NLL ranks.
* ``"random"``: ``random_choice`` with ``rerank_seed`` and the key
  ``crc32(prompt ids) · 2**32 + j`` (``ranker.random_key``): reproducible per prompt and stride, whatever
  the batch.
* ``"predictive"``: the trained cross-encoder ([`PredictiveReranker`][hf_ralm.selection.predictive.PredictiveReranker])
  scores (the stride's query, ``config.passage_text(title, text)``) for every candidate, and with
  ``rerank_allow_no_passage`` the empty passage too (``choose_predictive``); the highest wins, ties to the better rank.
* ``"oracle"`` ranks on the tokens a stride is about to generate: refused (a ``ValueError``,
  ``check_generation``: so is any strategy that looks at the future), as is
  reranking with an ensemble of passages (``RalmLogitsProcessor(ensemble_size > 1)``).
* A strategy registered from outside the package (``register_strategy``) chooses
  per stride from what it needs, as in evaluation.

``sources`` give the chosen passage's ``"rank"`` among the candidates, ``ralm_stats`` the ``reranked_strides`` and
those where no passage was chosen (``no_passage_chosen``).

Beyond the paper, as in evaluation:

* Retrieval gates (``config.retrieval_gate``, ``hf_ralm.selection.gates``): with ``"score"`` a stride keeps its
  passages only when the top one's score over its query's maximum attainable score (the retriever's
  ``max_scores``) reaches ``gate_threshold`` (before any reranking); with ``"lm"`` the reader ranks the stride's
  passage (retrieval's top, or the reranked choice) against no passage exactly as ``"lm"`` reranking ranks two
  candidates (``lm_gate_config``), and keeps it when it lowers the ranking NLL by at
  least ``gate_threshold`` nats (``None``: when its ranking NLL is not higher; or when there is no token to rank
  on).
  A closed gate makes the stride one whose retrieval found nothing; ``ralm_stats`` counts ``gated_strides`` and
  gives the ``retrieved_fraction`` of row-strides with a passage in context.
* Several passages (``config.num_passages`` n): the stride's top n (reranked: the chosen one first, then retrieval
  order) go in one context ``[d_n; ...; d_1; x[a_j:]]``, the prefix built as the evaluation builds it
  ([`context_prefix`][hf_ralm.core.model_inputs.context_prefix]), and ``a_j`` counts the whole prefix.
* Ensembles (``ensemble_size`` n > 1, [`RalmLogitsProcessor`][hf_ralm.RalmLogitsProcessor]'s argument or
  ``config.ensemble_size``): each of the top n passages gets its own context ``[d_i; x[a_i:]]`` and the next-token
  probabilities are mixed with the weights ``softmax(score / ensemble_temperature)``; per token this is the evaluation's
  ensemble (``hf_ralm.core.ensemble``) on the same passages.

How it is computed (``contexts``, ``decoder``): each row keeps the KV cache of its context
``[d_j; x[a_j:]]`` and feeds it only the tokens it lacks. A row also keeps its last context without a passage:
a later stride without one (a closed gate, an empty retrieval) that starts it at the same place resumes its cache
(``ralm_stats``: ``plain_contexts_resumed``, and ``plain_tokens_reused``, the prefill that saved;
``keep_plain_context=False`` rebuilds it instead). When the next stride has the same passage and the same
``a`` the context is unchanged and its cache simply keeps growing; otherwise the context starts from the passage's
keys/values, taken from a [`PassageKVCache`][hf_ralm.core.passage_cache.PassageKVCache] (a passage sits at position 0,
so its keys/values are the same for every stride and row that uses it), and only ``x[a_j:]`` is prefilled. With
``use_cache=False`` every step runs the whole context instead (the slow reference). The passages a stride's rows lack
are computed together (one forward per passage length); the steps where every row lacks as many tokens on a
full-attention cache (one token, or at a stride's start the text after each row's new passage) are run as one batch, the
rows' caches left-padded into one with an attention mask and each row's own positions (rows of different lengths prefill
their new contexts one by one; models with sliding-window or other special cache layers stay row by row). Logits
processors, stopping criteria and streamers see the whole batch, as in ``transformers``.

The decoding loop (``utils``) is handed to ``transformers``' ``generate(custom_generate=...)``, so the
generation config, the logits processors/warpers (temperature, top-k/top-p, repetition penalty, user
``logits_processor``), the stopping criteria (``max_new_tokens``, ``eos_token_id``, user ``stopping_criteria``,
``stop_strings``) and streamers are prepared by ``transformers`` itself. Only greedy decoding and sampling
(``num_beams=1``) are supported. [`RalmLogitsProcessor`][hf_ralm.RalmLogitsProcessor] (``logits_process``) computes the
same next-token scores inside any other model's ``generate``.

Examples:
    ```python
    out = model.generate(ids, max_new_tokens=32, return_dict_in_generate=True)
    out.sources[0][0]   # {'start': 0, 'end': 4, 'id': '...', 'title': '...', 'text': '...', 'score': 12.3}
    ```
"""

from ..core.strides import stride_start
from .contexts import encode_passage
from .logits_process import RalmLogitsProcessor
from .utils import RalmGenerateOutput, ralm_generate

__all__ = ["RalmGenerateOutput", "RalmLogitsProcessor", "encode_passage", "ralm_generate", "stride_start"]
