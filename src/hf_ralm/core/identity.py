"""A run's identity: what its records depend on, as its settings file records it and a resumed run compares. One
function makes it for every run that keeps records (``eval-lm`` and ``retrieve``'s window records, ``--compare``'s
candidate passes, ``rerank-data``), so each holds the reader, every RALM setting under its own name and the window
length the plan resolved: a setting added to [`RalmConfig`][hf_ralm.RalmConfig] enters every
run's identity by itself, and a run made under another value of it is refused rather than mixed.

Examples:
    ```python
    run_identity(model, RalmConfig(), window_length=512, data=ids_fingerprint(ids))
    # {'reader': 'smollm2-135m-instruct', ..., 'retrieval_stride': 4, ..., 'window_length': 512, 'data': '...'}
    ```
"""

from __future__ import annotations

from typing import Any

from ..config.configuration_ralm import RalmConfig
from ..config.settings import RALM_FIELDS
from .modeling_utils import model_identity


def run_identity(model, config: RalmConfig, *, window_length: int, **parts: Any) -> dict[str, Any]:
    """The identity of a run: what its settings file records and a resumed run compares.

    Args:
        model: the reader ([`model_identity`][hf_ralm.model_identity]).
        config: the RALM settings (every field of [`RALM_FIELDS`][hf_ralm.config.settings.RALM_FIELDS]).
        window_length: the window length (the plan's ``max_length``).
        **parts: the run's own parts: its data, retriever, batching and whatever else its records depend on.

    Returns:
        The reader's identity, every RALM setting under its own name, ``window_length`` and ``parts``.

    Raises:
        ValueError: a part reuses the name of a setting.

    Examples:
        ```python
        run_identity(model, config, window_length=plan.max_length, data=ids_fingerprint(plan.ids),
                     retriever=retriever_identity(retriever), batch_size=8)
        ```
    """
    settings = {name: getattr(config, name) for name in sorted(RALM_FIELDS)}
    clashing = sorted(set(parts) & set(settings))
    if clashing:
        raise ValueError(f"A run's parts {clashing} would replace its RALM settings: pass them in the config.")
    return {**model_identity(model), **settings, "window_length": window_length, **parts}
