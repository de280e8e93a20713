"""Parity of the two BM25 backends: top-1 agreement between Lucene (pyserini/Anserini, ``retriever="lucene"``) and the
embedded bm25s backend (``retriever="bm25"``) on the same passages.

Queries are the paper's: the ℓ=32-token query of every retrieval window (stride 4, max_length 512) over the first
2,048 tokens of WikiText-103 valid, tokenized with SmolLM2-135M's tokenizer. Both indexes number the passages of the
Wikipedia sample the same way (row order of ``split_passages``), so agreement is a comparison of passage ids.

Both sides mean to analyze text the same way, and the script checks where they do not. bm25s: the backend's own
analysis, ``hf_ralm.retrieval.analysis`` (Lucene's StandardTokenizer word breaks, possessive filter, lowercase, the 33
English stop words and Lucene's Porter stemmer, written in Python; its ``ANALYSIS`` record is printed at run time).
Lucene: Anserini's ``DefaultEnglishAnalyzer`` (the same chain in Java), the analyzer of the index and of the
searcher. For each disagreement the script reports:

* whether the two top-1 passages have the same text (duplicates ranked in another order);
* whether both sides turn the query into the same terms (multiset of analyzed terms). When they differ, whether the
  tokenizers split the query differently (Lucene's analysis of the backend's tokens, one by one, is not Lucene's
  analysis of the whole query) and which tokens the two sides turn into different terms (stemmer or filters);
* the margins on both sides: how bm25s scores Lucene's pick relative to its own top-1, and how Lucene scores bm25s'
  pick relative to its own top-1. Lucene's side is recomputed in Python from its analysis and its index statistics
  (document frequencies, average length, one-byte ``SmallFloat`` length norms), checked against the scores Anserini
  returned, and recomputed once more with exact document lengths;
* for each query term whose statistics differ between the two analyses: its document frequency on both sides and its
  frequency in each of the two passages on both sides;
* a cause, the first that applies: *query terms differ*; *length norms* (with exact document lengths Lucene would rank
  bm25s' pick first); *score tie* (both picks have the same Lucene score to Anserini's 4 decimals; Anserini keeps
  Lucene's order, by unrounded score, then internal docid); otherwise *document analysis* (same query terms, and
  exact lengths would not change Lucene's pick, so the difference lies in how the passages were analyzed: term
  frequencies, document frequencies and lengths under the two tokenizers/stemmers).

Apart from the queries, ``--compare-passages`` passages spread evenly over the index are analyzed by both sides, and
the script counts those whose terms differ.

The Lucene index is built on the first run (``--lucene-index``; about 5 minutes for the 666k passages on 2 cores)::

    python benchmarks/speed/bench_lucene_parity.py --json-out ~/.cache/hf-ralm/bench/lucene_parity.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.bench_setup import SHARED

HOME = Path.home()


def parse_args(argv=None) -> argparse.Namespace:
    from benchmarks.bench_setup import DEFAULT_SETTINGS
    from hf_ralm.cli import add_ralm_arguments

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(SHARED / "wikipedia-2015-sample" / "articles.jsonl.gz"))
    parser.add_argument("--bm25-index", default=str(HOME / ".cache/hf-ralm/index/wikipedia-2015-sample-bm25"))
    parser.add_argument("--lucene-index", default=str(HOME / ".cache/hf-ralm/index/wikipedia-2015-sample-lucene"),
                        help="built there from --corpus when missing or built from another corpus")
    parser.add_argument("--data", default=str(SHARED / "wikitext-103" / "valid.jsonl"))
    parser.add_argument("--tokenizer", default=str(HOME / ".cache/hf-ralm/models/smollm2-135m-instruct"))
    parser.add_argument("--max-eval-tokens", type=int, default=2048)
    add_ralm_arguments(parser, settings=("max_length", "retrieval_stride", "query_length"), defaults=DEFAULT_SETTINGS)
    parser.add_argument("--forbidden-titles", default="", help="titles file excluded from both sides ('' for none)")
    parser.add_argument("--examples", type=int, default=5, help="disagreements to print in detail (default 5; -1: all)")
    parser.add_argument("--depth", type=int, default=10, help="hits fetched per query for the rank figures")
    parser.add_argument("--threads", type=int, default=0, help="search threads for both backends (0: all cores)")
    parser.add_argument("--compare-passages", type=int, default=10_000,
                        help="passages, evenly spread over the index, whose terms are compared between the two "
                             "analyzers (default 10,000; 0: none)")
    parser.add_argument("--json-out", help="also write the figures here")
    return parser.parse_args(argv)


def queries_for(args) -> list[str]:
    from transformers import AutoTokenizer

    from hf_ralm import RalmConfig, load_dataset_text, prepare

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    config = RalmConfig(retrieval_stride=args.stride, query_length=args.query_length, max_length=args.max_length)
    plan = prepare(load_dataset_text(args.data), tokenizer, config, max_length=args.max_length,
                   max_eval_tokens=args.max_eval_tokens)
    return [q for q in plan.queries if q is not None]


class LuceneSide:
    """Lucene's analysis and BM25 scoring, recomputed from the index to explain a disagreement.

    Anserini's ``DefaultEnglishAnalyzer`` (the analyzer of the index and of ``SimpleSearcher``), the index's statistics
    for the ``contents`` field, and Lucene 9's ``BM25Similarity``: idf = ln(1 + (N - df + 0.5) / (df + 0.5)), a term
    scores boost·idf·tf / (tf + k1·(1 - b + b·dl/avgdl)), the boost being the term's count in the query (Anserini's
    bag-of-words query), and dl the document length as Lucene stores it: one byte (``SmallFloat.intToByte4``), exact up
    to 40, then rounded down to 4 significant bits (68 for 70, 96 for 100).
    """

    FIELD = "contents"

    def __init__(self, lucene_dir: str, k1: float, b: float):
        from hf_ralm.retrieval import java_class

        self.analyzer = java_class("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
        self._analyze = java_class("io.anserini.analysis.AnalyzerUtils").analyze
        self._small_float = java_class("org.apache.lucene.util.SmallFloat")
        self._term = java_class("org.apache.lucene.index.Term")
        path = java_class("java.io.File")(lucene_dir).toPath()
        directory = java_class("org.apache.lucene.store.FSDirectory").open(path)
        self.reader = java_class("org.apache.lucene.index.DirectoryReader").open(directory)
        self.num_docs = int(self.reader.getDocCount(self.FIELD))
        self.avgdl = int(self.reader.getSumTotalTermFreq(self.FIELD)) / self.num_docs
        self.k1, self.b = k1, b
        self._words: dict[str, list[str]] = {}
        self._df: dict[str, int] = {}

    def terms(self, text: str) -> list[str]:
        return list(self._analyze(self.analyzer, text))

    def word_terms(self, word: str) -> list[str]:
        if word not in self._words:
            self._words[word] = self.terms(word)
        return self._words[word]

    def stored_length(self, length: int) -> int:
        return int(self._small_float.byte4ToInt(self._small_float.intToByte4(int(length))))

    def df(self, term: str) -> int:
        if term not in self._df:
            self._df[term] = int(self.reader.docFreq(self._term(self.FIELD, term)))
        return self._df[term]

    def score(self, query_terms: list[str], doc_terms: list[str], exact_length: bool = False) -> float:
        tf = Counter(doc_terms)
        dl = len(doc_terms) if exact_length else self.stored_length(len(doc_terms))
        norm = self.k1 * (1 - self.b + self.b * dl / self.avgdl)
        total = 0.0
        for term, boost in Counter(query_terms).items():
            if tf[term]:
                df = self.df(term)
                idf = math.log(1 + (self.num_docs - df + 0.5) / (df + 0.5))
                total += boost * idf * tf[term] / (tf[term] + norm)
        return total


def query_analysis(query: str, bm25s_terms: list[str], lucene: LuceneSide) -> dict:
    """How the two sides analyze one query: same terms or not, and if not, tokenizer and/or stemmer differences."""
    from hf_ralm.retrieval import word_term, words

    lucene_terms = lucene.terms(query)
    bm25s_count, lucene_count = Counter(bm25s_terms), Counter(lucene_terms)
    # the backend's tokens, each analyzed alone by both sides: a token whose terms differ is a stemmer/filter difference
    tokens = words(query)
    ours = [[term] if (term := word_term(token)) else [] for token in tokens]
    stems = sorted({(token, " ".join(terms), " ".join(lucene.word_terms(token)))
                    for token, terms in zip(tokens, ours) if terms != lucene.word_terms(token)})
    # Lucene's analysis of the backend's tokens vs of the whole query: a difference is a tokenizer difference
    tokens_then_lucene = Counter(t for token in tokens for t in lucene.word_terms(token))
    return {
        "bm25s_terms": bm25s_terms,
        "lucene_terms": lucene_terms,
        "same_terms": bm25s_count == lucene_count,
        "only_bm25s": sorted((bm25s_count - lucene_count).elements()),
        "only_lucene": sorted((lucene_count - bm25s_count).elements()),
        "tokenizer_differs": tokens_then_lucene != lucene_count,
        "stem_differences": stems,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    from hf_ralm import passage_text
    from hf_ralm.retrieval import (
        ANALYSIS,
        BM25Retriever,
        LuceneRetriever,
        analyze,
        analyze_texts,
        read_forbidden_titles,
        read_index_info,
        start_jvm,
    )

    forbidden = read_forbidden_titles(args.forbidden_titles or None)
    bm25_info = read_index_info(args.bm25_index)
    if bm25_info is None:
        print(f"No bm25 index in {args.bm25_index}: build it with `hf-ralm index --corpus {args.corpus} "
              f"--index-dir {args.bm25_index}`.", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    queries = queries_for(args)
    tokenize_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    lucene = LuceneRetriever.build_or_load(args.corpus, args.lucene_index, forbidden_titles=forbidden,
                                           n_threads=args.threads)
    lucene_open_s = time.perf_counter() - t0
    bm25 = BM25Retriever.load(args.bm25_index, forbidden_titles=forbidden, n_threads=args.threads)  # checks ANALYSIS
    if lucene.info.get("fingerprint") != bm25_info.get("fingerprint"):
        print("warning: the two indexes were built from different corpora or passage sizes", file=sys.stderr)

    t0 = time.perf_counter()
    lucene_hits = lucene.retrieve(queries, k=args.depth)
    lucene_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    bm25_hits = bm25.retrieve(queries, k=args.depth)
    bm25_s = time.perf_counter() - t0

    n = len(queries)
    both = [(q, lh, bh) for q, lh, bh in zip(queries, lucene_hits, bm25_hits)]
    same_id = sum(1 for _, lh, bh in both if lh and bh and lh[0].id == bh[0].id)
    neither = sum(1 for _, lh, bh in both if not lh and not bh)
    agree = same_id + neither
    same_text = sum(1 for _, lh, bh in both if lh and bh and lh[0].id != bh[0].id and lh[0].text == bh[0].text)
    same_title = sum(1 for _, lh, bh in both if lh and bh and lh[0].title == bh[0].title)
    in_top = sum(1 for _, lh, bh in both if lh and bh and bh[0].id in {p.id for p in lh})
    overlap = [len({p.id for p in lh} & {p.id for p in bh}) / max(1, min(len(lh), len(bh)))
               for _, lh, bh in both if lh and bh]

    # query analysis, both sides, for every query
    side = LuceneSide(lucene.lucene_dir, lucene.k1, lucene.b)
    bm25s_query_terms = analyze_texts(queries)
    analyses = [query_analysis(q, t, side) for q, t in zip(queries, bm25s_query_terms)]
    agrees = [(lh[0].id if lh else None) == (bh[0].id if bh else None) for _, lh, bh in both]
    n_same_terms = sum(a["same_terms"] for a in analyses)
    agree_same_terms = sum(ok for ok, a in zip(agrees, analyses) if a["same_terms"])
    agree_other_terms = sum(ok for ok, a in zip(agrees, analyses) if not a["same_terms"])
    stems_all = Counter(s for a in analyses for s in a["stem_differences"])

    # each disagreement: margins on both sides, lengths, and a cause
    scorer = bm25.bm25

    def bm25s_df(term: str) -> int:
        i = scorer.vocab_dict.get(term)
        return 0 if i is None else int(scorer.scores["indptr"][i + 1] - scorer.scores["indptr"][i])

    def doc_text(pid: str) -> str:
        row = bm25.passages[int(pid)]
        return passage_text(row["title"], row["text"])

    details, emulation_error = [], []
    for i, ((q, lh, bh), a) in enumerate(zip(both, analyses)):
        if agrees[i]:
            continue
        d = {"query": q, "analysis": a, "lucene_top1": None, "bm25s_top1": None}
        if not (lh and bh):
            d["cause"] = "no hit on one side"
            details.append(d)
            continue
        lid, bid = lh[0].id, bh[0].id
        bm25s_scores = scorer.get_scores(a["bm25s_terms"])
        docs = {pid: doc_text(pid) for pid in (lid, bid)}
        lucene_doc = {pid: side.terms(t) for pid, t in docs.items()}
        bm25s_doc = {pid: analyze(t) for pid, t in docs.items()}
        bm25s_len = {pid: len(terms) for pid, terms in bm25s_doc.items()}
        # query terms whose statistics differ between the two analyses: df, and tf in either passage
        bm25s_tf = {pid: Counter(terms) for pid, terms in bm25s_doc.items()}
        lucene_tf = {pid: Counter(terms) for pid, terms in lucene_doc.items()}
        d["term_differences"] = [
            {"term": term, "df": [bm25s_df(term), side.df(term)],
             "tf_lucene_top1": [bm25s_tf[lid][term], lucene_tf[lid][term]],
             "tf_bm25s_top1": [bm25s_tf[bid][term], lucene_tf[bid][term]]}
            for term in sorted(set(a["bm25s_terms"]) | set(a["lucene_terms"]))
            if bm25s_tf[lid][term] != lucene_tf[lid][term] or bm25s_tf[bid][term] != lucene_tf[bid][term]
            or bm25s_df(term) != side.df(term)
        ]
        lucene_score = {pid: side.score(a["lucene_terms"], lucene_doc[pid]) for pid in docs}
        exact_score = {pid: side.score(a["lucene_terms"], lucene_doc[pid], exact_length=True) for pid in docs}
        emulation_error.append(abs(lucene_score[lid] - lh[0].score))
        for pid, hit in ((lid, lh[0]), (bid, bh[0])):
            d["lucene_top1" if pid == lid else "bm25s_top1"] = {
                "id": pid, "title": hit.title,
                "bm25s_score": float(bm25s_scores[int(pid)]),
                "lucene_score": lucene_score[pid],  # recomputed (Anserini returns it rounded to 4 decimals)
                "lucene_score_exact_lengths": exact_score[pid],
                "bm25s_length": bm25s_len[pid],
                "lucene_length": len(lucene_doc[pid]),
                "lucene_stored_length": side.stored_length(len(lucene_doc[pid])),
                "lucene_rank": next((r + 1 for r, p in enumerate(lh) if p.id == pid), None),
                "bm25s_rank": next((r + 1 for r, p in enumerate(bh) if p.id == pid), None),
            }
        top = float(bm25s_scores[int(bid)])
        d["bm25s_ratio"] = float(bm25s_scores[int(lid)]) / top if top else 0.0
        d["lucene_ratio"] = lucene_score[bid] / lucene_score[lid] if lucene_score[lid] else 0.0
        d["lucene_score_tie"] = round(lucene_score[lid], 4) == round(lucene_score[bid], 4)
        d["exact_lengths_flip"] = exact_score[bid] > exact_score[lid]
        d["duplicate_text"] = docs[lid] == docs[bid]
        if not a["same_terms"]:
            d["cause"] = "query terms differ"
        elif d["exact_lengths_flip"]:
            d["cause"] = "length norms"
        elif d["lucene_score_tie"]:
            d["cause"] = "score tie"
        else:
            d["cause"] = "document analysis"
        details.append(d)

    # the two analyzers on passages spread over the whole index, passage by passage
    t0 = time.perf_counter()
    step = max(1, len(bm25) // args.compare_passages) if args.compare_passages > 0 else 0
    compared = range(0, len(bm25), step)[: args.compare_passages] if step else range(0)
    analyzed_differently = [i for i in compared if analyze(doc_text(str(i))) != side.terms(doc_text(str(i)))]
    compare_s = time.perf_counter() - t0

    scored = [d for d in details if "bm25s_ratio" in d]
    near_ties = sum(1 for d in scored if d["bm25s_ratio"] >= 0.99)
    lucene_near_ties = sum(1 for d in scored if d["lucene_ratio"] >= 0.99)
    causes = Counter(d["cause"] for d in details)
    other = [d for d in details if not d["analysis"]["same_terms"]]
    doc_causes = [d for d in details if d["cause"] == "document analysis"]
    doc_tf = sum(1 for d in doc_causes if any(t["tf_lucene_top1"][0] != t["tf_lucene_top1"][1]
                                              or t["tf_bm25s_top1"][0] != t["tf_bm25s_top1"][1]
                                              for t in d["term_differences"]))
    stems_disagreements = Counter(s for d in other for s in d["analysis"]["stem_differences"])

    figures = {
        "num_queries": n,
        "passages_compared": len(compared),
        "passages_analyzed_differently": analyzed_differently,
        "bm25s_analysis": dict(ANALYSIS),
        "lucene_analysis": "io.anserini.analysis.DefaultEnglishAnalyzer.newDefaultInstance() (porter)",
        "top1_agreement": agree / n,
        "top1_same_passage_text": (agree + same_text) / n,
        "top1_same_title": (same_title + neither) / n,
        f"bm25s_top1_in_lucene_top{args.depth}": in_top / n,
        f"mean_top{args.depth}_overlap": sum(overlap) / max(1, len(overlap)),
        "disagreements": len(details),
        "disagreements_duplicate_text": same_text,
        "disagreements_bm25s_near_tie_(>=99%)": near_ties,
        "disagreements_lucene_near_tie_(>=99%)": lucene_near_ties,
        "queries_same_analyzed_terms": n_same_terms,
        "top1_agreement_same_terms": agree_same_terms / max(1, n_same_terms),
        "top1_agreement_terms_differ": agree_other_terms / max(1, n - n_same_terms),
        "disagreements_by_cause": dict(causes),
        "disagreements_terms_differ_tokenizer": sum(d["analysis"]["tokenizer_differs"] for d in other),
        "disagreements_terms_differ_stemmer": sum(bool(d["analysis"]["stem_differences"]) for d in other),
        "disagreements_exact_lengths_flip": sum(d.get("exact_lengths_flip", False) for d in details),
        "disagreements_document_analysis_with_tf_difference": doc_tf,
        "lucene_score_recomputation_max_abs_error": max(emulation_error, default=0.0),
        "stem_differences_all_queries": [[w, b, lu, c] for (w, b, lu), c in stems_all.most_common()],
        "forbidden_titles": len(forbidden),
        "lucene_open_or_build_s": lucene_open_s,
        "lucene_retrieve_s": lucene_s,
        "bm25s_retrieve_s": bm25_s,
        "tokenize_s": tokenize_s,
        "java": start_jvm(),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "details": details,
    }
    pct = lambda x, m: f"{x}/{m} = {100 * x / max(1, m):.1f}%"
    print(f"{n} queries (ℓ={args.query_length}, s={args.stride}, L={args.max_length}, first {args.max_eval_tokens} "
          f"tokens of {os.path.basename(args.data)})")
    print(f"bm25s analysis (hf_ralm.retrieval.analysis.ANALYSIS): {ANALYSIS}; Lucene: Anserini DefaultEnglishAnalyzer")
    print(f"top-1 agreement (same passage id): {pct(agree, n)}")
    print(f"  same passage text (duplicates count as agreement): {100 * (agree + same_text) / n:.1f}%")
    print(f"  same article title: {100 * (same_title + neither) / n:.1f}%")
    print(f"  bm25s top-1 within Lucene's top {args.depth}: {100 * in_top / n:.1f}%; "
          f"mean top-{args.depth} overlap {100 * figures[f'mean_top{args.depth}_overlap']:.1f}%")
    print(f"query analysis: same terms on both sides for {pct(n_same_terms, n)} of the queries; top-1 agreement "
          f"{pct(agree_same_terms, n_same_terms)} of those, {pct(agree_other_terms, n - n_same_terms)} of the others")
    print(f"disagreements: {len(details)}; by cause (first that applies): "
          + ", ".join(f"{c} {k}" for c, k in causes.most_common()))
    print(f"  terms differ: {len(other)} (tokenizer splits differently in "
          f"{figures['disagreements_terms_differ_tokenizer']}, stemmers differ in "
          f"{figures['disagreements_terms_differ_stemmer']})")
    print(f"  near ties: {near_ties} for bm25s (Lucene's pick scores >= 99% of bm25s' top-1 under bm25s), "
          f"{lucene_near_ties} for Lucene (bm25s' pick >= 99% of Lucene's top-1 under Lucene)")
    print(f"  with exact document lengths instead of Lucene's one-byte norms, Lucene would pick bm25s' top-1 in "
          f"{figures['disagreements_exact_lengths_flip']} (recomputed Lucene scores within "
          f"{figures['lucene_score_recomputation_max_abs_error']:.1e} of Anserini's)")
    if doc_causes:
        print(f"  document analysis: in {doc_tf} of {len(doc_causes)} a query term occurs a different number of times "
              "in one of the two passages under the two analyses (the rest: document frequencies and lengths)")
    print("stem differences (token: bm25 backend / Lucene, queries): " + ", ".join(
        f"{w}: {b!r} / {lu!r} ({c})" for (w, b, lu), c in stems_all.most_common(15)))
    if stems_disagreements:
        print("  in the disagreements: " + ", ".join(
            f"{w}: {b!r} / {lu!r}" for (w, b, lu), _ in stems_disagreements.most_common(15)))
    if compared:
        print(f"passages analyzed into the same terms by both analyzers: "
              f"{pct(len(compared) - len(analyzed_differently), len(compared))} (every {step}th passage; differing "
              f"ids: {analyzed_differently[:10]})")
    print(f"timings: lucene open/build {lucene_open_s:.1f}s, retrieve lucene {lucene_s:.2f}s, bm25s {bm25_s:.2f}s, "
          f"passage comparison {compare_s:.1f}s")

    order = {"query terms differ": 0, "length norms": 1, "score tie": 2, "document analysis": 3}
    shown = sorted(scored, key=lambda d: (order.get(d["cause"], 4), -d["bm25s_ratio"]))
    for d in shown[: args.examples] if args.examples >= 0 else shown:
        lt, bt, a = d["lucene_top1"], d["bm25s_top1"], d["analysis"]
        print(f"\n--- [{d['cause']}] query:", repr(d["query"]))
        for name, t in (("lucene", lt), ("bm25s ", bt)):
            print(f"  {name} top-1: [{t['id']}] {t['title']!r}: lucene {t['lucene_score']:.4f} (exact lengths "
                  f"{t['lucene_score_exact_lengths']:.4f}, rank {t['lucene_rank']}), bm25s {t['bm25s_score']:.4f} "
                  f"(rank {t['bm25s_rank']}); length bm25s {t['bm25s_length']}, lucene {t['lucene_length']} "
                  f"stored as {t['lucene_stored_length']}")
        print(f"  margins: bm25s scores Lucene's pick {100 * d['bm25s_ratio']:.1f}% of its own top-1, Lucene scores "
              f"bm25s' pick {100 * d['lucene_ratio']:.1f}% of its own")
        if a["same_terms"]:
            print("  same query terms:", " ".join(a["bm25s_terms"]))
        else:
            print("  bm25s terms: ", " ".join(a["bm25s_terms"]))
            print("  lucene terms:", " ".join(a["lucene_terms"]))
            print(f"  only bm25s: {a['only_bm25s']}; only lucene: {a['only_lucene']}; tokenizer differs: "
                  f"{a['tokenizer_differs']}; stems: {a['stem_differences']}")
        for t in d["term_differences"]:
            print(f"  term {t['term']!r}: df bm25s/lucene {t['df'][0]}/{t['df'][1]}, tf in lucene's pick "
                  f"{t['tf_lucene_top1'][0]}/{t['tf_lucene_top1'][1]}, in bm25s' pick "
                  f"{t['tf_bm25s_top1'][0]}/{t['tf_bm25s_top1'][1]}")
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
