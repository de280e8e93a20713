"""What ranks candidates when the reader does not: another causal LM, in text
([`LMReranker`][hf_ralm.selection.rankers.LMReranker]), or the trained cross-encoder a config names
([`load_reranker`][hf_ralm.selection.rankers.load_reranker]).

Examples:
    ```python
    reranker = load_reranker(RalmConfig(rerank="lm", reranker_model="HuggingFaceTB/SmolLM2-135M"), reader)
    inputs = reranker.inputs("the emperor of", "rome and", [passage, None], config)
    ```
"""

from __future__ import annotations

from typing import Sequence

from ..config.configuration_ralm import RalmConfig
from ..core.model_inputs import passage_prefix
from ..core.modeling_utils import model_max_length, resolve_max_length
from ..core.passages import Passage
from ..core.placement import working_device
from ..core.scoring import ScoredInput
from .rules import fit_reranker_input
from .strategies import CROSS_ENCODER, RANKING_NLLS, get_strategy
from ..config.strategy_settings import RERANK


class LMReranker:
    """Another causal LM that ranks candidates for the reader (e.g. a small LM for a large one), in text: see
    [`fit_reranker_input`][hf_ralm.selection.rules.fit_reranker_input] for how its input is built from its own tokens.

    Args:
        model: the ranking LM.
        tokenizer: its tokenizer.
        max_length: the reader's window length; the ranker's inputs fit the smaller of it and the LM's own maximum
            (``None``: the LM's).
    """

    def __init__(self, model, tokenizer, max_length: int | None = None):
        self.model, self.tokenizer = model, tokenizer
        # the reader's window length, which a smaller ranking LM may not reach: the ranker's input fits its own
        own_max = model_max_length(model)
        self.max_length = resolve_max_length(model, min(max_length, own_max or max_length) if max_length else None)

    def inputs(self, prefix_text: str, ranking_text: str, options: Sequence[Passage | None],
               config: RalmConfig) -> list[ScoredInput]:
        """Its input for each candidate, scoring its tokens of ``ranking_text``. Evaluation and generation both rank
        with these inputs.

        Args:
            prefix_text: the text before the ranking tokens (cut from the left to fit).
            ranking_text: the text whose NLL ranks the candidates.
            options: the candidates (``None``: no passage).
            config: the settings the passages are encoded under.

        Returns:
            Per candidate, its tokens of the passage, of ``prefix_text`` and of ``ranking_text``
                ([`fit_reranker_input`][hf_ralm.selection.rules.fit_reranker_input]), scoring those of ``ranking_text``.

        Examples:
            ```python
            inputs = reranker.inputs("the emperor of", "rome and", [passage, None], config)
            [float(nll.sum()) for nll in score_inputs(reranker.model, inputs)]   # [11.2, 13.9]
            ```
        """
        prefix_ids = self.tokenizer(prefix_text, add_special_tokens=False)["input_ids"]
        ranking_ids = self.tokenizer(ranking_text, add_special_tokens=False)["input_ids"]
        inputs = []
        for option in options:
            passage_ids = passage_prefix(self.tokenizer, option, config)
            tokens, first = fit_reranker_input(passage_ids, prefix_ids, ranking_ids, self.max_length)
            kept = tuple(passage_ids[: self.max_length - len(ranking_ids)])
            inputs.append(ScoredInput(tokens, 0, len(tokens), kept, first))
        return inputs


def load_reranker(config: RalmConfig, reader):
    """The reranker ``config``'s strategy ranks with, on ``reader``'s device (the default one for a reader without
    weights) and in its dtype.

    Args:
        config: the settings (``rerank`` and ``reranker_model``).
        reader: the reader.

    Returns:
        An [`LMReranker`][hf_ralm.selection.rankers.LMReranker] for a strategy that needs ranking NLLs (``"lm"``)
            with a ``reranker_model``, a [`PredictiveReranker`][hf_ralm.selection.predictive.PredictiveReranker] for one
            that needs a cross-encoder (``"predictive"``), else ``None`` (the reader ranks, or nothing does).

    Raises:
        OSError: the reranker LM cannot be loaded (the message says what was looked for).
    """
    needs = get_strategy(RERANK, config.rerank).needs
    if config.reranker_model is None:
        return None
    if CROSS_ENCODER in needs:
        from .predictive import PredictiveReranker

        return PredictiveReranker(config.reranker_model, device=str(working_device(reader)))
    if RANKING_NLLS not in needs:
        return None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(config.reranker_model, dtype=reader.dtype)
        tokenizer = AutoTokenizer.from_pretrained(config.reranker_model)
    except OSError as error:
        raise OSError(f"Could not load the reranker LM {config.reranker_model!r}: it is neither a local model folder "
                      f"nor a model that could be fetched from the Hub. {error}") from error
    return LMReranker(model.to(working_device(reader)).eval(), tokenizer, config.max_length)
