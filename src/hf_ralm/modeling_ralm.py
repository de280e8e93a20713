"""[`RetrievalAugmentedModel`][hf_ralm.RetrievalAugmentedModel]: any frozen causal LM plus a retriever, PEFT-style.

It owns only a [`RalmConfig`][hf_ralm.RalmConfig] and a retriever; everything else is forwarded to the wrapped model.
Its methods delegate: loading to ``loading_ralm``, saving (never the base weights) to ``saving_ralm``, ``forward``
to ``hf_ralm.evaluation.causal_lm``.

Examples:
    ```python
    from hf_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(
        "HuggingFaceTB/SmolLM2-135M", retriever="bm25", index_dir="wiki-index", corpus="wiki.jsonl.gz",
        retrieval_stride=4, query_length=32, max_length=512)
    ids = model.tokenizer("Some text to score ...", return_tensors="pt").input_ids
    out = model(ids)
    out.loss, out.token_nlls.shape, out.passages[0][out.token_windows[0, -1]]
    model.save_pretrained("my-ralm", save_index=True)   # config, retriever and index
    RetrievalAugmentedModel.from_pretrained("my-ralm")   # a folder or a Hub id
    ```
"""

from __future__ import annotations

import inspect
import os
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import torch
from transformers import AutoModelForCausalLM, GenerationMixin, PreTrainedModel

from .utils.batch_size import DEFAULT_BATCH_SIZE
from .config.configuration_ralm import RalmConfig
from .core.engines.reader import Reader, engine_reader
from .core.engines.registry import DEFAULT_ENGINE
from .evaluation.causal_lm import RalmCausalLMOutput, causal_lm_output
from .evaluation.compare import DEFAULT_STRATEGIES, Comparison, compare_strategies
from .evaluation.pipeline import RalmEvalResult, evaluate
from .generation import ralm_generate
from .loading_ralm import load_ralm
from .retrieval.base import Retriever
from .runs.harness import RunOptions
from .saving_ralm import push_ralm, save_ralm
from .selection.rankers import load_reranker


class RetrievalAugmentedModel(PreTrainedModel, GenerationMixin):
    """A frozen causal LM evaluated with In-Context RALM: every ``retrieval_stride`` tokens a passage retrieved for
    the last ``query_length`` tokens is put in front of the context. No weights change.

    A ``transformers`` causal LM where one is expected: ``generate`` decodes with retrieval every
    ``retrieval_stride`` tokens, so ``pipeline("text-generation", model=ralm, tokenizer=ralm.tokenizer)`` works
    ([`collect_sources`][hf_ralm.RetrievalAugmentedModel.collect_sources] gives the passages behind its text), and
    after ``import hf_ralm`` ``AutoModelForCausalLM.from_pretrained(folder_or_hub_id)`` loads a saved RALM as this
    class. Its reader (``language_model``) is a transformers model, or with ``from_pretrained(..., engine=NAME)``
    another engine's [`Reader`][hf_ralm.Reader] (no torch module: its weights live in the engine's processes), on
    which evaluation, ``compare_strategies``, ``forward`` and ``generate`` run as on transformers.

    Args:
        config: the RALM's settings.
        language_model: the reader: a transformers causal LM, or an engine's [`Reader`][hf_ralm.Reader].
        retriever: what retrieves the passages (``None``: no retrieval).
        tokenizer: the reader's tokenizer (it also decodes the queries).
        reranker: what ranks the candidates when the reader does not (``None``: loaded on first use, see
            [`reranker`][hf_ralm.RetrievalAugmentedModel.reranker]).

    Examples:
        ```python
        from transformers import pipeline

        generator = pipeline("text-generation", model=ralm, tokenizer=ralm.tokenizer)
        with ralm.collect_sources() as sources:
            text = generator("The Eiffel tower is", max_new_tokens=16, do_sample=False)[0]["generated_text"]
        sources[0][0]["title"]   # the passage in context for the first stride
        ```
    """

    config_class = RalmConfig
    base_model_prefix = "language_model"
    _no_split_modules: list[str] = []
    # forward takes **unexpected only to refuse it by name: the Trainer must not read it as taking its loss
    # keywords (num_items_in_batch), which it would then pass to every call
    accepts_loss_kwargs = False

    def __init__(self, config: RalmConfig, language_model: PreTrainedModel | Reader,
                 retriever: Retriever | None = None, tokenizer=None, reranker=None):
        super().__init__(config)
        self.language_model = language_model
        self.retriever = retriever
        self.tokenizer = tokenizer
        self._reranker = reranker
        self._source_sinks: list[list[list[dict]]] = []  # the lists of the open collect_sources() blocks
        # the reader's own generation config (its special tokens, its defaults): what generate() runs with, and what
        # pipeline() reads, rather than the empty one PreTrainedModel makes from the RALM config
        self.generation_config = getattr(language_model, "generation_config", None) or self.generation_config
        # no post_init(): it would re-initialise the wrapped model's weights

    @property
    def device(self) -> torch.device:
        """Where the RALM's inputs go: the reader's device, or on an engine reader this process's memory (the engine
        takes token ids from here; its GPUs are its own processes'), so that a ``pipeline`` keeps its inputs there."""
        if engine_reader(self.language_model) is not None:
            return torch.device("cpu")
        return super().device

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "language_model":
                raise
            return getattr(self.language_model, name)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike | PreTrainedModel, *model_args,
                        retriever: str | dict | Retriever | None = None, tokenizer=None, index_dir: str | None = None,
                        corpus: str | list[str] | None = None, forbidden_titles: str | Sequence[str] | None = None,
                        encoder: str | None = None, device: str | torch.device | None = None,
                        load_weights: bool = True, n_threads: int | None = None,
                        retriever_options: Mapping[str, Any] | None = None, engine: str = DEFAULT_ENGINE,
                        engine_options: Any = None, **kwargs) -> "RetrievalAugmentedModel":
        """Wrap a causal LM given as a Hub id, a local folder or a loaded model, or rebuild a saved RALM folder.

        ``AutoModelForCausalLM.from_pretrained(saved_ralm)`` lands here (after ``import hf_ralm``), with the same
        keyword arguments. A saved RALM's files are checked before they are used, each refusal one line naming the file
        and the key (``hf_ralm.loading_ralm``, which loads the RALM, says what is checked).

        Args:
            pretrained_model_name_or_path: model id/folder (loaded with ``AutoModelForCausalLM``), a loaded model,
                or a folder written by [`save_pretrained`][hf_ralm.RetrievalAugmentedModel.save_pretrained].
            model_args: positional arguments for the base model's loading.
            retriever: a retriever name (``"bm25"``, ``"lucene"``, ``"dense"``, ``"hybrid"``, ``"none"``), a
                description (``Retriever.config()``), or any object with ``retrieve(queries, k)``. Not given, a
                saved RALM folder's own retriever (its ``retriever_config.json``); others get none.
            tokenizer: the reader's tokenizer (default: the base model's, loaded with ``AutoTokenizer``).
            index_dir: where the index is (built there from ``corpus`` when missing or stale; without it, in
                hf-ralm's cache). For a saved retriever, it replaces its index folder.
            corpus: what the index is built from when missing or stale; for a saved retriever, what rebuilds its
                index when stale.
            forbidden_titles: a file with one title per line, or titles, never to retrieve (contamination).
            encoder: the dense retriever's encoder (``"dense"``, ``"hybrid"``); ``query_length`` then defaults to
                64 (the paper's best for dense retrieval) instead of 32 unless given.
            device: where a model loaded here goes (default: the GPU when there is one, this rank's under torchrun,
                else the CPU: ``hf_ralm.core.placement.default_device``); not with ``device_map``, which places it
                itself (accelerate's big-model placement, for a model larger than one GPU). A loaded model given
                here stays where it is. A model loaded here in bfloat16 on a CPU without bfloat16 instructions gets
                its linear layers computed in float32 and rounded back to bfloat16, several times faster there
                (``hf_ralm.utils.widened_linear.widen_bfloat16_matmuls``); a model given here is left as it is.
            n_threads: the threads of a BM25 or Lucene search (``"bm25"``, ``"lucene"``, ``"hybrid"``'s sparse side;
                default: the CPUs this process may use, ``hf_ralm.utils.cpus.available_cpus``).
            retriever_options: the retriever backend's options as one mapping, those its ``Options`` declare (a
                remote backend's address, the dense backend's ``pooling``, ...; one it does not take is refused):
                ``index_dir``, ``corpus``, ``forbidden_titles``, ``encoder`` and ``n_threads`` above are entries of it
                given by name (one given both ways is refused). A saved retriever takes them as replacements of its
                saved values, but for ``n_threads`` (it keeps its default).
            load_weights: ``False`` builds the base model from its config on PyTorch's ``meta`` device, without
                weights: its class, size, dtype and maximum length are there, and nothing can run through it. Enough
                to retrieve (``hf-ralm retrieve`` without a reader that ranks), in seconds and no memory.
            engine: what runs the reader, a registered engine's name ([`engine_names`][hf_ralm.engine_names]):
                ``"transformers"`` (a model in this process, the default) or an engine that runs it in its own
                processes (a [`Reader`][hf_ralm.Reader]: evaluation, ``compare_strategies``, reranking and
                ``forward`` run on it exactly as on transformers, generation one engine call per stride). Such an
                engine places the model itself (no ``device``/``device_map``); ``dtype`` is resolved as for
                transformers. An unknown name is refused in one line listing the registered engines.
            engine_options: the engine's options: its ``Options`` dataclass, or a mapping of its fields, checked by
                the engine (one it does not take is refused, naming the engines that take it).
            **kwargs: [`RalmConfig`][hf_ralm.RalmConfig] fields (``retrieval_stride``, ``query_length``,
                ``max_length``, ...); the rest (``dtype``, ``device_map``, ``attn_implementation``, ``gguf_file``,
                ``revision``, ...) go to the base model's loading. ``dtype`` (or ``torch_dtype``): ``"auto"`` is
                transformers' (the checkpoint's own precision); not given, ``"device-default"``, hf-ralm's choice for
                the device: bfloat16 on a GPU that has it, float16 on another GPU (float32 for the families that
                overflow in float16: Gemma, T5) and float32 elsewhere (``hf_ralm.core.placement.resolve_dtype``; the
                command line's ``--dtype auto``); a name or a ``torch.dtype`` is used as it is. For a saved RALM,
                ``revision`` names one of its repository, and the base model loads at its own default.

        Returns:
            The RALM over the loaded (or given) reader.
        """
        parts = load_ralm(pretrained_model_name_or_path, model_args, kwargs, retriever=retriever, tokenizer=tokenizer,
                          index_dir=index_dir, corpus=corpus, forbidden_titles=forbidden_titles, encoder=encoder,
                          device=device, load_weights=load_weights, n_threads=n_threads,
                          retriever_options=retriever_options, engine=engine, engine_options=engine_options)
        return cls(parts.config, parts.reader, parts.retriever, parts.tokenizer)

    def save_pretrained(self, save_directory: str | os.PathLike, save_index: bool = False,
                        comparison: Comparison | None = None, repo_id: str | None = None, *,
                        dataset: str | None = None, tags: Sequence[str] = (), base_model: str | None = None,
                        **kwargs) -> None:
        """Write the RALM config (``config.json``), the retriever's ``retriever_config.json`` (see
        [`Retriever.save_pretrained`][hf_ralm.retrieval.Retriever.save_pretrained]) and a model card (``README.md``,
        ``hf_ralm.model_card.ralm_model_card``: base model, retriever and corpus, settings, and ``comparison``'s figures
        when given, also as the card's ``model-index`` results on ``dataset``); the base model stays where it is.

        The config names the base model by ``base_model``, its Hub id, when given (as
        [`push_to_hub`][hf_ralm.RetrievalAugmentedModel.push_to_hub] does), else as this RALM names it; a base model
        that is a folder on this machine is said in a warning, since the saved folder then loads only where that
        folder is.

        Args:
            save_directory: the folder to write (created when missing; a link where it writes is refused).
            save_index: copy the retriever's index into ``save_directory/index``, so the folder works on its own once
                moved or uploaded to the Hub ([`push_to_hub`][hf_ralm.RetrievalAugmentedModel.push_to_hub]); without
                it, an index outside the folder is recorded by its path and identity, and the folder loads on this
                machine while that index is unchanged. A retriever that is no
                [`Retriever`][hf_ralm.retrieval.Retriever] is not saved.
            comparison: measured figures for the card.
            repo_id: the Hub repository the card names.
            dataset: the dataset the ``comparison`` was measured on.
            tags: tags that join the card's own.
            base_model: the base model's Hub id, for the config to name.
            **kwargs: for ``RalmConfig.save_pretrained``.
        """
        save_ralm(self.config, self.retriever, save_directory, save_index=save_index, comparison=comparison,
                  repo_id=repo_id, dataset=dataset, tags=tags, base_model=base_model, **kwargs)

    def push_to_hub(self, repo_id: str, *, push_index: bool = False, comparison: Comparison | None = None,
                    dataset: str | None = None, commit_message: str | None = None,
                    commit_description: str | None = None, private: bool | None = None,
                    token: str | bool | None = None, revision: str | None = None, create_pr: bool = False,
                    tags: Sequence[str] | None = None, base_model: str | None = None) -> str:
        """Upload what [`save_pretrained`][hf_ralm.RetrievalAugmentedModel.save_pretrained] writes (config,
        retriever config, model card; with ``push_index`` the index under ``index/``) to the Hub repository ``repo_id``
        (created when missing), so that ``RetrievalAugmentedModel.from_pretrained(repo_id)`` downloads and rebuilds the
        RALM. The base model is referred to, not uploaded. The keyword arguments after ``repo_id`` are as
        transformers' ``push_to_hub``.

        Args:
            repo_id: the Hub repository.
            push_index: upload the retriever's index too, under ``index/``.
            comparison: measured figures to put on the card (its ``model-index``).
            dataset: the dataset of ``comparison``'s figures.
            commit_message: the commit's message.
            commit_description: the commit's description.
            private: whether a new repository is private.
            token: the Hub token.
            revision: the branch to push to.
            create_pr: open a pull request instead of committing.
            tags: tags added to the card's.
            base_model: the base model's Hub id, which the upload names (needed when this RALM's base model is a
                local folder, which is refused in one line otherwise; the RALM itself keeps its own); without it, this
                RALM's ``base_model_name_or_path``.

        Returns:
            The commit's URL (the pull request's with ``create_pr``).

        Raises:
            SavedFolderError: the base model is a local folder (or not known) and no ``base_model`` is given, or
                ``base_model`` is a local path; refused before the repository is created.

        Examples:
            ```python
            model.push_to_hub("me/smollm2-ralm-wiki", push_index=True, comparison=comparison, dataset="wikitext",
                              base_model="HuggingFaceTB/SmolLM2-135M")   # the base model was loaded from a folder
            ```
        """
        return push_ralm(self.config, self.retriever, repo_id, push_index=push_index, comparison=comparison,
                         dataset=dataset, commit_message=commit_message, commit_description=commit_description,
                         private=private, token=token, revision=revision, create_pr=create_pr, tags=tags,
                         base_model=base_model)

    @property
    def reranker(self):
        """What ranks the candidates for ``config.rerank`` when the reader does not (``"lm"`` with a
        ``reranker_model``, or ``"predictive"``): loaded on first use, on the reader's device then."""
        if self._reranker is None:
            self._reranker = load_reranker(self.config, self.language_model)
        return self._reranker

    def evaluate_perplexity(self, text_or_ids: str | Sequence[int], **kwargs) -> RalmEvalResult:
        """In-Context RALM perplexity of a text under the paper's conventions:
        [`evaluate`][hf_ralm.evaluate] with this model's retriever, config and reranker.

        Args:
            text_or_ids: a text or its token ids.
            **kwargs: [`evaluate`][hf_ralm.evaluate]'s own keyword arguments and the run options (``run=``, a
                [`RunOptions`][hf_ralm.RunOptions], or its fields as keywords: ``output_dir=`` saves the progress
                chunk by chunk, and a rerun resumes it).

        Returns:
            The [`RalmEvalResult`][hf_ralm.RalmEvalResult].

        Raises:
            ValueError: this model has no tokenizer.

        Examples:
            ```python
            model.evaluate_perplexity(text, output_dir="runs/bm25").figures["num_resumed_windows"]   # 0
            ```
        """
        if self.tokenizer is None:
            raise ValueError("This model has no tokenizer: pass tokenizer= to from_pretrained.")
        run, options = RunOptions.split(kwargs)
        return evaluate(self.language_model, self.tokenizer, text_or_ids, self.retriever, self.config, run=run,
                        reranker=self.reranker, **options)

    def compare_strategies(self, text_or_ids: str | Sequence[int], strategies: Sequence[str] = DEFAULT_STRATEGIES,
                           **kwargs) -> Comparison:
        """Several passage-selection strategies on the same windows of a text, from one reader pass.

        Args:
            text_or_ids: a text or its token ids.
            strategies: the strategies' names (``"none"``, ``"top1"``, ``"lm-gate"``, ``"zero-shot"``, ``"oracle"``,
                ...; [`strategy_choices`][hf_ralm.strategy_choices] lists them).
            **kwargs: ``hf_ralm.evaluation.compare.compare_strategies``'s keyword arguments, and the run options
                (``run=``, a [`RunOptions`][hf_ralm.RunOptions], or its fields as keywords, as
                [`evaluate_perplexity`][hf_ralm.RetrievalAugmentedModel.evaluate_perplexity] takes them).

        Returns:
            The ``Comparison`` of the strategies.

        Raises:
            ValueError: this model has no tokenizer.

        Examples:
            ```python
            comparison = model.compare_strategies(text, ["none", "top1", "lm-gate"], max_eval_tokens=1024)
            print(comparison.to_markdown())
            model.compare_strategies(text, ["top1", "oracle"], run=RunOptions(output_dir="runs/compare"))
            ```
        """
        if self.tokenizer is None:
            raise ValueError("This model has no tokenizer: pass tokenizer= to from_pretrained.")
        run, options = RunOptions.split(kwargs)
        return compare_strategies(self.language_model, self.tokenizer, text_or_ids, self.retriever, self.config,
                                  strategies=strategies, run=run, **options)

    def generate(self, inputs=None, **kwargs):
        """Generate with In-Context RALM, re-retrieving every ``retrieval_stride`` new tokens (and reranking the
        candidates as ``config.rerank`` says, with [`reranker`][hf_ralm.RetrievalAugmentedModel.reranker] when the
        reader does not rank). Inside [`collect_sources`][hf_ralm.RetrievalAugmentedModel.collect_sources], every
        generated row's sources are recorded there too.

        Args:
            inputs: the prompts: token ids, or a text or a list of texts (tokenized with the RALM's tokenizer,
                left-padded).
            **kwargs: what ``transformers``' ``generate`` takes (see ``hf_ralm.generation.ralm_generate``).

        Returns:
            ``ralm_generate``'s output: the token ids, or with ``return_dict_in_generate=True`` a
                [`RalmGenerateOutput`][hf_ralm.RalmGenerateOutput].
        """
        # transformers' generate spells stop strings with tokenizer= (a pipeline passes its own): here the RALM's,
        # which is the reader's, spells them, as it decodes the queries
        kwargs.pop("tokenizer", None)
        rows: list[list[dict]] | None = [] if self._source_sinks else None
        output = ralm_generate(self.language_model, self.tokenizer, self.retriever, self.config, inputs,
                               reranker=self.reranker, sources_out=rows, **kwargs)
        for sink in self._source_sinks:
            sink.extend(rows)
        return output

    @contextmanager
    def collect_sources(self) -> Iterator[list[list[dict]]]:
        """Record the sources of every generation run inside the block (by
        [`generate`][hf_ralm.RetrievalAugmentedModel.generate], a ``pipeline``, ...). A ``pipeline`` keeps only the
        tensors of ``generate``'s output, so this is how its text's passages come out.

        Yields:
            A list that gets one entry per generated row, in the order they were generated, each the row's list of
                passages in context (as [`RalmGenerateOutput`][hf_ralm.RalmGenerateOutput]'s ``sources``:
                ``start``/``end`` generated tokens, ``id``, ``title``, ``text``, ``score``): one entry per prompt
                (``num_return_sequences`` entries per prompt when sampling several).

        Examples:
            ```python
            with ralm.collect_sources() as sources:
                outputs = generator(["The Eiffel tower is", "Rome was"], max_new_tokens=16)
            [[source["title"] for source in row] for row in sources]   # per prompt, the passage of each stride
            ```
        """
        sink: list[list[dict]] = []
        self._source_sinks.append(sink)
        try:
            yield sink
        finally:
            self._source_sinks.pop()  # blocks nest, so the last one opened closes first

    def generate_texts(self, prompts: Sequence[str], **kwargs) -> list:
        """Generate from text prompts (one batch) and get, per prompt, the generated text and the passages that
        grounded it. What ``hf-ralm generate`` runs.

        Args:
            prompts: the text prompts.
            **kwargs: as [`generate`][hf_ralm.RetrievalAugmentedModel.generate] takes them.

        Returns:
            Per prompt, its ``hf_ralm.generation.texts.GeneratedText`` (printable with its sources).

        Examples:
            ```python
            text = model.generate_texts(["The Eiffel tower is"], max_new_tokens=16)[0]
            print(text.format(model.tokenizer, show_sources=True))
            ```
        """
        from .generation.texts import generate_texts

        return generate_texts(self.language_model, self.tokenizer, self.retriever, self.config, prompts,
                              reranker=self.reranker, **kwargs)

    def forward(self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None,
                labels: torch.LongTensor | None = None, retrieval_file: str | None = None,
                batch_size: int = DEFAULT_BATCH_SIZE, *, show_progress: bool = False,
                **unexpected) -> RalmCausalLMOutput:
        """Evaluate every row of ``input_ids`` with In-Context RALM (retrieving as it goes).

        Args:
            input_ids: the token ids, 1-D or 2-D with a row per text. Ids that are no tensor, or that hold an id
                outside the reader's vocabulary, are refused in one line before anything runs.
            attention_mask: for right-padded rows, 1 on each row's tokens.
            labels: the transformers convention for causal LMs: equal to ``input_ids``, with ``-100`` where a token
                must not count in the loss.
            retrieval_file: a retrieval file to take the passages from, instead of retrieving.
            batch_size: inputs per forward pass.
            show_progress: show a progress bar.
            **unexpected: refused. A transformers causal LM's other arguments (``past_key_values``,
                ``position_ids``, ``use_cache``, ``output_attentions``, a Trainer's ``num_items_in_batch``, ...)
                shape one forward of the base model on the given ids, while this one scores each row on windows
                of its own with passages in front, so none of them can be forwarded with its meaning kept; a
                dropped one would return figures computed otherwise than the caller asked.

        Returns:
            The [`RalmCausalLMOutput`][hf_ralm.RalmCausalLMOutput].

        Raises:
            TypeError: a keyword argument ``forward`` does not take, named with those it takes.
            InputTypeError: ``input_ids`` is no 1-D or 2-D tensor.
            SettingError: an id is outside the reader's vocabulary.
            ValueError: ``labels`` differ from ``input_ids`` other than by ``-100``.
        """
        if unexpected:
            taken = [name for name in inspect.signature(self.forward).parameters if name != "unexpected"]
            raise TypeError(f"RetrievalAugmentedModel.forward() does not take {', '.join(sorted(unexpected))}: it "
                            f"scores each row with retrieval and takes {', '.join(taken)}.")

        def score_row(ids: list[int]) -> RalmEvalResult:
            return self.evaluate_perplexity(ids, retrieval_file=retrieval_file, batch_size=batch_size,
                                            show_progress=show_progress)

        return causal_lm_output(self.language_model, input_ids, attention_mask, labels, score_row)


# After ``import hf_ralm``, ``AutoModelForCausalLM.from_pretrained(saved_ralm)`` returns this class (AutoConfig reads
# the config: configuration_ralm.py), and ``pipeline`` counts it among the causal LMs. Registered here rather than
# through an ``auto_map`` in the saved config.json: an auto_map names code inside the repository, which transformers
# runs only with ``trust_remote_code=True`` (a prompt, or a refusal), and every saved folder would carry a copy of it;
# the registration needs only the installed package, which a RALM needs anyway (its retrieval and decoding live there).
AutoModelForCausalLM.register(RalmConfig, RetrievalAugmentedModel)
