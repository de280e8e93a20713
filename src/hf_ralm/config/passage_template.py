"""The ``passage_template`` setting: its default, the paper's, and how it turns a passage into the text put in
context ([`passage_text`][hf_ralm.passage_text]), which the setting's check fills in to refuse a wrong template.

Examples:
    >>> passage_text("Rome", "rome was the city")
    'Rome\\nrome was the city'
"""

from __future__ import annotations

PASSAGE_TEMPLATE = "{title}\n{text}"
"""The paper's passage template: the title, a newline, the text."""


def passage_text(title: str | None, text: str, template: str = PASSAGE_TEMPLATE) -> str:
    """How a passage becomes the text put in context.

    Args:
        title: the passage's title (``None`` or empty: none).
        text: the passage's text.
        template: how a title and a text are joined (``RalmConfig.passage_template``; the default is the paper's).

    Returns:
        ``template`` filled in, by default ``title + "\\n" + text``; just ``text`` without a title.

    Examples:
        >>> passage_text("Rome", "Rome is the capital of Italy."), passage_text("", "No title.")
        ('Rome\\nRome is the capital of Italy.', 'No title.')
    """
    return template.format(title=title, text=text) if title else text
