"""The arithmetic of LM-oriented reranking (the paper's §6), as pure functions over token positions and id lists.

For window ``j`` the candidates are the top-``k`` passages retrieved for its query. Each candidate is written over
the first positions of the window exactly as the chosen passage will be, and ranked by the summed NLL of the
*ranking tokens*: the last ``s'`` tokens of the prefix, just before the window's first scored token (the paper's
Eq. 6 and the reference's ``logprob`` strategy). As in the reference, the ranking tokens are always the text's own
tokens at those positions, predicted from whatever the candidate's input holds before them, so every candidate is
ranked on the same tokens. They are clipped to the window (a token needs the one before it in the window). The
``oracle`` ranks on the window's own scored tokens instead (it looks at the future: an upper bound).

Examples:
    >>> from hf_ralm.core.windows import plan_windows
    >>> window = plan_windows(100, max_length=32, stride=4)[3]
    >>> (window.begin, window.score_begin, window.end), ranking_span(window, 16)
    ((12, 40, 44), (24, 40))
    >>> choose_lowest([3.0, 1.5, 1.5, 2.0])   # ties go to the better retrieval rank
    1
    >>> choose_option([3.0, 2.0], no_passage_last=True, no_passage_margin=1.5)   # saves 1 nat, not 1.5: none
    1
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..core.passages import Passage
from ..core.windows import Window
from ..errors import SettingError, setting

if TYPE_CHECKING:
    from ..config.configuration_ralm import RalmConfig


def ranking_span(window: Window, rerank_tokens: int) -> tuple[int, int]:
    """The text positions of a window's ranking tokens.

    Args:
        window: the window.
        rerank_tokens: ``s'``.

    Returns:
        ``[start, stop)``: the last ``rerank_tokens`` tokens before its first scored token, clipped so that each has
            a predecessor inside the window.
    """
    stop = window.score_begin
    return max(window.begin + 1, stop - rerank_tokens), stop


def oracle_span(window: Window) -> tuple[int, int]:
    """The text positions the oracle ranks candidates on: the window's own scored tokens.

    Args:
        window: the window.

    Returns:
        ``[score_begin, end)``.
    """
    return window.score_begin, window.end


def choose_lowest(ranking_nlls: Sequence[float]) -> int:
    """The candidate with the lowest ranking NLL.

    Args:
        ranking_nlls: the candidates' ranking NLLs, in retrieval order.

    Returns:
        Its index; ties go to the earlier candidate (the better retrieval rank).

    Raises:
        ValueError: there is no candidate.
    """
    if len(ranking_nlls) == 0:
        raise ValueError("No candidate to choose from.")
    import numpy as np  # here, not on import: the strategies import these rules when hf_ralm is imported

    return int(np.argmin(np.asarray(ranking_nlls, dtype=np.float64)))  # argmin returns the first of equal values


def choose_option(ranking_nlls: Sequence[float], no_passage_last: bool, no_passage_margin: float = 0.0) -> int:
    """The chosen candidate: the lowest ranking NLL ([`choose_lowest`][hf_ralm.selection.rules.choose_lowest]), no
    passage winning unless a passage saves a margin over it. A margin asks a passage for clear evidence that it helps
    before it displaces the text's own tokens.

    Args:
        ranking_nlls: the candidates' ranking NLLs, in retrieval order.
        no_passage_last: the last candidate is no passage.
        no_passage_margin: then the best passage is chosen over it only when it saves at least this many nats
            (``NLL(no passage) - NLL(passage) >= margin``; 0: the lowest wins, ties keep the passage).

    Returns:
        The chosen candidate's index.
    """
    if not no_passage_last or len(ranking_nlls) < 2:
        return choose_lowest(ranking_nlls)
    best = choose_lowest(ranking_nlls[:-1])
    return best if ranking_nlls[-1] - ranking_nlls[best] >= no_passage_margin else len(ranking_nlls) - 1


def rank_correlation(ranking_nlls: Sequence[float], target_nlls: Sequence[float]) -> float:
    """Spearman's rank correlation between the candidates' ranking NLLs and their target NLLs: how well ranking
    on the prefix's last tokens tells which passage helps the window (1: the same order, 0: no information; zero-shot
    reranking can beat retrieval's order only where it is clearly positive). Ties keep the candidates' order.

    Args:
        ranking_nlls: the candidates' ranking NLLs.
        target_nlls: their target NLLs, in the same order.

    Returns:
        The correlation, from -1 to 1.

    Raises:
        ValueError: the lists differ in length or hold fewer than 2 NLLs.

    Examples:
        >>> rank_correlation([3.0, 1.0, 2.0], [30.0, 10.0, 20.0]), rank_correlation([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
        (1.0, -1.0)
    """
    if len(ranking_nlls) != len(target_nlls) or len(ranking_nlls) < 2:
        raise ValueError(f"A rank correlation needs two equally long lists of at least 2 NLLs, not "
                         f"{len(ranking_nlls)} and {len(target_nlls)}.")
    import numpy as np

    ranking, target = (np.argsort(np.argsort(np.asarray(v, dtype=np.float64), kind="stable"))
                       for v in (ranking_nlls, target_nlls))  # ranks; the inner sort keeps ties in candidate order
    return float(np.corrcoef(ranking, target)[0, 1])


def random_choice(seed: int, window_index: int, num_candidates: int) -> int:
    """A uniform choice among the candidates, reproducible per ``(seed, window)`` whatever the batching.

    Args:
        seed: ``rerank_seed``.
        window_index: the window's index (or a generation stride's key).
        num_candidates: the candidates.

    Returns:
        The chosen index.

    Raises:
        ValueError: there is no candidate.
    """
    if num_candidates < 1:
        raise ValueError("No candidate to choose from.")
    import numpy as np

    return int(np.random.default_rng([seed, window_index]).integers(num_candidates))


def fit_reranker_input(
    passage_ids: Sequence[int], prefix_ids: Sequence[int], ranking_ids: Sequence[int], max_length: int
) -> tuple[list[int], int]:
    """A reranker LM's input for one candidate when it does not share the reader's tokenizer. The ranking tokens are
    kept whole; the passage gives way before them when both do not fit.

    Args:
        passage_ids: its tokens of the passage.
        prefix_ids: its tokens of the prefix text (cut from the left to fit).
        ranking_ids: its tokens of the ranking text.
        max_length: its window length.

    Returns:
        The input (passage, prefix, ranking tokens) and the position of the first ranking token.

    Raises:
        SettingError: the window cannot hold the ranking tokens and the token before them.
        ValueError: the ranking text has no tokens, or nothing comes before it.
    """
    ranking = list(ranking_ids)
    if not ranking:
        raise ValueError("The ranking text has no tokens for the reranker.")
    if len(ranking) >= max_length:
        raise SettingError(f"The reranker's window ({max_length} tokens) cannot hold {len(ranking)} ranking tokens "
                           f"and the token before them: raise {setting('max_length')} or lower "
                           f"{setting('rerank_tokens')}.")
    passage = list(passage_ids)[: max_length - len(ranking)]
    room = max_length - len(ranking) - len(passage)
    prefix = list(prefix_ids)[max(0, len(prefix_ids) - room):] if room > 0 else []
    tokens = passage + prefix + ranking
    if len(tokens) == len(ranking):
        raise ValueError("The first ranking token needs a token before it: give the reranker a passage or prefix.")
    return tokens, len(tokens) - len(ranking)


def rerank_options(pool: list[Passage], config: RalmConfig) -> list[Passage | None]:
    """The candidates an LM ranks, in order. Evaluation and generation both rank these.

    Args:
        pool: the retrieved candidates.
        config: the settings (``rerank_allow_no_passage``).

    Returns:
        The retrieved ones, then no passage (``None``) with ``rerank_allow_no_passage`` (ties prefer a passage).

    Examples:
        >>> from hf_ralm.config.configuration_ralm import RalmConfig
        >>> config = RalmConfig(rerank="lm", rerank_allow_no_passage=True)
        >>> rerank_options([Passage("1", "", "rome", 1.0)], config), rerank_options([], config)
        ([Passage(id='1', title='', text='rome', score=1.0), None], [])
    """
    return pool + [None] if pool and config.rerank_allow_no_passage else list(pool)


def choose_ranked(ranking_nlls: Sequence[float], options: Sequence[Passage | None], config: RalmConfig) -> int:
    """The option chosen on its ranking NLLs. Evaluation and generation both choose so.

    Args:
        ranking_nlls: one per option.
        options: the options ([`rerank_options`][hf_ralm.selection.rules.rerank_options]).
        config: the settings (``rerank_no_passage_margin``).

    Returns:
        The index into ``options`` of the lowest, no passage winning unless a passage saves
            ``config.rerank_no_passage_margin`` nats over it ([`choose_option`][hf_ralm.selection.rules.choose_option]).

    Examples:
        >>> from hf_ralm.config.configuration_ralm import RalmConfig
        >>> config = RalmConfig(rerank="lm", rerank_allow_no_passage=True, rerank_no_passage_margin=2.0)
        >>> choose_ranked([10.0, 11.5], [Passage("1", "", "rome", 1.0), None], config)   # saves 1.5 nats: none
        1
    """
    no_passage_last = len(options) > 0 and options[-1] is None
    return choose_option(list(ranking_nlls), no_passage_last, config.rerank_no_passage_margin)
