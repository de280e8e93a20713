"""Text in, text out: generate from text prompts and get, per prompt, the generated text with the passages that
grounded it (``GeneratedText``), and print it with its numbered sources (``GeneratedText.format``). What
``hf-ralm generate`` runs and prints.

Examples:
    ```python
    texts = generate_texts(model, tokenizer, retriever, config, ["The Eiffel tower is"], max_new_tokens=16)
    print(texts[0].format(tokenizer, show_sources=True))
    ```
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..core.batching import BatchSize
from ..config.configuration_ralm import RalmConfig
from ..core.modeling_utils import left_pad, model_device, padding_id
from ..utils.checks import check_texts
from ..utils.stage_times import StageTimes
from ..retrieval.base import Retriever
from .utils import ralm_generate


@dataclass
class GeneratedText:
    """One prompt's generation: its token ids, the generated ids up to and with the first end-of-sequence token, the
    generated text, and ``sources`` as ``sources`` (``start``/``end``
    index ``output_ids``; ``rank``: the chosen passage's rank among the candidates when reranked)."""

    prompt: str
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    sources: list[dict]

    def format(self, tokenizer, show_sources: bool = False) -> str:
        """The prompt and the generated text; with ``show_sources`` a ``[n]`` after each span that passage ``n``
        grounded, and the numbered sources with the spans they grounded.

        Examples:
            ```python
            print(text.format(tokenizer, show_sources=True))
            # Prompt: ...
            # Output: ... [1] ...
            # Sources:
            #   [1] Rome — rome was the city ... (id 12, score 7.50)
            #       tokens 0–4: "the emperor"
            ```
        """
        lines = [f"Prompt: {self.prompt}"]
        if not show_sources:
            return "\n".join(lines + [f"Output: {self.text}"])
        numbers: dict[tuple, int] = {}
        spans: dict[int, list[dict]] = {}
        for source in self.sources:
            if source["end"] <= source["start"]:
                continue
            number = numbers.setdefault((source["id"], source["title"], source["text"]), len(numbers) + 1)
            group = spans.setdefault(number, [])
            if group and group[-1]["end"] == source["start"]:  # the same passage for consecutive strides: one span
                group[-1] = {**group[-1], "end": source["end"]}
            else:
                group.append(source)
        marked = self.text
        marks = sorted(((s["end"], n) for n, group in spans.items() for s in group), reverse=True)
        for end, number in marks:  # from the end, so earlier offsets stay valid
            before = tokenizer.decode(self.output_ids[:end], skip_special_tokens=True)
            if self.text.startswith(before):
                marked = marked[: len(before)] + f" [{number}]" + marked[len(before) :]
        lines.append(f"Output: {marked}")
        if not spans:
            lines.append("Sources: none (no passage was retrieved)")
            return "\n".join(lines)
        lines.append("Sources:")
        for number, group in spans.items():
            first = group[0]
            title = first["title"] or "(untitled)"
            lines.append(f"  [{number}] {title} — {_first_words(first['text'])} (id {first['id']}, score "
                         f"{first['score']:.2f})")
            for source in group:
                quote = tokenizer.decode(self.output_ids[source["start"] : source["end"]],
                                         skip_special_tokens=True).strip()
                lines.append(f"      tokens {source['start']}–{source['end']}: {json.dumps(quote, ensure_ascii=False)}")
        return "\n".join(lines)


def generate_texts(model, tokenizer, retriever: Retriever | None, config: RalmConfig, prompts: Sequence[str],
                   *, reranker=None, times: StageTimes | None = None, **kwargs) -> list[GeneratedText]:
    """Generate from ``prompts``, one left-padded batch, with ``ralm_generate``.

    Args:
        model: the reader.
        tokenizer: its tokenizer (it pads the prompts, decodes the queries and the outputs).
        retriever: what each stride retrieves with (``None``: nothing).
        config: the RALM settings.
        prompts: a list of texts, even for one.
        reranker: what ranks the candidates when the reader does not, as ``ralm_generate`` takes it.
        times: a [`StageTimes`][hf_ralm.utils.stage_times.StageTimes] that gathers the seconds of retrieval and of
            the reader.
        **kwargs: what ``generate`` takes, e.g. ``max_new_tokens``, ``do_sample``.

    Returns:
        Per prompt a ``GeneratedText``, its output cut after the first end-of-sequence token (the model's or the
            tokenizer's).

    Raises:
        InputTypeError: ``prompts`` is a single ``str``, an empty list or holds an item that is no text.

    Examples:
        ```python
        generate_texts(model, tokenizer, retriever, config, ["The Eiffel Tower is"], max_new_tokens=16)[0].text
        ```
    """
    prompts = check_texts("prompts", prompts)
    batch = left_pad(tokenizer, prompts)
    device = model_device(model)
    kwargs.setdefault("pad_token_id", padding_id(tokenizer))
    out = ralm_generate(model, tokenizer, retriever, config, batch.input_ids.to(device),
                        attention_mask=batch.attention_mask.to(device), reranker=reranker,
                        return_dict_in_generate=True, **kwargs)
    if times is not None:
        times.retrieval_s += out.ralm_stats["retrieval_s"]
        times.reader_s += out.ralm_stats["reader_s"]
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, (list, tuple)) else [eos]) | {tokenizer.eos_token_id}
    texts = []
    for b, (prompt, length) in enumerate(zip(prompts, batch.lengths)):
        new = out.sequences[b, batch.width :].tolist()
        end = next((i + 1 for i, token in enumerate(new) if token in eos), len(new))  # after EOS: padding
        texts.append(GeneratedText(prompt, batch.input_ids[b, batch.width - length :].tolist(), new[:end],
                                   tokenizer.decode(new[:end], skip_special_tokens=True), out.sources[b]))
    return texts


def generate_texts_in_batches(model, tokenizer, retriever: Retriever | None, config: RalmConfig,
                              prompts: Sequence[str], *, reranker=None, batch_size: int | str = DEFAULT_BATCH_SIZE,
                              show_progress: bool = True, times: StageTimes | None = None,
                              **kwargs) -> list[GeneratedText]:
    """``generate_texts`` over any number of ``prompts``, ``batch_size`` at a time: what ``hf-ralm generate`` runs.

    Args:
        model, tokenizer, retriever, config, prompts, reranker: as ``generate_texts`` takes them.
        batch_size: prompts per batch, or ``"auto"``: from 64 on a GPU, the batch run again at half the size after
            an out-of-memory error ([`BatchSize`][hf_ralm.core.batching.BatchSize]).
        show_progress: a bar over the prompts when they take more than one batch, which shows where the time went.
        times: a [`StageTimes`][hf_ralm.utils.stage_times.StageTimes] that gathers that time, when given.
        **kwargs: what ``generate`` takes, e.g. ``max_new_tokens``.

    Returns:
        Per prompt a ``GeneratedText``, in the order of ``prompts``.

    Examples:
        ```python
        texts = generate_texts_in_batches(model.language_model, model.tokenizer, model.retriever, model.config,
                                          prompts, batch_size="auto", max_new_tokens=32)
        ```
    """
    from ..utils.progress import tqdm

    prompts = check_texts("prompts", prompts)
    batches = BatchSize(batch_size, model_device(model))
    times = StageTimes() if times is None else times
    with tqdm(total=len(prompts), desc="Generating", unit="prompt",
              disable=not show_progress or len(prompts) <= batches.size) as bar:
        def generate(batch: Sequence[str]) -> list[GeneratedText]:
            texts = generate_texts(model, tokenizer, retriever, config, batch, reranker=reranker,
                                   show_progress=show_progress, times=times, **kwargs)
            bar.update(len(batch))
            bar.set_postfix_str(str(times))
            return texts

        return batches.map(prompts, generate)


def _first_words(text: str, n: int = 12) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")
