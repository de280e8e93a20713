"""The questions' gold passages as a retrieval corpus (``eval-qa --add-gold-to-corpus``): open QA over a sample of
Wikipedia finds the answers only there.
"""

from __future__ import annotations

import json
import os
from typing import Mapping, Sequence

from ...retrieval.corpus import WORDS_PER_PASSAGE
from ...utils.atomic import write_text_atomic


GOLD_CORPUS_FILE = "gold-passages.jsonl"  # eval-qa --add-gold-to-corpus writes it into --output-dir


def write_gold_corpus(examples: Sequence[Mapping], path: str) -> dict:
    """Write the questions' gold passages (their ``ctxs``) as a corpus JSONL, for a retrieval corpus they are added to.

    Each passage is a row ``{"id": "nq-gold-<row>-<j>", "title", "text"}``; an identical title and text is written
    once. The file is written atomically, and left untouched when it already holds the same bytes (so an index built
    from it is reused).

    Args:
        examples: Questions as [`load_questions`][hf_ralm.load_questions] gives them; those without ``ctxs`` add
            nothing.
        path: The corpus file written.

    Returns:
        Counts of what it wrote: ``num_rows`` (the questions), ``num_passages`` and ``num_over_100_words`` (the passages
            longer than a corpus passage).

    Examples:
        ```python
        write_gold_corpus(load_questions("nq-open-gold-2000.jsonl.gz"), "runs/nq/gold-passages.jsonl")
        # {'num_rows': 2000, 'num_passages': 1968, 'num_over_100_words': 80}
        ```
    """
    seen, lines, long_ones = set(), [], 0
    for row_number, row in enumerate(examples):
        for j, ctx in enumerate(row.get("ctxs") or []):
            title, text = str(ctx.get("title") or ""), str(ctx.get("text") or "")
            if not text.strip() or (title, text) in seen:
                continue
            seen.add((title, text))
            long_ones += len(text.split()) > WORDS_PER_PASSAGE
            lines.append(json.dumps({"id": f"nq-gold-{row_number}-{j}", "title": title, "text": text},
                                    ensure_ascii=False) + "\n")
    content = "".join(lines)
    stats = {"num_rows": len(examples), "num_passages": len(lines), "num_over_100_words": long_ones}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == content:
                return stats
    write_text_atomic(path, content, suffix=".jsonl")
    return stats
