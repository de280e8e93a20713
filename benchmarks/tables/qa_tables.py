"""Open-domain QA as in the paper's §7: exact match of SmolLM2-135M and Gemma-3-270M on NQ-open (the 2,000 questions
of ../shared/data/nq-open/nq-open-gold-2000.jsonl.gz), closed book (k=0) vs open book with the top-2 BM25 passages
retrieved by the question (k=2), over the whole Wikipedia sample plus the questions' gold passages.

The gold passages (each row's `ctxs`) are first written, deduplicated by identical title and text, as a corpus JSONL
(`id` "nq-gold-<row>-<j>", `title`, `text`) into OUT/<questions>-passages.jsonl (atomically, byte-identical on
every run, so the index built from it is reused). The index (OUT/index-wiki-plus-nq-gold, built once by the first
open-book run, ~95 s on the 2-core CPU) cuts every corpus row into passages of 100 words (`split_passages`, as for
the Wikipedia articles): the gold passages are DPR passages of ~100 words, but some are longer (80 of the 1,968
distinct ones are over 100 words, up to 289), and those are split into 100-word pieces and a shorter tail (2,058
passages from the gold file instead of 1,968). We accept that: eval-qa has no per-corpus passage size.

Each run is an `hf-ralm eval-qa` call writing OUT/<run>/predictions.jsonl and eval.json; finished runs (eval.json
`complete` with the number of questions asked for) are skipped, and an interrupted one continues where it stopped
(eval-qa resumes from predictions.jsonl), so the script resumes. Models run in bfloat16 by default (~9x faster than
float32 on this CPU, which has AMX); --dtype float32 gives separate runs. has_answer is whether a gold answer occurs in
the passages of the prompt, so it is "—" closed book.

    python benchmarks/tables/qa_tables.py                        # all 2,000 questions, into ~/.cache/hf-ralm/qa
    python benchmarks/tables/qa_tables.py --max-questions 8 --out /tmp/qa-smoke
"""

import argparse
import gzip
import json
import os
import shlex
import subprocess
import sys

from hf_ralm import write_gold_corpus
from hf_ralm.retrieval import WORDS_PER_PASSAGE

HOME = os.path.expanduser("~")
SHARED = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data"))


def read_questions(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def qa_corpus(out: str, questions: str, rows: list[dict], index_dir: str | None = None) -> tuple[str, str, dict]:
    """``(gold corpus file, index folder, gold passages' stats)``: the questions' gold passages written as a corpus
    under ``out`` (:func:`hf_ralm.evaluation.qa.write_gold_corpus`), and the folder of the BM25 index of the Wikipedia
    sample plus them (``index_dir``, default ``out/index-wiki-plus-nq-gold``)."""
    name = os.path.basename(questions).removesuffix(".gz").removesuffix(".jsonl")
    gold_corpus = os.path.join(out, f"{name}-passages.jsonl")
    gold = write_gold_corpus(rows, gold_corpus)
    return gold_corpus, os.path.abspath(index_dir or os.path.join(out, "index-wiki-plus-nq-gold")), gold


def read_eval(out_dir: str) -> dict | None:
    path = os.path.join(out_dir, "eval.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(HOME, ".cache/hf-ralm/qa"))
    parser.add_argument("--models-dir",
                        default=os.environ.get("HF_RALM_MODELS", os.path.join(HOME, ".cache/hf-ralm/models")))
    parser.add_argument("--questions", default=os.path.join(SHARED, "nq-open/nq-open-gold-2000.jsonl.gz"))
    parser.add_argument("--corpus", default=os.path.join(SHARED, "wikipedia-2015-sample/articles.jsonl.gz"),
                        help="the Wikipedia corpus the gold passages are added to")
    parser.add_argument("--index-dir",
                        help="BM25 index of corpus + gold passages (default OUT/index-wiki-plus-nq-gold)")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--max-questions", type=int, help="answer only the first N questions (default: all)")
    parser.add_argument("--batch-size", type=int, default=8, help="questions per generate call (default 8)")
    args = parser.parse_args()

    out = os.path.abspath(os.path.expanduser(args.out))
    questions = os.path.abspath(args.questions)
    corpus = os.path.abspath(args.corpus)
    rows = read_questions(questions)
    gold_corpus, index_dir, gold = qa_corpus(out, questions, rows, args.index_dir)
    wanted = len(rows) if args.max_questions is None else min(args.max_questions, len(rows))

    models = {"SmolLM2-135M": "smollm2-135m-instruct", "Gemma-3-270M": "gemma-3-270m"}
    settings = {  # run suffix: (label, eval-qa options)
        "closed-book-k0": ("closed book, k=0", ["--num-docs", "0"]),
        "bm25-k2": ("open book, BM25, k=2", ["--num-docs", "2", "--retriever", "bm25", "--corpus", corpus,
                                             "--corpus", gold_corpus, "--index-dir", index_dir]),
    }
    table, commands = [], []
    for model_name, folder in models.items():
        for suffix, (label, options) in settings.items():
            run = f"{folder}.{args.dtype}.{suffix}"
            out_dir = os.path.join(out, run)
            command = ["hf-ralm", "eval-qa", "--model", os.path.join(args.models_dir, folder),
                       "--questions", questions, *options, "--dtype", args.dtype,
                       "--batch-size", str(args.batch_size), "--output-dir", out_dir]
            if args.max_questions is not None:
                command += ["--max-questions", str(args.max_questions)]
            commands.append(command)
            report = read_eval(out_dir)
            if not (report and report.get("complete") and report.get("num_questions") == wanted):
                print("running:", shlex.join(command), flush=True)
                subprocess.run(command, check=True, stdout=sys.stderr)  # eval-qa resumes an interrupted run
                report = read_eval(out_dir)
            table.append((model_name, label, report))

    print("\n| model | setting | EM | has_answer | questions |")
    print("|---|---|---|---|---|")
    for model_name, label, r in table:
        found = f"{100 * r['has_answer']:.1f}%" if r["settings"]["num_docs"] else "—"
        print(f"| {model_name}, {args.dtype} | {label} | {100 * r['em']:.1f}% ({r['num_correct']}) | {found} | "
              f"{r['num_questions']} |")
    index_info = os.path.join(index_dir, "hf_ralm_index.json")
    index_passages = "?"
    if os.path.isfile(index_info):
        with open(index_info, encoding="utf-8") as f:
            index_passages = json.load(f).get("num_passages", "?")
    notes = [f"{r['num_truncated']} prompts of {m} ({l}) were cut to fit" for m, l, r in table if r["num_truncated"]]
    notes += [f"{r['num_fewer_passages']} questions of {m} ({l}) got fewer than k passages"
              for m, l, r in table if r["num_fewer_passages"]]
    print(f"\nGreedy, {table[0][2]['settings']['max_new_tokens']} new tokens, first line; EM with SQuAD normalization. "
          f"BM25 index: {index_passages} passages of ≤{WORDS_PER_PASSAGE} words, from {os.path.basename(corpus)} plus "
          f"the {gold['num_passages']} distinct gold passages of the {gold['num_rows']} questions "
          f"({gold['num_over_100_words']} of them over {WORDS_PER_PASSAGE} words, hence split)."
          + (" " + "; ".join(notes) + "." if notes else ""))
    print("\nCommand:\n\n    " + shlex.join(["python", *sys.argv]))
    print("\nwhich runs:\n\n" + "\n".join("    " + shlex.join(c) for c in commands))


if __name__ == "__main__":
    main()
