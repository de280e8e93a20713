"""What an evaluation run will cost before it starts: its plan (tokens, windows, retrievals, reader inputs per window),
one window's time measured here with the run's own scorer, and the whole run's estimate; a CPU run estimated beyond
an hour is refused unless asked for (a whole dataset at a model's maximum length runs for weeks on a CPU).

Examples:
    ```python
    from hf_ralm.evaluation.run_cost import check_run_length, describe_run, estimate_run

    estimate = estimate_run(model.language_model, model.tokenizer, text, model.config, max_eval_tokens=2048)
    print(describe_run(estimate))   # 2,048 tokens in 512 windows of L=512 every 4 tokens, ... roughly 3 min in all.
    estimate.seconds                 # the estimate, in seconds
    check_run_length(estimate)       # a SettingError for a CPU run beyond an hour (allow_long_run=True starts it)
    ```
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..core.batching import BatchSize
from ..config.configuration_ralm import RalmConfig
from ..errors import SettingError, setting
from ..core.modeling_utils import model_device
from ..core.plan import prepare
from ..core.scoring import ScoredInput, score_inputs
from ..selection.strategies import reader_inputs_per_window
from ..utils.progress import format_duration, tqdm

LONG_RUN_S = 3600
"""A CPU run estimated beyond this many seconds is refused unless ``allow_long_run`` (``check_run_length``)."""


@dataclass(frozen=True)
class RunEstimate:
    """What an evaluation run will do and how long it will take, from one window measured here.

    Args:
        num_tokens: the tokens of the text evaluated.
        num_windows: its windows.
        max_length: the window length ``L``.
        retrieval_stride: ``s``, tokens between retrievals.
        num_retrievals: the windows with a retrieval.
        reader_inputs: the reader inputs a window with a passage costs (its strategies' or, with ``--compare``,
            k passages and no passage).
        window_seconds: one window's time, measured on a batch of the run's longest windows.
        device: the reader's device type (``"cpu"``, ``"cuda"``, ...).
        dtype: the reader's precision (``"float32"``, ...).
    """

    num_tokens: int
    num_windows: int
    max_length: int
    retrieval_stride: int
    num_retrievals: int
    reader_inputs: int
    window_seconds: float
    device: str
    dtype: str

    @property
    def seconds(self) -> float:
        """The whole run's estimate: a window without retrieval costs one input, one with retrieval
        ``reader_inputs``."""
        later = self.num_retrievals
        return self.window_seconds * (self.num_windows - later + later * self.reader_inputs)


def estimate_run(language_model, tokenizer, text: str, config: RalmConfig, *, retrieving: bool = True,
                 max_eval_tokens: int | None = None, batch_size: int | str = DEFAULT_BATCH_SIZE,
                 reader_inputs: int | None = None, show_progress: bool = True) -> RunEstimate:
    """Plan the evaluation of ``text`` as [`evaluate_perplexity`][hf_ralm.evaluate_perplexity] does and time one
    batch of its longest windows through its scorer (after one untimed batch: the first of a shape pays one-time set-up
    costs).

    Args:
        language_model: the reader (a causal LM).
        tokenizer: its tokenizer.
        text: the text to evaluate.
        config: the run's settings (window length, stride, strategies).
        retrieving: whether the windows after the first retrieve (a retriever or a retrieval file; ``False``: none).
        max_eval_tokens: evaluate only the first this many tokens (default: all).
        batch_size: windows per forward pass, or ``"auto"``.
        reader_inputs: the reader inputs a window with a passage costs (default: its strategies', the strategies
            registry's ``reader_inputs_per_window``).
        show_progress: a bar over the timed windows.

    Returns:
        The ``RunEstimate``.

    Examples:
        ```python
        estimate = estimate_run(model.language_model, model.tokenizer, text, model.config, max_eval_tokens=2048)
        print(f"{estimate.seconds / 60:.0f} min on {estimate.device}")
        ```
    """
    plan = prepare(text, tokenizer, config, None, model=language_model, max_eval_tokens=max_eval_tokens)
    later = sum(1 for w in plan.windows if w.has_retrieval) if retrieving else 0
    inputs = reader_inputs if reader_inputs is not None else reader_inputs_per_window(config)
    device = model_device(language_model)
    # a batch of the run's own inputs through its own scorer (batched, logits only where tokens are scored): a lone
    # forward with every logit, as before, printed 14 and 32 min for runs of 9.4 and 8.8 min on 2 CPU cores
    size = BatchSize(batch_size, device).size
    longest = max(w.length for w in plan.windows)
    probe = [ScoredInput(plan.ids, w.begin, w.end, (), w.score_begin) for w in plan.windows
             if w.length == longest][:size]
    # the two batches take as long as a batch of the run (half a minute of a 135M model on 2 busy CPU cores): a bar
    with tqdm(total=2 * len(probe), desc="Timing the run's windows", unit="win", disable=not show_progress) as bar:
        score_inputs(language_model, probe, size, reuse_prefix_kv=False, progress=bar)  # one-time set-up, untimed
        start = time.perf_counter()
        score_inputs(language_model, probe, size, reuse_prefix_kv=False, progress=bar)
        seconds = time.perf_counter() - start
    return RunEstimate(num_tokens=len(plan.ids), num_windows=len(plan.windows), max_length=plan.max_length,
                       retrieval_stride=config.retrieval_stride, num_retrievals=later, reader_inputs=inputs,
                       window_seconds=seconds / len(probe), device=device.type,
                       dtype=str(language_model.dtype).removeprefix("torch."))


def describe_run(estimate: RunEstimate) -> str:
    """The plan and the estimate in one line, as ``hf-ralm eval-lm`` prints it before it starts.

    Examples:
        >>> describe_run(RunEstimate(2048, 512, 512, 4, 511, 1, 0.25, "cpu", "float32"))
        '2,048 tokens in 512 windows of L=512 every 4 tokens, 511 retrievals, 1 reader input(s) per window with a \
passage; one window took 0.25 s on cpu (float32): roughly 2 min in all.'
    """
    return (f"{estimate.num_tokens:,} tokens in {estimate.num_windows:,} windows of L={estimate.max_length} every "
            f"{estimate.retrieval_stride} tokens, {estimate.num_retrievals:,} retrievals, {estimate.reader_inputs} "
            f"reader input(s) per window with a passage; one window took {estimate.window_seconds:.2f} s on "
            f"{estimate.device} ({estimate.dtype}): roughly {format_duration(estimate.seconds)} in all.")


def check_run_length(estimate: RunEstimate, *, allow_long_run: bool = False) -> None:
    """Refuse a run on a CPU estimated beyond ``LONG_RUN_S``, unless ``allow_long_run``.

    Args:
        estimate: the run's estimate.
        allow_long_run: start it anyway.

    Raises:
        SettingError: the run is refused (the message says how to shorten it).

    Examples:
        >>> check_run_length(RunEstimate(2048, 512, 512, 4, 511, 16, 1.0, "cpu", "float32"))
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: this run would take roughly 2.3 h on this CPU (512 windows): lower \
max_eval_tokens or max_length, run on a GPU, or give allow_long_run to start it anyway (with output_dir it resumes \
where it stops).
    """
    if estimate.device == "cpu" and estimate.seconds > LONG_RUN_S and not allow_long_run:
        raise SettingError(
            f"this run would take roughly {format_duration(estimate.seconds)} on this CPU ({estimate.num_windows:,} "
            f"windows): lower {setting('max_eval_tokens')} or {setting('max_length')}, run on a GPU, or give "
            f"{setting('allow_long_run')} to start it anyway (with {setting('output_dir')} it resumes where it "
            "stops).")
