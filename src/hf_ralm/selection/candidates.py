"""Every window's candidates scored by the reader in one pass, and no passage too: the numbers from which every
selection strategy's perplexity follows (top-1, zero-shot reranking with or without the no-passage choice, the lm
gate, oracle, random, or the choices of another ranker), kept as compact records that resume.

For each window with retrieved passages, the reader runs the window once with each of its first ``k``
(``config.rerank_candidates``) passages written over its start and once without a passage
([`rerank_windows`][hf_ralm.selection.rerank.rerank_windows] with the no-passage candidate), which gives per option the
NLL of the ``s'`` ranking tokens before the window's target (``ranking_nlls``: what zero-shot reranking and the lm gate
compare) and of the target itself (``target_nlls``: what the window contributes to the text's NLL when that option is
put in context; the oracle compares these). A window without passages (window 0, or a query that found nothing) has only
the no-passage option. The perplexity of any choice per window is then the sum of the chosen options' target NLLs, and
the choices of any strategy that needs no more than these numbers are the selection policy's own, read from them
([`choose_from_scores`][hf_ralm.selection.candidates.choose_from_scores]: what ``eval-lm --compare`` and the benchmarks'
tables compute).

With ``output_dir`` the records are saved in gzip'd chunks of windows ([`RecordStore`][hf_ralm.RecordStore];
numbers and passage ids only), with settings that identify the model, the text, the retrieval (by the corpus
fingerprint, not a path) and the RALM settings: a rerun, here or from a copy of the folder elsewhere, resumes after
the saved chunks, and a rerun with other settings is refused.

Examples:
    ```python
    scores = score_candidates(model, tokenizer, ids, windows, candidates, config=config,
                              run=RunOptions(output_dir="runs/candidates"))
    scores[5].target_nlls[0], scores[5].target_nlls[-1]   # (10.2, 11.9): with its top passage, and without one
    ```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..config.configuration_ralm import RalmConfig
from ..config.settings import RALM_FIELDS
from ..errors import SettingError, setting
from ..core.identity import run_identity
from ..core.plan import window_length
from ..core.passages import NO_PASSAGE, Passage
from ..runs.store import RecordStore
from ..runs.harness import ChunkRun, RunOptions
from ..utils.checks import check_count
from ..utils.stage_times import StageTimes
from ..runs.shards import Shard
from ..core.windows import Window
from .policy import PassagePolicy
from .rankers import LMReranker
from .rerank import rerank_windows
from .strategies import ranks_target


@dataclass
class CandidateScores:
    """One window's options, scored by the reader: each candidate in retrieval order, then no passage.

    Attributes:
        window: the window's index.
        passage_ids: its candidates' ids, in retrieval order.
        retrieval_scores: their retrieval scores.
        ranking_nlls: per option, the NLL of the ranking tokens before the window's target (``None`` for a window
            without candidates, where nothing is ranked).
        target_nlls: per option, the NLL of the window's target tokens with that option in context.
    """

    window: int
    passage_ids: list[str]
    retrieval_scores: list[float]
    ranking_nlls: list[float] | None
    target_nlls: list[float]

    @property
    def no_passage(self) -> int:
        """The index of the no-passage option (the last)."""
        return len(self.passage_ids)


CHUNK_SIZE = 32
"""Windows a chunk of a scored pass when ``run.chunk_size`` is ``None`` (``--compare``'s too)."""


class CandidateRecordWriter(RecordStore):
    """The records of [`score_candidates`][hf_ralm.selection.candidates.score_candidates], one
    [`CandidateScores`][hf_ralm.selection.candidates.CandidateScores] per window, in gzip'd chunks: a
    [`RecordStore`][hf_ralm.RecordStore], opened as it is."""

    what = "candidate scores"
    record_type = CandidateScores


def score_candidates(
    model,
    tokenizer,
    ids: Sequence[int],
    windows: Sequence[Window],
    candidates: Sequence[Sequence[Passage]] | Callable[[Sequence[Window]], Sequence[Sequence[Passage]]],
    *,
    config: RalmConfig,
    run: RunOptions = RunOptions(),
    settings: Mapping[str, Any] | None = None,
    reproduce: Mapping[str, Any] | None = None,
    shard: Shard | None = None,
    max_length: int | None = None,
    times: StageTimes | None = None,
) -> list[CandidateScores]:
    """Every window's options scored by the reader (see the module docstring), in the order of ``windows``.

    With ``run.output_dir`` the records are saved every ``run.chunk_size`` windows
    ([`CHUNK_SIZE`][hf_ralm.selection.candidates.CHUNK_SIZE] when ``None``) and a rerun resumes after them
    (``run.overwrite`` starts afresh, and ``run.repair`` computes again those of chunks that fail their checks, moved
    aside). Their settings are the run's identity ([`run_identity`][hf_ralm.core.identity.run_identity]: the model,
    the RALM settings, the window length) with a digest of ``ids``, ``batch_size`` (it changes results in their last
    digits) and ``settings``.

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        ids: the text's token ids.
        windows: all of the text's windows, from window 0.
        candidates: ``candidates[w]`` are window ``w``'s retrieved passages in retrieval order (the first
            ``config.rerank_candidates`` are scored), or a function that retrieves them for a chunk of windows (a list
            per window): then only the windows this call computes are retrieved, not those read back or left to other
            workers.
        config: the RALM settings, with ``rerank_candidates`` (k) and ``rerank_tokens`` (s').
        run: the reader's ``batch_size`` (a count) and how the pass is kept ([`RunOptions`][hf_ralm.RunOptions]).
        settings: what the records depend on that this function cannot see (e.g. the retriever's identity,
            ``hf_ralm.retrieval.base.retriever_identity``, or the text's name).
        reproduce: what reruns the pass (the command, paths).
        shard: this worker's part ([`Shard`][hf_ralm.runs.shards.Shard], needs ``run.output_dir``; by default
            ``run``'s when it names ``num_shards``/``shard_id``, else one process): it computes the chunks
            ``shard.index, shard.index + shard.count, ...``.
        max_length: the window length the windows were planned with (the plan's ``max_length``; ``None``: the
            model's under ``config``).
        times: gathers the seconds of the retrieval done here and of the reader's passes, apart
            ([`StageTimes`][hf_ralm.utils.stage_times.StageTimes]; ``None``: a new one); the run's bar shows them
            after each chunk.

    Returns:
        The records saved so far, in window order: every window's once the other workers' chunks are in too (check
            ``len(result) == len(windows)``).

    Raises:
        SettingError: ``batch_size`` is not a count.
        OutputFolderError: the output folder holds records made with other settings (overwrite to start afresh).
        ValueError: the output folder holds the records of other windows.

    Examples:
        ```python
        scores = score_candidates(model, tokenizer, ids, windows, candidates, config=config,
                                  run=RunOptions(output_dir="runs/pass", batch_size=16),
                                  settings={"data": "WikiText-103 test", **retriever_identity(retriever)})
        ```
    """
    from ..utils.reproduction import provenance
    from ..core.modeling_utils import model_path
    from ..runs.fingerprints import ids_fingerprint

    batch_size, output_dir = run.batch_size, run.output_dir
    check_count("batch_size", batch_size)
    if shard is None:  # a pass is one process unless told: a caller sharded by its environment passes its shard
        shard = run.shard if run.num_shards is not None or run.shard_id is not None else Shard()
    chunks = ChunkRun(run, chunk_size=run.chunk_size or CHUNK_SIZE, what="candidate pass", shard=shard)
    scoring = RalmConfig(**{**{name: getattr(config, name) for name in RALM_FIELDS}, "rerank": "lm",
                            "reranker_model": None, "rerank_allow_no_passage": True,
                            "rerank_no_passage_margin": 0.0})
    if output_dir is not None:
        stored = run_identity(model, scoring, window_length=max_length or window_length(model, config),
                              tokens=ids_fingerprint(ids), batch_size=batch_size, **(settings or {}))
        writer = chunks.open(CandidateRecordWriter, output_dir, stored,
                             reproduce={**provenance(), "model_path": model_path(model), **(reproduce or {})})
        for (start, stop), rows in writer.items():
            if [s.window for s in rows] != [w.index for w in windows[start:stop]]:
                raise ValueError(f"{output_dir} holds the records of other windows: score the same text, or "
                                 "overwrite.")
    ids = list(ids)

    times = StageTimes() if times is None else times

    def step(start: int, stop: int) -> list[CandidateScores]:
        chunk = windows[start:stop]
        with times.timing("retrieval"):
            found = dict(zip((w.index for w in chunk), candidates(chunk))) if callable(candidates) else candidates
        # the chunk's reranking bar advances the run's (its share, hf_ralm.utils.progress) per batch of windows: a
        # chunk of a large model's pass takes minutes
        with times.timing("reader"):
            outcome = rerank_windows(model, tokenizer, ids, chunk, [None] * len(windows), candidates=found,
                                     config=scoring,
                                     batch_size=batch_size, show_progress=run.show_progress)
        scores = []
        for w, ranking, targets in zip(chunk, outcome.ranking_nlls, outcome.target_nlls):
            pool = list(found[w.index])[: scoring.rerank_candidates] if w.has_retrieval else []
            if targets is None:  # nothing ranked: the window as it is
                targets = [float(outcome.token_nlls[w.score_begin : w.end].sum())]
            scores.append(CandidateScores(w.index, [p.id for p in pool], [p.score for p in pool], ranking, targets))
        return scores

    chunks.run(len(windows), step, desc="Scoring candidates", unit="win", status=lambda: str(times))
    chunks.gather()  # the other workers' chunks saved meanwhile
    return chunks.rows()


class ScoredRanker:
    """The [`Ranker`][hf_ralm.selection.policy.Ranker] of a scored pass: per window (an index into ``scores``), its
    options' ranking NLLs, or their target NLLs when the config ranks on the target (the oracle), read from the window's
    [`CandidateScores`][hf_ralm.selection.candidates.CandidateScores] instead of run. The pass holds the reader's
    numbers only.

    Args:
        scores: the pass's records.

    Examples:
        ```python
        ScoredRanker(scores).rank([5], [[passage, None]], config, None)   # [[41.2, 43.0]]: scores[5]'s
        ```
    """

    def __init__(self, scores: Sequence[CandidateScores]):
        self.scores = scores

    def rank(self, items: Sequence[int], options: Sequence[Sequence[Passage | None]], config: RalmConfig,
             lm: LMReranker | None) -> list[list[float] | None]:
        """The options' NLLs, read from the pass.

        Args:
            items: indices into ``scores``.
            options: per item, its options (a passage, or ``None`` for none).
            config: the settings (whether the strategy ranks on the target).
            lm: another LM to rank with: refused, the pass holds the reader's numbers.

        Returns:
            Per item, its options' NLLs (``None`` for a window without candidates).

        Raises:
            SettingError: ``lm`` is given.
        """
        if lm is not None:
            raise SettingError(f"A scored pass holds the reader's NLLs, not those of {setting('reranker_model')}'s "
                               f"LM: choose with the reader ({setting('reranker_model')}=None), or rank with "
                               "rerank_windows.")
        on_target = ranks_target(config)
        sums = []
        for i, item_options in zip(items, options):
            s = self.scores[i]
            nlls = s.target_nlls if on_target else s.ranking_nlls
            sums.append(None if not s.passage_ids or nlls is None else
                        [nlls[s.no_passage if option is None else s.passage_ids.index(option.id)]
                         for option in item_options])
        return sums


def choose_from_scores(scores: Sequence[CandidateScores], config: RalmConfig, *, retriever=None,
                       queries: Sequence[str | None] | None = None) -> list[int]:
    """The options ``config``'s strategies choose, per window of a scored pass.

    These are the choices a run of ``config`` makes on the same candidates
    ([`PassagePolicy`][hf_ralm.selection.policy.PassagePolicy] over the pass's numbers,
    [`ScoredRanker`][hf_ralm.selection.candidates.ScoredRanker]), for every strategy that needs no more than the pass
    holds ([`SCORED_PASS`][hf_ralm.selection.strategies.registry.SCORED_PASS]).

    Args:
        scores: the pass's records: every window of a text from window 0, or a sharded pass's.
        config: the strategies to apply.
        retriever: what a gate that normalises scores asks (the query's maximum attainable score).
        queries: ``queries[w]`` is window ``w``'s query, for that gate.

    Returns:
        Per window, an index into its options: its candidates, then no passage (``no_passage``).

    Examples:
        ```python
        chosen = choose_from_scores(scores, RalmConfig(rerank="lm", rerank_candidates=16))
        sum(s.target_nlls[c] for s, c in zip(scores, chosen))   # the text's NLL under zero-shot reranking
        ```
    """
    found = [[Passage(pid, "", "", score) for pid, score in zip(s.passage_ids, s.retrieval_scores)] for s in scores]
    window_queries = [None if queries is None else queries[s.window] for s in scores]
    selection = PassagePolicy(config, retriever).select(window_queries, found, ScoredRanker(scores),
                                                        [s.window for s in scores])
    return [s.no_passage if choice == NO_PASSAGE else choice for s, choice in zip(scores, selection.chosen)]
