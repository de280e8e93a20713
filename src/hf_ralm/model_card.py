"""The model card (``README.md``) of a saved or pushed RALM folder: what the folder holds and how to load it, the
base model it refers to, its retriever and corpus, its settings and, when given, measured figures.

Example::

    print(ralm_model_card(model.config, model.retriever, comparison=model.compare_strategies(text)))
"""

from __future__ import annotations

from .compare import Comparison
from .configuration_ralm import RALM_FIELDS, RalmConfig
from .retrieval.base import Retriever, retriever_identity
from .retrieval.index_folder import read_index_info


def ralm_model_card(config: RalmConfig, retriever: Retriever | None, *, repo_id: str | None = None,
                    index_included: bool = False, comparison: Comparison | None = None) -> str:
    """The card's Markdown, with the Hub's metadata header (``library_name``, ``base_model``, tags)."""
    base = config.base_model_name_or_path or "unknown"
    name = repo_id or "this folder"
    # an index left out is followed only when given: a saved folder's paths are never followed outside it
    index_arg = ', index_dir="path/to/index"' if isinstance(retriever, Retriever) and not index_included else ""
    lines = ["---", "library_name: hf-ralm", f"base_model: {base}", "tags:", "- retrieval-augmented-generation",
             "- in-context-ralm", "---", "", f"# In-Context RALM over {base}", "",
             f"A frozen causal LM, `{base}`, with In-Context Retrieval-Augmented Language Modeling (Ram et al., 2023): "
             "every `retrieval_stride` tokens the last `query_length` tokens retrieve a passage that is put in front "
             "of the text. No weights are stored here: the base model is loaded from its own repository.", "",
             "```python", "from hf_ralm import RetrievalAugmentedModel", "",
             f'model = RetrievalAugmentedModel.from_pretrained("{repo_id or "path/to/folder"}"{index_arg})', "```",
             ""]
    if isinstance(retriever, Retriever):
        info = read_index_info(retriever.index_dir) or {}
        identity = retriever_identity(retriever)
        where = ("included under `index/`" if index_included else
                 "not included: pass its folder to `from_pretrained` (`index_dir=`; with `corpus=`, built there)")
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
        lines += ["", "## Measured", "", comparison.to_markdown()]
    lines += ["", f"Saved with hf-ralm; {name} loads with `RetrievalAugmentedModel.from_pretrained`.", ""]
    return "\n".join(lines)
