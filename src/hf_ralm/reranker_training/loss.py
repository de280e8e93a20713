"""The predictive reranker's loss, Eq. 9 of Ram et al. (2023, §6.2), per window with candidates ``d_1..d_k`` and the
frozen reader's ``p_θ(y | [d_i; x])``:

    L = -log Σ_i softmax(f(x, d_·))_i · p_θ(y | [d_i; x])  =  -logsumexp_i(log_softmax(f)_i + log p_θ(y | [d_i; x]))

as a function of scores (``predictive_loss``) and as a sentence-transformers cross-encoder loss
(``PredictiveRerankLoss``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .card import CITATION

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder


def predictive_loss(scores: Sequence[Tensor], target_logprobs: Sequence[Tensor]) -> Tensor:
    """Eq. 9 averaged over windows: ``-logsumexp_i(log_softmax(f)_i + target_logprob_i)``.

    Windows may have different numbers of candidates (the padding is masked out).

    Args:
        scores: Per window, ``f(x, d_i)`` for its candidates.
        target_logprobs: Per window, its candidates' ``log p_θ(y | [d_i; x])``, as many as its scores.

    Returns:
        The mean loss, a float32 scalar at least (the targets are sums over s tokens, tens of nats).

    Raises:
        ValueError: Not one target list per score list, or a window without candidates or with another number of
            targets than of scores.

    Examples:
        ```python
        predictive_loss([torch.tensor([2.0, 0.0])], [torch.tensor([-1.0, -5.0])])  # tensor(1.1245)
        ```
    """
    if len(scores) != len(target_logprobs) or not scores:
        raise ValueError(f"Need one target list per score list, got {len(scores)} and {len(target_logprobs)}.")
    lengths = [len(window) for window in scores]
    if lengths != [len(window) for window in target_logprobs] or min(lengths) == 0:
        raise ValueError(
            f"Each window needs at least one candidate and one target log-probability per score; got score counts "
            f"{lengths} and target counts {[len(window) for window in target_logprobs]}."
        )
    device = scores[0].device
    # float32 at least: the targets are sums over s tokens (tens of nats) and the logsumexp must not lose them
    logits = nn.utils.rnn.pad_sequence([window.float() for window in scores], batch_first=True)
    targets = nn.utils.rnn.pad_sequence(
        [torch.as_tensor(window, dtype=torch.float32, device=device) for window in target_logprobs], batch_first=True
    )
    mask = torch.arange(logits.shape[1], device=device) < torch.tensor(lengths, device=device)[:, None]
    # -inf at padded positions gives them zero weight in the softmax and in the logsumexp, and zero gradient
    log_weights = torch.log_softmax(logits.masked_fill(~mask, float("-inf")), dim=-1)
    joint = (log_weights + targets).masked_fill(~mask, float("-inf"))
    return -torch.logsumexp(joint, dim=-1).mean()


def held_out_loss(scores: list[list[float]], target_logprobs: list[list[float]]) -> float:
    """Eq. 9 of scores already computed (the held-out windows'), without gradients.

    Args:
        scores: Per window, the reranker's scores of its candidates.
        target_logprobs: Per window, its candidates' target log-probabilities.

    Returns:
        The mean loss as a float.
    """
    with torch.no_grad():
        loss = predictive_loss([torch.tensor(window) for window in scores],
                               [torch.tensor(window) for window in target_logprobs])
    return loss.item()


class PredictiveRerankLoss(nn.Module):
    """Eq. 9 as a sentence-transformers cross-encoder loss, for ``CrossEncoderTrainer``.

    It takes the inputs of the built-in listwise losses (``ListNetLoss``): a dataset with the columns
    ``(query, docs, labels)`` reaches it as ``inputs = [queries, docs_lists]`` and ``labels = [tensor per query]``;
    here the query is the prefix, the docs the candidates and the labels their target log-probabilities. Windows may
    have different numbers of candidates.

    Args:
        model: The cross-encoder being trained, with one label (its score is ``f(x, d)``).

    Raises:
        ValueError: The model has more than one label.

    Examples:
        ```python
        loss = PredictiveRerankLoss(cross_encoder)
        # dataset columns: prefix, candidates, labels (the target log-probabilities)
        trainer = CrossEncoderTrainer(model=cross_encoder, train_dataset=dataset, loss=loss)
        ```
    """

    pairs_per_forward: int = 32
    """(prefix, candidate) pairs per forward of the cross-encoder, grouped by length."""

    def __init__(self, model: CrossEncoder) -> None:
        super().__init__()
        if model.num_labels != 1:
            raise ValueError(
                f"Eq. 9 needs one score per (prefix, passage) pair, but the model has {model.num_labels} labels: "
                "load it with num_labels=1."
            )
        self.model = model

    def forward(
        self, inputs: list[list[str] | list[list[str]]], labels: list[Tensor], prompt: str | None = None,
        task: str | None = None,
    ) -> Tensor:
        """The mean Eq. 9 loss of a batch of windows.

        Args:
            inputs: The prefixes and, per prefix, its candidates.
            labels: Per window, its candidates' target log-probabilities.
            prompt: Passed to the model's preprocessing.
            task: Passed to the model's preprocessing.

        Returns:
            The mean loss over the batch's windows.

        Raises:
            ValueError: Not two input columns, or the labels one tensor rather than one per window.
        """
        from sentence_transformers.util import batch_to_device

        if len(inputs) != 2 or isinstance(labels, Tensor):
            raise ValueError(
                "PredictiveRerankLoss expects the columns (prefix, candidates, labels) with a list of target "
                f"log-probabilities per window; got {len(inputs)} input column(s) and labels of type "
                f"{type(labels).__name__}."
            )
        prefixes, candidates = inputs
        counts = [len(passages) for passages in candidates]
        pairs = [(prefix, passage) for prefix, passages in zip(prefixes, candidates) for passage in passages]
        # A step holds every candidate of every window (136 pairs at k=16 and 8 windows). Padded to the longest of
        # them, about a third of the tokens are padding; forwards over pairs of similar length (sorted by characters,
        # as CrossEncoder.predict does) pad little. Padding is masked, so the scores are the same either way.
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        by_length = []
        for start in range(0, len(order), self.pairs_per_forward):
            group = [pairs[i] for i in order[start : start + self.pairs_per_forward]]
            tokens = batch_to_device(self.model.preprocess(group, prompt=prompt, task=task), self.model.device)
            by_length.append(self.model(tokens)["scores"].view(-1))
        logits = torch.cat(by_length)
        logits = logits[torch.tensor(order, device=logits.device).argsort()]  # back in the pairs' order
        return predictive_loss(list(torch.split(logits, counts)), labels)

    def get_config_dict(self) -> dict[str, Any]:
        """Read by sentence-transformers' model card machinery; Eq. 9 has no settings.

        Returns:
            An empty dictionary.
        """
        return {}

    @property
    def citation(self) -> str:
        """The paper's BibTeX entry, for sentence-transformers' model cards."""
        return CITATION
