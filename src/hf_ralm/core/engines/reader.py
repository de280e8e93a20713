"""What hf-ralm asks of a reader that an engine runs: the [`Reader`][hf_ralm.Reader] protocol.

A reader is a transformers causal LM in this process (the ``transformers`` engine: hf-ralm runs its forward passes
itself, batching windows and reusing passages' keys/values), or a `Reader`, which an engine runs in its own
processes: it scores token inputs and continues token prompts itself, holding no weights and no keys/values here.
Evaluation, ``--compare``, reranking, generation and lm-eval's requests need nothing else of it; `engine_reader` is how
they tell the two apart.

Examples:
    ```python
    reader = engine_reader(model)
    nlls = reader.score_inputs(inputs) if reader is not None else score_batches(model, inputs)
    ```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

import torch

if TYPE_CHECKING:
    from transformers import GenerationConfig, PretrainedConfig

    from ..engine_generation import Continuation, EngineSampling
    from ..scoring import ScoredInput


@runtime_checkable
class Reader(Protocol):
    """A causal LM run by an engine outside this process's torch modules (the reader of any engine but
    ``transformers``: those hf-ralm ships, or one registered with [`register_engine`][hf_ralm.register_engine]).

    Attributes:
        engine: the name of the engine that runs it, recorded in every run's identity.
        config: the model's transformers config (its vocabulary size, its family).
        generation_config: the checkpoint's generation settings (end-of-sequence ids, sampling defaults).
        dtype: the precision the engine computes in.
        device: where the engine runs (its inputs are token ids from this process's memory).
        max_input_length: the longest input it scores or continues, in tokens.
    """

    engine: str
    config: PretrainedConfig
    generation_config: GenerationConfig
    dtype: torch.dtype
    device: torch.device
    max_input_length: int

    def score_inputs(self, inputs: Sequence[ScoredInput]) -> list[torch.Tensor]:
        """The NLLs (float64, on the CPU) of each input's scored tokens, in order, all inputs in one call: what
        `hf_ralm.core.scoring.score_inputs` returns. An input's scored tokens are its text's
        ``ids[first_scored:end]``, each predicted from the input's tokens before its position (``tokens()``: the
        prefix written over the first ones)."""

    def score_continuations(self, inputs: Sequence[ScoredInput]) -> list[tuple[float, bool]]:
        """Per input, the summed log-probability of its scored tokens and whether each is the most likely next
        token there: what `hf_ralm.core.scoring.score_continuations` returns."""

    def continue_prompts(self, continuations: Sequence[Continuation], sampling: EngineSampling) -> list[list[int]]:
        """Per continuation, the new token ids drawn after its prompt as ``sampling`` says (at most its
        ``max_tokens``, a row stopping after an end-of-sequence id, which it keeps), all rows in one call."""

    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 generation_config: GenerationConfig | None = None, **kwargs) -> torch.Tensor:
        """transformers' ``generate`` without retrieval (the prompts whole):
        `hf_ralm.core.engine_generation.generate_on_engine` gives it from `continue_prompts`."""

    def identity(self) -> dict[str, Any]:
        """What identifies the reader in a run's settings: the keys `hf_ralm.core.modeling_utils.reader_identity`
        gives, ``engine`` and the options its figures depend on."""


READER_MEMBERS = (*Reader.__annotations__, *(name for name, value in vars(Reader).items()
                                             if callable(value) and not name.startswith("_")))
"""The members of `Reader`, as its protocol declares them."""


def engine_reader(model) -> Reader | None:
    """``model`` when an engine runs it (a [`Reader`][hf_ralm.Reader]), ``None`` when it is a torch module, which
    hf-ralm runs itself: what every step asks before it scores, generates or keeps keys/values.

    Args:
        model: a reader: a transformers model, or a `Reader`.

    Returns:
        The reader as a `Reader`, or ``None`` for a model in this process.

    Raises:
        TypeError: ``model`` scores inputs itself (``score_inputs``) but lacks what else a `Reader` has.

    Examples:
        ```python
        engine_reader(model), engine_reader(reader)   # (None, reader): a transformers model, an engine's reader
        ```
    """
    if isinstance(model, torch.nn.Module):  # first: a RALM forwards its reader's attributes
        return None
    if isinstance(model, Reader):
        return model
    if callable(getattr(model, "score_inputs", None)):  # meant as one: say what it lacks, not fail further on
        missing = [name for name in READER_MEMBERS if not hasattr(model, name)]
        raise TypeError(f"{type(model).__name__} scores inputs as an engine's reader does, but has no "
                        f"{', '.join(missing)}: a reader run by an engine has every member of "
                        "hf_ralm.core.engines.reader.Reader.")
    return None
