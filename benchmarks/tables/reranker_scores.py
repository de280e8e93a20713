"""What the trained predictive rerankers' scores look like on the held-out windows: how often each picks retrieval's
first passage, how far apart it scores a window's 16 passages, and, for a reranker trained with the no-passage
candidate, how far the empty passage's score leads the best passage's (positive: no passage is chosen).

It reads the same held-out windows as ``train_rerankers.py`` (the first ``--records`` records of the rerank data, the
articles whose id hashes into the held-out tenth) and the folders it wrote::

    python benchmarks/tables/reranker_scores.py --models passages-4000 no-passage-4000

About 3.5 minutes a model for the 384 held-out windows on this project's 2-core CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.bench_setup import RESULTS


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(RESULTS / "rerank-data-smollm2"))
    parser.add_argument("--records", type=int, default=4500, help="the data's first N records, as in training")
    parser.add_argument("--models-dir", default=str(Path.home() / ".cache" / "hf-ralm" / "rerankers"))
    parser.add_argument("--models", nargs="+", default=["passages-4000", "no-passage-4000"],
                        help="folders under --models-dir; a name starting with 'no-passage' also scores the empty "
                             "passage")
    return parser.parse_args(argv)


def score_summary(scores: list[list[float]], with_empty: bool) -> dict[str, float]:
    """Per window ``scores`` of the k passages in retrieval order (and, ``with_empty``, the empty passage last): the
    share of windows whose choice is rank 1 or no passage, the median spread of the passages' scores, and the empty
    passage's lead over the best passage (min, median, max).

    Example:
        >>> score_summary([[0.2, 0.1, 0.5], [0.3, 0.1, 0.0]], with_empty=True)["no_passage_chosen"]
        0.5
    """
    from hf_ralm.selection import argmax_first

    passages = [s[:-1] if with_empty else s for s in scores]
    # the choice as the reranker makes it (the first best-scored candidate); the empty passage's index is no passage
    chosen = [-1 if (i := argmax_first(s)) == len(p) else i for s, p in zip(scores, passages)]
    summary = {
        "windows": len(scores),
        "rank1_chosen": chosen.count(0) / len(scores),
        "passage_score_spread_median": statistics.median(max(p) - min(p) for p in passages),
    }
    if with_empty:
        leads = [s[-1] - max(p) for s, p in zip(scores, passages)]
        summary.update(no_passage_chosen=chosen.count(-1) / len(scores), empty_lead_min=min(leads),
                       empty_lead_median=statistics.median(leads), empty_lead_max=max(leads))
    return summary


def main(argv=None) -> int:
    from hf_ralm.reranker_training import load_rerank_data, split_by_article
    from hf_ralm.selection import NO_PASSAGE_TEXT, PredictiveReranker

    args = parse_args(argv)
    dataset, _ = load_rerank_data(args.data)
    _, held_out = split_by_article(dataset.select(range(min(args.records, dataset.num_rows))), 0.1)
    held_out = held_out.to_dict()
    for name in args.models:
        with_empty = name.startswith("no-passage")
        reranker = PredictiveReranker(Path(args.models_dir) / name, batch_size=64)
        candidates = [list(c) + [NO_PASSAGE_TEXT] * with_empty for c in held_out["candidates"]]
        summary = score_summary(reranker.scores(held_out["prefix"], candidates, show_progress=True), with_empty)
        print(f"{name}: " + ", ".join(f"{key} {value:.3f}" if isinstance(value, float) else f"{key} {value}"
                                      for key, value in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
