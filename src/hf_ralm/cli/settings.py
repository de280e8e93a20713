"""The RALM settings as command-line flags, generated from ``SETTING_FLAGS`` (each
setting's flag, group and help) and ``RalmSettings`` (its default and type, those of
[`RalmConfig`][hf_ralm.RalmConfig]): one source for ``hf-ralm`` and for any script that takes the
same settings (the benchmarks). Neither torch nor transformers is imported until ``ralm_settings`` checks the
values read back, so that a command answers ``--help`` and its usage errors without them.

Examples:
    ```python
    import argparse

    from hf_ralm import RalmConfig
    from hf_ralm.cli.settings import add_ralm_arguments, ralm_settings

    parser = argparse.ArgumentParser()
    add_ralm_arguments(parser, groups=["RALM settings", "reranking"], defaults={"max_length": 512})
    args = parser.parse_args(["--stride", "8", "--rerank", "lm"])
    config = RalmConfig(**ralm_settings(args))   # retrieval_stride=8, rerank="lm", max_length=512
    ```
"""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from typing import Any, Collection, Mapping, Sequence

from ..config.query_lengths import query_lengths_help
from ..config.settings import RALM_FIELDS, SETTING_FLAGS, RalmSettings
from ..errors import name_settings
from ..config.strategy_settings import strategies_help, strategy_names

FLAGS: dict[str, str] = {
    **{name: flag.flag for name, flag in SETTING_FLAGS.items()},
    "max_eval_tokens": "--max-eval-tokens",
    "batch_size": "--batch-size",
    "max_new_tokens": "--max-new-tokens",
    "max_questions": "--max-questions",
    "num_docs": "--num-docs",
    "num_articles": "--num-articles",
    "windows_per_article": "--windows-per-article",
    "max_windows": "--max-windows",
    "chunk_size": "--chunk-size",
    "eval_fraction": "--eval-fraction",
    "max_train_windows": "--max-train-windows",
    "eval_points": "--eval-points",
    "n_threads": "--threads",
    "dtype": "--dtype",
    "encoder_dtype": "--encoder-dtype",
    "device": "--device",
    "device_map": "--device-map",
    "attn_implementation": "--attn-implementation",
    "num_shards": "--num-shards",
    "shard_id": "--shard-id",
    "output_dir": "--output-dir",
    "forbidden_titles": "--forbidden-titles",
    "corpus": "--corpus",
    "exclude_titles": "--exclude-titles",
    "model": "--model",
    "dataset_path": "--dataset-path",
    "dataset_name": "--dataset-name",
    "dataset_split": "--dataset-split",
    "retrieval_file": "--retrieval-file",
    "compare": "--compare",
    "retriever": "--retriever",
    "index_dir": "--index-dir",
    "tokenizer": "--tokenizer",
    "gguf_file": "--gguf-file",
    "save_retrieval_dataset": "--save-retrieval-dataset",
    "allow_long_run": "--allow-long-run",
    "words_per_passage": "--words-per-passage",
    "engine": "--engine",
}
"""The one place where Python argument names (RALM settings, from
``SETTING_FLAGS``, and the evaluation functions' arguments) become flags: the flag of
each, for the RALM settings a command passes on and for the errors of the checks it runs (``retrieval_stride must be
at least 1`` is printed as ``--stride must be at least 1``). A flag's ``args`` name is the flag without ``--``. The
reader engines' options are the engines' own (``hf_ralm.cli.common.engine_option_flags``)."""

RALM_GROUPS: tuple[str, ...] = tuple(dict.fromkeys(flag.group for flag in SETTING_FLAGS.values()))
"""The groups the RALM settings are listed under, in order: ``RALM settings``, ``passages in context``,
``reranking``, ``retrieval gate``, ``several passages``."""

RALM_SETTING = "ralm_setting"
"""The attribute by which a flag that ``add_ralm_arguments`` made names the RALM setting it gives
(a command's own flag of the same ``args`` name, such as ``eval-qa``'s ``--max-length``, has none): the flags a saved
RALM's settings stand in for (``hf_ralm.cli.common.use_saved_settings``)."""

_KINDS = {"int": int, "float": float}  # the types a setting's flag converts to (a str needs none)
_DEFAULT_CLAUSE = re.compile(r"\(default\b[^()]*\)")  # "(default: the model's maximum)", "(default 2, chosen ...)"


def dest(name: str) -> str:
    """The ``args`` attribute of a Python argument: its flag's name (``retrieval_stride`` → ``stride``).

    Examples:
        >>> dest("retrieval_stride"), dest("ensemble_size")
        ('stride', 'ensemble')
    """
    return FLAGS[name][2:].replace("-", "_")


def setting_help(name: str) -> str:
    """The ``--help`` line of a RALM setting's flag: its help with the settings it names as flags and, for a strategy
    setting, the registered strategies listed, for the query length the registered retrievers' defaults (read now: a
    plugin may have registered one since import).

    Examples:
        >>> setting_help("rerank_tokens")
        "s': prefix tokens --rerank lm ranks on (default %(default)s)"
    """
    flag = SETTING_FLAGS[name]
    text = flag.help.replace("{query_lengths}", query_lengths_help())
    if flag.stage is not None:  # a strategy's own help may hold "%", which argparse would read as a format
        text = text.replace("{strategies}", strategies_help(flag.stage).replace("%", "%%"))
    return name_settings(text, FLAGS)


def _own_default_help(text: str) -> str:
    """A setting's help for a script whose default is not ``RalmSettings``': the help's default clause (the
    first ``(default ...)``) becomes ``(default %(default)s)``, or is added, unless the help already shows the value.

    Examples:
        >>> _own_default_help("window length L (default: the model's maximum)")
        'window length L (default %(default)s)'
    """
    if "%(default)s" in text:
        return text
    clause = _DEFAULT_CLAUSE.search(text)
    if clause is None:
        return f"{text} (default %(default)s)"
    return f"{text[:clause.start()]}(default %(default)s){text[clause.end():]}"


def add_ralm_arguments(
    parser: argparse.ArgumentParser,
    groups: Sequence[str] | None = None,
    *,
    settings: Sequence[str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    helps: Mapping[str, str] | None = None,
    sweeps: Collection[str] = (),
) -> None:
    """Add the flags of the RALM settings to ``parser``, each under its group's title. A flag's default is
    ``RalmSettings``', its type the field's, a ``bool`` setting is a switch, and a strategy setting's choices are the
    registered strategies. Read single values back with ``ralm_settings``.

    Args:
        parser: the parser.
        groups: the groups whose settings are added (titles of ``RALM_GROUPS``; default: all).
        settings: only these settings, by name.
        defaults: defaults that override some (a script's own, which their help then states).
        helps: helps that replace some (``%(default)s`` allowed).
        sweeps: settings that take one or more values, for a script that measures each: a list (default: the list
            in ``defaults``, else one value, RalmSettings').

    Raises:
        ValueError: an unknown group or setting, or a sweep of a switch or of a setting not added here.

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_ralm_arguments(parser, ["RALM settings"], defaults={"retrieval_stride": 8})
        >>> parser.parse_args([]).stride, parser.parse_args(["--stride", "2"]).stride
        (8, 2)
        >>> add_ralm_arguments(parser, settings=["ensemble_temperature"], sweeps=["ensemble_temperature"],
        ...                    defaults={"ensemble_temperature": [1.0, 4.0]})
        >>> sweep = parser.parse_args(["--ensemble-temperature", "2", "8"]).ensemble_temperature
        >>> parser.parse_args([]).ensemble_temperature, sweep
        ([1.0, 4.0], [2.0, 8.0])
    """
    named = {*(settings or ()), *(defaults or {}), *(helps or {}), *sweeps}  # a misspelt name would be ignored
    unknown = sorted(set(groups or ()) - set(RALM_GROUPS)) + sorted(named - set(SETTING_FLAGS))
    if unknown:
        raise ValueError(f"no RALM settings group or setting {unknown[0]!r}: groups are {', '.join(RALM_GROUPS)}; "
                         f"settings are {', '.join(SETTING_FLAGS)}.")
    chosen = [name for name, flag in SETTING_FLAGS.items()
              if (name in settings if settings is not None else groups is None or flag.group in groups)]
    field_of = {field.name: field for field in fields(RalmSettings)}
    switches = {name for name in chosen if field_of[name].type.startswith("bool")}
    not_swept = sorted(set(sweeps) - (set(chosen) - switches))
    if not_swept:
        raise ValueError(f"cannot sweep {not_swept[0]!r}: sweeps must name settings added here that take a value "
                         f"(not a switch): {', '.join(name for name in chosen if name not in switches)}.")
    defaults, helps = defaults or {}, helps or {}
    titled: dict[str, argparse._ArgumentGroup] = {}
    for name in chosen:
        flag, field = SETTING_FLAGS[name], field_of[name]
        group = titled.get(flag.group) or titled.setdefault(flag.group, parser.add_argument_group(flag.group))
        shown = setting_help(name)
        options: dict[str, Any] = {"default": defaults.get(name, [field.default] if name in sweeps else field.default),
                                   "help": helps.get(name) or (_own_default_help(shown) if name in defaults else shown)}
        kind = field.type.split(" | ")[0]
        if name in sweeps:
            options["nargs"] = "+"
        if kind == "bool":
            options["action"] = "store_true"
        elif kind in _KINDS:
            options["type"] = _KINDS[kind]
        if flag.stage is not None:
            options["choices"] = strategy_names(flag.stage)
        setattr(group.add_argument(flag.flag, **options), RALM_SETTING, name)


def ralm_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The RALM settings the parsed flags of ``add_ralm_arguments`` hold, checked by
    [`validate`][hf_ralm.RalmConfig.validate] (a ``SettingError`` names the setting: the command
    line shows it as its flag).

    Examples:
        >>> import argparse
        >>> parser = argparse.ArgumentParser()
        >>> add_ralm_arguments(parser, ["RALM settings"])
        >>> ralm_settings(parser.parse_args(["--stride", "8"]))
        {'retrieval_stride': 8, 'query_length': None, 'max_length': None}
    """
    from ..config.configuration_ralm import RalmConfig  # transformers: only once a command runs

    settings = {name: getattr(args, dest(name)) for name in FLAGS if name in RALM_FIELDS and dest(name) in vars(args)}
    RalmConfig(**settings)
    return settings
