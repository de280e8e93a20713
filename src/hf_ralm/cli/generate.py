"""``hf-ralm generate``: text with its sources, retrieving every ``--stride`` tokens
(``hf_ralm.generation.texts.generate_texts_in_batches``)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from ..utils.atomic import write_json_atomic
from ..utils.checks import is_input_file
from ..utils.outputs import json_records_with
from .common import fail, load_model, parent
from .outputs import check_outputs

NAME = "generate"
REQUIRED: tuple[str, ...] = ("model",)
"""The flags this command cannot run without (checked before anything loads)."""

HELP = "generate text, retrieving every --stride tokens"


def add_parser(sub) -> None:
    from .settings import FLAGS

    parser = sub.add_parser(NAME, help=HELP,
                            parents=[parent(title) for title in ("model", "retriever", "RALM settings",
                                                                 "passages in context", "several passages",
                                                                 "reranking", "retrieval gate", "batching",
                                                                 "engine")],
                            description="Generate with In-Context RALM: every --stride new tokens the last "
                                        "--query-length tokens retrieve a passage that is put in front of the text "
                                        "(with --rerank: the one chosen among --rerank-candidates retrieved).")
    group = parser.add_argument_group("generation")
    prompts = group.add_mutually_exclusive_group()
    prompts.add_argument("--prompt", action="append", help="a prompt (may repeat)")
    prompts.add_argument("--prompts-file", help="a text file with one prompt per line (blank lines are skipped)")
    group.add_argument(FLAGS["max_new_tokens"], type=int, default=64,
                       help="tokens to generate per prompt (default %(default)s)")
    group.add_argument("--show-sources", action="store_true",
                       help="print the numbered passages that grounded the text and the spans they grounded")
    group.add_argument("--output-json", help="write prompt_ids, output_ids and sources per prompt to this file")
    group.add_argument("--do-sample", action="store_true", help="sample instead of greedy decoding")
    group.add_argument("--temperature", type=positive_number, help="sampling temperature (above 0)")
    group.add_argument("--top-k", type=int, help="top-k sampling")
    group.add_argument("--top-p", type=probability, help="nucleus sampling (above 0, at most 1)")
    group.add_argument("--seed", type=int, help="random seed (for sampling)")


def positive_number(value: str) -> float:
    """``--temperature``: a finite number above 0 (argparse names the flag in its one-line error).

    Examples:
        >>> positive_number("0.7")
        0.7
    """
    number = float(value)  # not a number: argparse's "invalid positive_number value"
    if not 0 < number < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {value}")
    return number


def probability(value: str) -> float:
    """``--top-p``: a share of the probability mass, above 0 and at most 1 (argparse names the flag).

    Examples:
        >>> probability("2")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be above 0 and at most 1 (the share of probability kept), got 2
    """
    number = float(value)
    if not 0 < number <= 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 1 (the share of probability kept), got {value}")
    return number


def _read_prompts(args: argparse.Namespace) -> list[str]:
    if args.prompts_file:
        if not is_input_file(args.prompts_file, "--prompts-file"):  # a FIFO is refused, not waited on
            fail(f"prompts file not found: {args.prompts_file}")
        with open(args.prompts_file, encoding="utf-8") as f:
            prompts = [line.rstrip("\r\n") for line in f if line.strip()]
    else:
        prompts = list(args.prompt or [])
    if not prompts:
        fail("give a prompt: --prompt TEXT or --prompts-file FILE (one prompt per line).")
    return prompts


def run(args: argparse.Namespace) -> tuple[list, object]:
    """Per prompt a ``GeneratedText``, and the tokenizer."""
    import torch

    from ..config.configuration_ralm import RalmConfig
    from ..generation.texts import GeneratedText, generate_texts_in_batches
    from ..utils.stage_times import StageTimes
    from ..selection.strategies import check_generation
    from .settings import ralm_settings

    settings = ralm_settings(args)
    check_generation(RalmConfig(**settings))
    prompts = _read_prompts(args)
    generated = json_records_with(*(field.name for field in dataclasses.fields(GeneratedText)))
    check_outputs(args, files=[("--output-json", args.output_json, generated, "generation output")])
    model = load_model(args, settings, args.retriever)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    sampling = {k: getattr(args, k) for k in ("temperature", "top_k", "top_p") if getattr(args, k) is not None}
    times = StageTimes()
    texts = generate_texts_in_batches(model.language_model, model.tokenizer, model.retriever, model.config, prompts,
                                      reranker=model.reranker, batch_size=args.batch_size, show_progress=True,
                                      max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, times=times,
                                      **sampling)
    print(f"hf-ralm: time in this process: {times}", file=sys.stderr, flush=True)
    if args.output_json:
        write_json_atomic(args.output_json, [dataclasses.asdict(text) for text in texts])
    return texts, model.tokenizer


def show(result, args: argparse.Namespace) -> None:
    texts, tokenizer = result
    print("\n\n".join(text.format(tokenizer, args.show_sources) for text in texts))
