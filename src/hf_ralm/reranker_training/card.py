"""The model card (``README.md``) of a trained predictive reranker, built with ``huggingface_hub``'s
``ModelCard``/``ModelCardData`` as the RALM's card (``hf_ralm.model_card``) and the retrieval dataset's are: the
Hub's metadata (``library_name``, ``pipeline_tag``, tags, ``base_model``), then the setting the data was collected in,
the training data, the loss (Eq. 9), the held-out figures, the usage and the citation.

Examples:
    ```python
    card = reranker_model_card(metadata, results, hyperparameters, model_id="me/reranker",
                               base_model="sentence-transformers/all-MiniLM-L6-v2")
    card.data.pipeline_tag   # 'text-ranking'
    card.save("models/reranker/README.md")
    ```
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

CARD_FILE = "README.md"
EVAL_RESULTS_FILE = "eval_results.json"
"""The file of a trained reranker's folder that holds its held-out figures (what ``train_reranker`` returns)."""
CURVE_FILE = "training_curve.json"
"""The file of a trained reranker's folder that holds its training curve (held-out figures per evaluation step)."""

CARD_TAGS = ("sentence-transformers", "cross-encoder", "reranker", "hf-ralm", "in-context-ralm")
"""The tags of every reranker card."""

CITATION = """@article{ram2023incontext,
  title = {In-Context Retrieval-Augmented Language Models},
  author = {Ram, Ori and Levine, Yoav and Dalmedigos, Itay and Muhlgay, Dor and Shashua, Amnon and
            Leyton-Brown, Kevin and Shoham, Yoav},
  journal = {Transactions of the Association for Computational Linguistics},
  volume = {11},
  pages = {1316--1331},
  year = {2023}
}"""
"""The paper's BibTeX entry: the card's citation, and the loss's for sentence-transformers' own cards."""

SETTINGS = (  # (metadata key, what the card calls it)
    ("reader", "reader LM (frozen) p_θ"),
    ("rerank_candidates", "candidates per window k"),
    ("retrieval_stride", "stride s (tokens of y)"),
    ("query_length", "retrieval query length ℓ"),
    ("rerank_tokens", "zero-shot ranking tokens s' (recorded; the cross-encoder reads the query)"),
    ("window_length", "reader window length L"),
    ("max_doc_tokens", "passage tokens kept (max_doc_tokens)"),
    ("corpus", "retrieval corpus"),
)
"""The collection's settings the card's table names first, in this order; any other metadata key follows as it is."""


def reranker_model_card(metadata: Mapping[str, Any], results: Mapping[str, Any], hyperparameters: Mapping[str, Any],
                        *, model_id: str, base_model: str | None) -> ModelCard:
    """The card of a trained reranker: ``ModelCardData`` metadata and the Markdown body.

    Args:
        metadata: How the training data was made (reader, k, stride, query length, corpus, ...): one row of the
            setting's table each, those of ``SETTINGS`` first.
        results: What ``train_reranker`` returns: the data's sizes, the losses and the held-out figures (with
            ``no_passage_chosen`` and ``nll_no_passage`` when ``no_passage_candidate`` is set).
        hyperparameters: The training's settings: ``init``, ``epochs``, ``batch_size``, ``learning_rate``, ``seed``,
            ``eval_fraction``, and optionally ``bf16`` and ``attention_dropout``.
        model_id: What the usage examples load: the Hub repository the reranker is pushed to, or its folder.
        base_model: The Hub id of the initial model, the card's ``base_model``; ``None`` for a local folder.

    Returns:
        The ``huggingface_hub.ModelCard``; ``str(card)`` is the ``README.md``.

    Examples:
        ```python
        card = reranker_model_card({"reader": "gpt2", "rerank_candidates": 16}, results, hyperparameters,
                                   model_id="me/reranker", base_model=None)
        card.data.library_name   # 'sentence-transformers'
        ```
    """
    data = ModelCardData(library_name="sentence-transformers", pipeline_tag="text-ranking", tags=list(CARD_TAGS),
                         base_model=base_model)
    metadata = {"corpus": _corpus(metadata), **metadata}
    no_passage = results.get("no_passage_candidate", False)
    reader = metadata.get("reader")
    body = [
        f"# Predictive reranker for In-Context RALM (reader: {reader})", "",
        f"A cross-encoder `f(x, d)` that picks, among the k passages retrieval returned for a prefix `x`, the passage "
        f"`d` under which the frozen reader LM `{reader}` best predicts the next s tokens `y`: the *predictive "
        'reranking* of Ram et al. (2023), "In-Context Retrieval-Augmented Language Models", §6.2. Trained with hf-ralm '
        "(`hf_ralm.reranker_training.train_reranker`).", "",
        "## Setting", "", "| setting | value |", "|---|---|", *_setting_rows(metadata), "",
        "## Training data", "", _data_paragraph(results, hyperparameters["eval_fraction"]), "",
        *_loss_section(results, hyperparameters, base_model), "",
        *_figures_section(results), "",
        *_usage_section(reader, model_id, no_passage), "",
        "## Citation", "", "```bibtex", CITATION, "```", "",
    ]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))


def _setting_rows(metadata: Mapping[str, Any]) -> list[str]:
    """The setting's table rows: the known settings by their names (``not recorded`` when missing), then the rest."""
    known = {key for key, _ in SETTINGS}
    rows = [f"| {label} | {_cell(metadata.get(key, 'not recorded'))} |" for key, label in SETTINGS]
    return rows + [f"| {key} | {_cell(value)} |" for key, value in metadata.items() if key not in known]


def _data_paragraph(r: Mapping[str, Any], eval_fraction: float) -> str:
    """What the reranker was trained and evaluated on: windows, articles and candidates on each side."""
    empty = ", and the empty passage: no passage" if r.get("no_passage_candidate", False) else ""
    return (
        f"{r['train_windows'] + r['eval_windows']} windows with {r['train_candidates'] + r['eval_candidates']} "
        f"candidates in all: {r['train_windows']} windows of {r['train_articles']} articles ({r['train_candidates']} "
        f"candidates) for training, and {r['eval_windows']} windows of {r['eval_articles']} other articles "
        f"({r['eval_candidates']} candidates; the articles whose id hashes into the held-out {eval_fraction:.0%}) held "
        "out for evaluation. Each window holds the prefix the reranker reads, its candidates (`title\\ntext`, as put "
        f"in the reader's context{empty}) and the reader's `log p_θ(y | [d_i; x])` summed over the stride's tokens, "
        "precomputed with the reader frozen.")


def _loss_section(r: Mapping[str, Any], hp: Mapping[str, Any], base_model: str | None) -> list[str]:
    """Eq. 9 and how it was minimised: initialisation, epochs, batch, learning rate, precision, time, final loss."""
    gate = ("The empty passage is one more candidate, with the reader's log-probability of `y` without a passage: "
            "the reranker also learns when no passage is best (a learned retrieval gate). "
            if r.get("no_passage_candidate", False) else "")
    base = f" ({base_model})" if base_model not in (None, hp["init"]) else ""
    precision = "bfloat16 mixed precision" if hp.get("bf16") else "float32"
    dropout = "" if hp.get("attention_dropout") is None else f", attention dropout {hp['attention_dropout']}"
    return [
        "## Loss (Eq. 9)", "",
        "Per window, with the reader frozen, the negative log of the reader's probability of `y` under the reranker's "
        "distribution over the candidates, averaged over windows:", "",
        "    L = -log Σ_i softmax(f(x, d_1..d_k))_i · p_θ(y | [d_i; x])",
        "      = -logsumexp_i( log_softmax(f)_i + log p_θ(y | [d_i; x]) )", "",
        f"{gate}Initialisation: `{hp['init']}`{base}; {hp['epochs']} epoch(s), batch size {hp['batch_size']} windows, "
        f"learning rate {hp['learning_rate']}, seed {hp['seed']}, {precision}{dropout}; "
        f"{r['train_seconds'] / 60:.1f} minutes of training. Mean training loss {r['train_loss']:.4f}.",
    ]


def _figures_section(r: Mapping[str, Any]) -> list[str]:
    """The held-out figures' table (``rerank_metrics`` and the losses)."""
    rows = [
        ("reranker's choice = oracle's choice (argmax of the reader's log p(y))", f"{r['oracle_agreement']:.1%}"),
        ("retrieval top-1 = oracle's choice", f"{r['retrieval_oracle_agreement']:.1%}"),
        ("chance (mean 1/k)", f"{r['chance_agreement']:.1%}"),
        ("mean target NLL of the reranker's choice (nats per window)", f"{r['nll_reranker']:.4f}"),
        ("mean target NLL of the retrieval top-1", f"{r['nll_retrieval_top1']:.4f}"),
        ("mean target NLL of the oracle's choice", f"{r['nll_oracle']:.4f}"),
    ]
    if r.get("no_passage_candidate", False):
        rows += [("windows left without a passage by the reranker", f"{r['no_passage_chosen']:.1%}"),
                 ("mean target NLL without a passage", f"{r['nll_no_passage']:.4f}")]
    rows += [("Eq. 9 loss before training", f"{r['eval_loss_init']:.4f}"),
             ("Eq. 9 loss after training", f"{r['eval_loss']:.4f}")]
    return ["## Evaluation (held-out windows)", "", "| figure | value |", "|---|---|",
            *[f"| {name} | {value} |" for name, value in rows], "",
            f"The same figures are in `{EVAL_RESULTS_FILE}`, the learning curve in `{CURVE_FILE}`."]


def _usage_section(reader: str | None, model_id: str, no_passage: bool) -> list[str]:
    """How to use the reranker: in a RALM with hf-ralm, or alone with sentence-transformers."""
    when_none = ", and no passage when it scores the empty passage highest" if no_passage else ""
    allow = ", rerank_allow_no_passage=True" if no_passage else ""
    return [
        "## Usage", "",
        f"With hf-ralm, as the reranker of a RALM (the reader ranks nothing; this model chooses{when_none}):", "",
        "```python", "from hf_ralm import RetrievalAugmentedModel", "",
        f'model = RetrievalAugmentedModel.from_pretrained("{reader or "READER"}", retriever="bm25",',
        f'    index_dir="wiki-bm25", rerank="predictive", reranker_model="{model_id}"{allow})', "```", "",
        "or with sentence-transformers alone (scores are the raw `f(x, d)`; higher is better):", "",
        "```python", "from sentence_transformers import CrossEncoder", "",
        f'scores = CrossEncoder("{model_id}").predict([(prefix, passage) for passage in candidate_passages])', "```",
    ]


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
