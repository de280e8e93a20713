"""The figures the paper reports, from summed NLLs and the reference's counts: token and word perplexity.

Example:
    >>> count_words("the emperor of rome")
    3
    >>> round(perplexity_figures(6.0, num_tokens=3, num_scored=2, num_words=2)["token_ppl"], 4)
    7.3891
"""

from __future__ import annotations

import math


def count_words(text: str) -> int:
    """The reference's word count for word-level perplexity: the number of spaces."""
    return text.count(" ")


def perplexity_from_nll(nll_sum: float, count: int) -> float:
    """The perplexity of a summed NLL over ``count`` tokens or words: ``exp(nll_sum / count)``, the paper's token
    (and word) perplexity when ``count`` is the whole text's.

    Example:
        >>> perplexity_from_nll(0.0, 5)
        1.0
    """
    return math.exp(nll_sum / count)


def perplexity_figures(nll_sum: float, num_tokens: int, num_scored: int, num_words: int) -> dict[str, float | int]:
    """The figures the paper reports. Both perplexities divide the summed NLL of the scored tokens by a count of
    the *whole* text (``num_tokens`` tokens, or ``num_words`` words), as the reference does."""
    return {
        "nll_sum": float(nll_sum),
        "num_tokens": int(num_tokens),
        "num_scored": int(num_scored),
        "num_words": int(num_words),
        "token_ppl": perplexity_from_nll(nll_sum, num_tokens),
        "word_ppl": perplexity_from_nll(nll_sum, num_words) if num_words else float("nan"),
    }
