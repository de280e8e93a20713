"""The model card (``README.md``) of a saved or pushed RALM folder, built with ``huggingface_hub``'s
``ModelCard``/``ModelCardData``: the Hub's metadata (``library_name``, ``base_model``, ``pipeline_tag``, tags and,
when figures were measured, ``model-index`` results), then what the folder holds and how to load it, its retriever
and corpus, its settings and the measured figures' table.

Examples:
    ```python
    card = ralm_model_card(model.config, model.retriever, comparison=model.compare_strategies(text),
                           dataset="wikitext")
    card.data.eval_results[0].metric_value   # the first strategy's token perplexity
    print(card)                              # the README.md
    ```
"""

from __future__ import annotations

import os
from typing import Sequence

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .evaluation.compare import Comparison
from .config.configuration_ralm import RalmConfig
from .config.settings import RALM_FIELDS
from .retrieval.base import Retriever
from .retrieval.local import LocalIndexRetriever
from .utils.paths import looks_local

CARD_TAGS = ("retrieval-augmented-generation", "in-context-ralm")
"""The tags every RALM card has (``tags=`` adds to them)."""

EVAL_TASK = {"task_type": "text-generation", "task_name": "Language modeling (In-Context RALM perplexity)"}
"""The ``model-index`` task of measured perplexities."""


def comparison_results(comparison: Comparison, dataset: str | None = None) -> list[EvalResult]:
    """``comparison``'s rows as ``model-index`` results.

    Args:
        comparison: the measured strategies.
        dataset: what they were measured on: a Hub dataset id or a name (``"text"``, named "evaluated text", when
            not given).

    Returns:
        Per strategy its token and word perplexity (metric type ``perplexity``, the strategy as the metric's config);
            none for a comparison that is not complete (a worker of a sharded pass before the others are done).

    Examples:
        ```python
        [(r.metric_name, r.metric_value) for r in comparison_results(comparison, "wikitext")]
        # [('token perplexity (none)', 31.2), ('word perplexity (none)', 52.0), ('token perplexity (top1)', ...]
        ```
    """
    if not comparison.complete:
        return []
    where = {"dataset_type": dataset or "text", "dataset_name": dataset or "evaluated text"}
    return [EvalResult(**EVAL_TASK, **where, metric_type="perplexity", metric_config=row.strategy,
                       metric_name=f"{unit} perplexity ({row.strategy})", metric_value=value)
            for row in comparison.rows for unit, value in (("token", row.token_ppl), ("word", row.word_ppl))]


def ralm_model_card(config: RalmConfig, retriever: Retriever | None, *, repo_id: str | None = None,
                    index_included: bool = False, comparison: Comparison | None = None, dataset: str | None = None,
                    tags: Sequence[str] = ()) -> ModelCard:
    """The card: ``ModelCardData`` metadata and the Markdown body.

    Args:
        config: the RALM's settings (``base_model`` in the metadata only when it is a Hub id, not a local folder).
        retriever: its retriever (``None``: none saved).
        repo_id: the Hub repository the card's loading line names (``None``: a folder).
        index_included: whether the folder holds the retriever's index.
        comparison: measured figures, as ``model-index`` results on ``dataset`` (``comparison_results``) and as a
            table.
        dataset: what ``comparison`` was measured on.
        tags: the card's tags after ``CARD_TAGS``.

    Returns:
        The ``huggingface_hub`` ``ModelCard``.
    """
    base = config.base_model_name_or_path or "unknown"
    name = repo_id or "this folder"
    results = comparison_results(comparison, dataset) if comparison is not None else []
    hub_base = config.base_model_name_or_path
    if hub_base and (looks_local(hub_base) or os.path.isdir(hub_base)):
        hub_base = None  # a folder on this machine: no Hub model to link to
    data = ModelCardData(library_name="hf-ralm", base_model=hub_base, pipeline_tag="text-generation",
                         tags=list(dict.fromkeys([*CARD_TAGS, *tags])), eval_results=results or None,
                         model_name=(repo_id or f"In-Context RALM over {base}") if results else None)
    # an index left out is followed only when given: a saved folder's paths are never followed outside it
    local_index = isinstance(retriever, LocalIndexRetriever)
    index_arg = ', index_dir="path/to/index"' if local_index and not index_included else ""
    lines = [f"# In-Context RALM over {base}", "",
             f"A frozen causal LM, `{base}`, with In-Context Retrieval-Augmented Language Modeling (Ram et al., 2023): "
             "every `retrieval_stride` tokens the last `query_length` tokens retrieve a passage that is put in front "
             "of the text. No weights are stored here: the base model is loaded from its own repository.", "",
             "```python", "from hf_ralm import RetrievalAugmentedModel", "",
             f'model = RetrievalAugmentedModel.from_pretrained("{repo_id or "path/to/folder"}"{index_arg})', "```",
             "", "After `import hf_ralm`, `AutoModelForCausalLM.from_pretrained` loads it too, and "
             '`pipeline("text-generation", model=model, tokenizer=model.tokenizer)` generates with retrieval.', ""]
    if isinstance(retriever, Retriever):
        identity = retriever.identity()
        info = identity["index"]
        where = ("included under `index/`" if index_included else
                 "not included: pass its folder to `from_pretrained` (`index_dir=`; with `corpus=`, built there); on "
                 "the machine where this folder was saved, the index it records is read there while unchanged"
                 if local_index else f"the {retriever.name} backend's own, not a local folder")
        lines += ["## Retriever", "", f"- kind: `{retriever.name}`",
                  f"- corpus fingerprint: `{identity['corpus_fingerprint']}`",
                  f"- passages: {info.get('num_passages', 'unknown'):,}" if isinstance(info.get("num_passages"), int)
                  else "- passages: unknown",
                  f"- forbidden titles: {len(retriever.forbidden_titles)}", f"- index: {where}", ""]
    else:
        lines += ["## Retriever", "", "None saved: pass `retriever=` to `from_pretrained`.", ""]
    lines += ["## Settings", "", "| setting | value |", "|---|---|"]
    lines += [f"| `{field}` | {getattr(config, field)!r} |" for field in sorted(RALM_FIELDS)]
    if comparison is not None:
        measured = f" on {dataset}" if dataset else ""
        lines += ["", f"## Measured{measured}", "", comparison.to_markdown()]
    lines += ["", f"Saved with hf-ralm; {name} loads with `RetrievalAugmentedModel.from_pretrained`.", ""]
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines))
