"""The paper's Figure 8 on our data: exact match on the 2,000 NQ-open questions against the number of passages in the
prompt, k ∈ {0, 1, 2, 3, 4, 6, 8, 10} (0: closed book), both models, and has_answer (a gold answer occurs in the k
passages) for the same k. As benchmarks/tables/qa_tables.py (whose k=0 and k=2 runs these points repeat): BM25 over the
Wikipedia sample plus the questions' gold passages (the same corpus file and index folder, built once, ~95 s), the
paper's prompts, greedy, 10 new tokens, bfloat16 by default.

Each question's top 10 passages are retrieved once, and the k=j prompt holds the first j of them, so the passages of
a smaller k are always among those of a larger one. A point is an `evaluate_qa` run in its own folder under
--work-dir (predictions.jsonl, eval.json): an interrupted point resumes at its next question.

    python benchmarks/figures/qa_num_docs.py                        # docs/figures/qa_num_docs.{csv,png}; resumable
    python benchmarks/figures/qa_num_docs.py --max-questions 8 --num-docs 0 2 --out-dir /tmp/qa-smoke
"""

from __future__ import annotations

import hashlib
import os
import sys

from benchmarks.figures import sweep
from benchmarks.figures import plotting
from benchmarks.bench_setup import CACHE, READERS, SHARED
from benchmarks.figures.resources import Resources, index_identity

NAME = "qa_num_docs"
NUM_DOCS = (0, 1, 2, 3, 4, 6, 8, 10)
SETTINGS = ("model", "data", "dtype", "num_questions", "num_docs", "retriever", "max_new_tokens", "index_id")
MEASURES = ("em", "has_answer", "num_correct", "num_has_answer", "num_truncated", "num_fewer_passages", "device",
            "threads", "measured_at")


class QaData:
    """The questions, each with its top ``depth`` BM25 passages as ``ctxs`` (retrieved once, when first needed)."""

    def __init__(self, args, depth: int):
        from qa_tables import qa_corpus

        from hf_ralm import load_questions

        self.args, self.depth = args, depth
        every = load_questions(args.questions)  # all their gold passages go into the corpus, as in qa_tables
        self.questions = every[: args.max_questions]
        self.gold_corpus, self.index_dir, _ = qa_corpus(args.qa_out, os.path.abspath(args.questions), every,
                                                        args.qa_index_dir)
        self._with_passages = None

    def with_passages(self) -> list[dict]:
        if self._with_passages is None:
            from hf_ralm.retrieval import load_retriever

            retriever = load_retriever("bm25", index_dir=self.index_dir, corpus=[self.args.corpus, self.gold_corpus])
            print(f"[{NAME}] retrieving the top {self.depth} passages of {len(self.questions)} questions",
                  file=sys.stderr, flush=True)
            found = retriever.retrieve([q["question"] for q in self.questions], k=self.depth)
            self._with_passages = [{**q, "ctxs": [p.to_dict() for p in passages]}
                                   for q, passages in zip(self.questions, found)]
        return self._with_passages


def points(res: Resources, qa: QaData) -> list[dict]:
    from hf_ralm import MAX_NEW_TOKENS

    data = os.path.basename(res.args.questions).removesuffix(".gz").removesuffix(".jsonl")
    return [{"model": model, "data": data, "dtype": res.dtype(model), "num_questions": len(qa.questions),
             "num_docs": k, "retriever": "bm25" if k else "none", "max_new_tokens": MAX_NEW_TOKENS,
             "index_id": index_identity(qa.index_dir) if k else ""}
            for model in res.args.models for k in res.args.num_docs]


def measure(res: Resources, qa: QaData, table: sweep.Table, p: dict) -> dict:
    """Answer the questions with ``num_docs`` passages each, in the point's own folder (resumed if interrupted)."""
    from hf_ralm import RunOptions, evaluate_qa

    examples = qa.with_passages() if p["num_docs"] else qa.questions
    if p["num_docs"]:  # the index is built now: its id names the run (a missing one was "missing" before)
        p = {**p, "index_id": index_identity(qa.index_dir)}
    model, tokenizer = res.reader(p["model"], p["dtype"])
    key = "|".join(table.key(p))
    folder = os.path.join(res.args.work_dir, f"{READERS[p['model']].folder}.{p['dtype']}.k{p['num_docs']}."
                                             f"{hashlib.sha256(key.encode()).hexdigest()[:10]}")
    report = evaluate_qa(model, tokenizer, examples, num_docs=p["num_docs"], use_ctxs=p["num_docs"] > 0,
                         settings={"point": key}, run=RunOptions(output_dir=folder, batch_size=res.args.batch_size,
                                                                 show_progress=sys.stderr.isatty()))
    percent = {k: 100 * report[k] for k in ("em", "has_answer")}  # the CSV's columns are in percent
    return {**{k: report[k] for k in MEASURES[:6]}, **percent, "index_id": p["index_id"], **sweep.provenance(model)}


def plot(rows: list[dict], path: str) -> None:
    fig, axes = plotting.panels(2)
    series = ("model", "dtype")
    settings = [s for s in SETTINGS if s != "retriever"]

    def share(count: str):  # the 95% Wilson interval of a share of the questions, in percent as the CSV
        def bounds(row: dict) -> tuple[float, float]:
            low, high = plotting.wilson_interval(int(row[count]), int(row["num_questions"]))
            return 100 * low, 100 * high
        return bounds

    plotting.draw_lines(axes[0][0], rows, "num_docs", "em", series, settings, plotting.model_color,
                        interval=share("num_correct"))
    # has_answer depends on the passages alone, which both readers get the same: one line per question set (drawn
    # per model, the lines lay exactly on top of each other and hid the first model's)
    opened = [row for row in rows if int(row["num_docs"]) > 0]
    reader = sorted({row["model"] for row in opened})[0]
    plotting.draw_lines(axes[0][1], [row for row in opened if row["model"] == reader], "num_docs", "has_answer",
                        ("dtype",), [s for s in settings if s != "model"], lambda row: {"color": "#444444"},
                        interval=share("num_has_answer"))
    titles = ("exact match (95% Wilson intervals)", "has_answer: a gold answer is in the k passages")
    for ax, what, title in zip(axes[0], ("exact match (%)", "has_answer (%)"), titles):
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("passages in the prompt k")
        ax.set_ylabel(what)
        ax.set_xticks(sorted({int(row["num_docs"]) for row in rows}))
    # The readers' legend on the exact-match panel, above its lines; the question sets' on has_answer's, under its
    # rising curve; long handles so the dashes of a split series show.
    axes[0][0].legend(fontsize=6, loc="upper right", handlelength=4)
    axes[0][0].set_ylim(top=max(float(row["em"]) for row in rows) * 1.45)
    axes[0][1].set_ylim(0, 100)  # from zero: a share of the questions
    axes[0][1].legend(fontsize=6, loc="lower right", handlelength=4, title="both readers (the same passages)",
                      title_fontsize=6)
    plotting.save(fig, path, rows, SETTINGS)


def main(argv=None) -> list[dict]:
    parser = sweep.parser(__doc__, texts=False, dtype="bfloat16")
    parser.add_argument("--num-docs", type=int, nargs="+", default=list(NUM_DOCS))
    parser.add_argument("--questions", default=str(SHARED / "nq-open" / "nq-open-gold-2000.jsonl.gz"))
    parser.add_argument("--max-questions", type=int, help="answer only the first N questions (default: all)")
    parser.add_argument("--qa-out", default=str(CACHE / "qa"),
                        help="qa_tables.py's --out: the gold passages' corpus file and the index are there")
    parser.add_argument("--qa-index-dir",
                        help="BM25 index of corpus + gold passages (default QA_OUT/index-wiki-plus-nq-gold)")
    parser.add_argument("--work-dir", default=str(CACHE / "figures" / NAME), help="the points' evaluate_qa folders")
    args = parser.parse_args(argv)
    res = Resources(args)
    table = sweep.Table(os.path.join(args.out_dir, f"{NAME}.csv"), SETTINGS, MEASURES)
    qa = None

    def qa_data() -> QaData:
        nonlocal qa
        qa = qa or QaData(args, max(max(args.num_docs), max(NUM_DOCS)))
        return qa

    return sweep.main(args, table, lambda: points(res, qa_data()), lambda p: measure(res, qa_data(), table, p), plot,
                      NAME)


if __name__ == "__main__":
    main()
