"""``hf-ralm lm-eval``: lm-evaluation-harness's own command line with hf-ralm's ``ralm`` model registered and
hf-ralm's defaults where lm-eval's would not suit it (the model, the device, the batch size).

Examples:
    ```bash
    hf-ralm lm-eval --tasks wikitext --model_args pretrained=M,retriever=bm25,index_dir=D --output_path out/
    ```
"""

from __future__ import annotations

import sys
from typing import Sequence

from ..core.placement import default_device
from ..retrieval.corpus import check_corpus_paths
from ..utils.batch_size import DEFAULT_BATCH_SIZE
from .lm_eval import MODEL_NAME  # importing it registers the model with lm-eval

__all__ = ["cli_main"]

LM_EVAL_SUBCOMMANDS = ("run", "ls", "validate")
"""lm-eval's subcommands; anything else starts with ``run``'s flags."""


def cli_main(argv: Sequence[str]) -> None:
    """``hf-ralm lm-eval ARGS``: lm-eval's own command line (``lm-eval run``, or ``ls``/``validate``), with ``ralm``
    registered, ``--model ralm`` and hf-ralm's default ``--device`` (the GPU when there is one, else the CPU) unless
    given.

    Examples:
        ```bash
        hf-ralm lm-eval --tasks wikitext --model_args pretrained=M,retriever=bm25,index_dir=D --output_path out/
        ```
    """
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    args = list(argv)
    if args[:1] == [] or args[0] not in LM_EVAL_SUBCOMMANDS:
        args.insert(0, "run")
    if args[0] == "run":
        def given(*flags: str) -> bool:
            return any(arg in flags or arg.startswith(tuple(f"{flag}=" for flag in flags)) for arg in args)

        if not given("--model", "-M"):
            args[1:1] = ["--model", MODEL_NAME]
        if not given("--device"):
            args[1:1] = ["--device", str(default_device())]
        if not given("--batch_size", "-b"):  # lm-eval's default, 1, would score one window per forward
            args[1:1] = ["--batch_size", str(DEFAULT_BATCH_SIZE)]
    saved, sys.argv = sys.argv, ["hf-ralm lm-eval", *args]
    try:  # lm-eval's cli_evaluate, with the model's corpus files checked before its tasks load (seconds)
        setup_logging()
        harness = HarnessCLI()
        parsed = harness.parse_args()
        if getattr(parsed, "model", None) == MODEL_NAME:
            check_corpus_paths((getattr(parsed, "model_args", None) or {}).get("corpus"))
        harness.execute(parsed)
    finally:
        sys.argv = saved
