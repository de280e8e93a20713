"""``hf-ralm lm-eval``: lm-evaluation-harness's own command line with the ``ralm`` model
(``hf_ralm.integrations.lm_eval_cli.cli_main``); its flags are lm-eval's, parsed there."""

from __future__ import annotations

import traceback

from .common import fail

NAME = "lm-eval"

HELP = ("lm-evaluation-harness with the ralm model: lm-eval's own flags (--tasks, --model_args, ...; hf-ralm lm-eval "
        "--help lists them)")


def add_parser(sub) -> None:
    sub.add_parser(NAME, add_help=False, help=HELP)


def run(argv: list[str]) -> None:
    """lm-eval's command line on ``argv`` (what follows ``lm-eval``); bad input ends as one line, as in every command
    (``--debug`` shows the traceback first)."""
    debug = "--debug" in argv
    try:
        from ..integrations.lm_eval_cli import cli_main

        cli_main([arg for arg in argv if arg != "--debug"])
    except (ValueError, OSError, ImportError) as error:
        if debug:
            traceback.print_exc()
        fail(str(error))  # model_args name settings by their Python names
