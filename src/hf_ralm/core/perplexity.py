"""The figures the paper reports, from summed NLLs and the reference's counts: token and word perplexity.

Examples:
    >>> count_words("the emperor of rome")
    3
    >>> round(perplexity_figures(6.0, num_tokens=3, num_scored=2, num_words=2)["token_ppl"], 4)
    7.3891
"""

from __future__ import annotations

import math


def count_words(text: str) -> int:
    """The reference's word count for word-level perplexity.

    Args:
        text: the evaluated text.

    Returns:
        The number of spaces in ``text`` (what the reference divides word perplexity by).

    Examples:
        >>> count_words("the emperor of rome")
        3
    """
    return text.count(" ")


def perplexity_from_nll(nll_sum: float, count: int) -> float:
    """The perplexity of a summed NLL over ``count`` tokens or words.

    Args:
        nll_sum: the summed negative log-likelihood, in nats.
        count: the tokens or words it is divided by (the whole text's, for the paper's token and word perplexity).

    Returns:
        ``exp(nll_sum / count)``.

    Examples:
        >>> perplexity_from_nll(0.0, 5)
        1.0
    """
    return math.exp(nll_sum / count)


def perplexity_figures(nll_sum: float, num_tokens: int, num_scored: int, num_words: int) -> dict[str, float | int]:
    """The figures the paper reports, from the summed NLL of the scored tokens.

    Both perplexities divide that sum by a count of the *whole* text (``num_tokens`` tokens, or ``num_words`` words),
    as the reference does.

    Args:
        nll_sum: the summed NLL of the scored tokens, in nats.
        num_tokens: the evaluated text's tokens.
        num_scored: the tokens scored (all but the first).
        num_words: the text's words ([`count_words`][hf_ralm.count_words]).

    Returns:
        ``nll_sum``, the three counts, ``token_ppl`` and ``word_ppl`` (NaN for a text of no words).

    Examples:
        >>> figures = perplexity_figures(6.0, num_tokens=3, num_scored=2, num_words=2)
        >>> round(figures["token_ppl"], 4), round(figures["word_ppl"], 4)
        (7.3891, 20.0855)
    """
    return {
        "nll_sum": float(nll_sum),
        "num_tokens": int(num_tokens),
        "num_scored": int(num_scored),
        "num_words": int(num_words),
        "token_ppl": perplexity_from_nll(nll_sum, num_tokens),
        "word_ppl": perplexity_from_nll(nll_sum, num_words) if num_words else float("nan"),
    }
