"""The one table of reader engines: name → [`Engine`][hf_ralm.Engine]. An engine is what runs the reader hf-ralm
scores and generates with: ``transformers`` (a model in this process, the default) and the engines hf-ralm ships,
each one file of this package ending with its register line, or one added from outside with
[`register_engine`][hf_ralm.register_engine], after which ``from_pretrained(engine=...)``, ``--engine`` and lm-eval's
``engine=`` find it.

An engine declares its ``name``, its ``Options`` (a dataclass that checks its own values; the fields with a ``help``
in their metadata are the options given by name: a command-line flag each, and lm-eval's ``model_args``) and its
loader (`Engine.load`). Neither torch nor transformers is imported here: the command line's flags are read from this
table.

Examples:
    >>> engine_names()[0]
    'transformers'
    >>> get_engine("sglang")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_ralm.errors.SettingError: engine must be one of transformers, ..., got 'sglang'.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Sequence

from ...config.settings import RALM_FIELDS
from ...errors import SettingError, setting

DEFAULT_ENGINE = "transformers"
"""The engine a reader runs on unless told otherwise: a transformers model in this process."""

OPTION_TYPES = ("int", "float", "bool", "str")
"""The types an option given by name may have (``None`` allowed besides): what a command-line flag converts to."""

RESERVED_OPTIONS = frozenset({"engine", "engine_options", "model", "tokenizer", "device", "device_map", "dtype",
                              "torch_dtype", "revision", "trust_remote_code", "attn_implementation", "gguf_file",
                              "load_weights", "retriever", "batch_size", *RALM_FIELDS})
"""Names an option given by name may not have: ``from_pretrained``'s own arguments and the RALM settings, which its
flag or ``model_args`` key would shadow."""


@dataclass(frozen=True)
class Loading:
    """What ``from_pretrained`` hands an engine's loader besides its options.

    Args:
        kwargs: the base model's loading arguments (``dtype``, ``revision``, ...; with ``loading_args``, only those).
        device: where a model loaded in this process goes (``None``: hf-ralm's default device).
        load_weights: ``False``: the model's skeleton on the ``meta`` device, without weights.
        model_args: positional arguments of the base model's loading.
    """

    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    device: Any = None
    load_weights: bool = True
    model_args: tuple = ()


@dataclass(frozen=True)
class NoOptions:
    """The options of an engine that takes none."""


class Engine:
    """A reader engine, as the registry holds it: its ``name`` (``engine=``'s value), a line of ``help`` (what
    ``--engine``'s help says of it), its ``Options`` dataclass (checked when made: its ``__post_init__`` refuses a
    bad value in one line) and its loader, `load`. Registered with [`register_engine`][hf_ralm.register_engine], one
    line.

    ``loading_args`` are the base model's loading arguments the engine takes (``None``: all of them); the others,
    ``device`` and ``load_weights=False`` are refused before anything loads (`check_loading`). By default an engine
    takes the model's precision, revision and remote code: it places and loads the model itself.

    Examples:
        ```python
        class MyEngine(Engine):
            name = "my-engine"
            help = "my inference server"
            Options = MyOptions            # a dataclass: its fields with a help are --flags and model_args

            def load(self, name_or_path, options, loading):
                return MyReader(name_or_path, options)   # a hf_ralm.core.engines.reader.Reader

        register_engine(MyEngine())
        ```
    """

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    loading_args: ClassVar[tuple[str, ...] | None] = ("dtype", "torch_dtype", "revision", "trust_remote_code")

    def options(self, given: Any = None) -> Any:
        """``given`` as this engine's ``Options``.

        Args:
            given: an ``Options`` instance (returned as it is), a mapping of its fields, or ``None`` (none given).

        Returns:
            The options, checked by the dataclass.

        Raises:
            SettingError: a name it has no field for (the line names the engines that take it), or a bad value.
        """
        if isinstance(given, self.Options):
            return given
        if given is not None and not isinstance(given, Mapping):
            raise SettingError(f"{setting('engine_options')} must be a mapping of {setting('engine')} "
                               f"{self.name}'s options, got {type(given).__name__}.")
        given = dict(given or {})
        not_taken = [name for name in given if name not in {f.name for f in dataclasses.fields(self.Options)}]
        if not_taken:
            raise SettingError(self.not_taken(not_taken))
        return self.Options(**given)

    def not_taken(self, names: Sequence[str]) -> str:
        """The line that refuses the options ``names`` this engine does not take: the engines whose options they
        are, else every registered engine's options."""
        owners = sorted({owner for name in names for owner in option_owners().get(name, ())} - {self.name})
        them = "it" if len(names) == 1 else "them"
        shown = ", ".join(setting(name) for name in names)
        if owners:
            return f"{shown}: options of {setting('engine')} {' or '.join(owners)}; give it, or drop {them}."
        takes = "; ".join(f"{engine.name}: {', '.join(f.name for f in named_options(engine)) or 'none'}"
                          for engine in _ENGINES.values())
        return (f"{shown}: no option of {setting('engine')} {self.name} nor of another engine; drop {them} (the "
                f"engines' options: {takes}).")

    def takes(self, name: str) -> bool:
        """Whether the engine takes the loading argument ``name`` (``device``, ``device_map``, ...)."""
        return self.loading_args is None or name in self.loading_args

    def check_loading(self, loading: Loading) -> None:
        """Refuse, before anything loads, what this engine does not take of ``from_pretrained``'s loading
        arguments (``loading_args``), in one line naming them all.

        Raises:
            SettingError: a loading argument, ``device`` or ``load_weights=False`` the engine does not take.
        """
        refused = sorted(key for key, value in loading.kwargs.items() if not self.takes(key) and value is not None)
        refused += [name for name, given in (("device", loading.device is not None),
                                             ("load_weights", not loading.load_weights))
                    if given and not self.takes(name)]
        if refused:
            raise SettingError(f"{', '.join(setting(name) for name in refused)}: not taken by {setting('engine')} "
                               f"{self.name}, which places and loads the model itself; drop "
                               f"{'it' if len(refused) == 1 else 'them'}, or use {setting('engine')} "
                               f"{DEFAULT_ENGINE}.")

    def adopt(self, model) -> Any:
        """The reader of an already loaded transformers ``model``: refused, the engine loads its reader itself."""
        raise SettingError(f"{setting('engine')} {self.name} loads the reader in its own processes: give the model's "
                           "Hub id or folder, not a loaded model.")

    def load(self, name_or_path: str, options: Any, loading: Loading) -> Any:
        """The reader of a model on this engine.

        Args:
            name_or_path: the model's Hub id or folder.
            options: the engine's options (an ``Options``, checked).
            loading: ``from_pretrained``'s loading arguments, those the engine takes.

        Returns:
            A transformers model, or a [`Reader`][hf_ralm.Reader].
        """
        raise NotImplementedError(f"{type(self).__name__} does not say how it loads a reader: define load().")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


_ENGINES: dict[str, Engine] = {}


def register_engine(engine: Engine) -> Engine:
    """Add ``engine`` to the table under its ``name``, so that ``engine=name`` (and ``--engine name``, its options as
    flags) loads its readers.

    Args:
        engine: an [`Engine`][hf_ralm.Engine].

    Returns:
        ``engine``.

    Raises:
        ValueError: a name another engine has, or an option given by name that a flag cannot take (another type
            than ``OPTION_TYPES``, a name of ``RESERVED_OPTIONS``, a name another engine declares with another
            type).
        TypeError: no `Engine`, or an ``Options`` that is no dataclass.

    Examples:
        ```python
        register_engine(MyEngine())
        RetrievalAugmentedModel.from_pretrained("HuggingFaceTB/SmolLM2-135M", engine="my-engine",
                                                engine_options={"url": "http://localhost:8000"})
        ```
    """
    if not isinstance(engine, Engine):
        raise TypeError(f"register_engine takes an Engine, got {engine!r}.")
    if not isinstance(engine.name, str) or not engine.name:
        raise ValueError(f"{type(engine).__name__} has no name: set the class attribute name = '...'.")
    taken = _ENGINES.get(engine.name)
    if taken is not None and type(taken) is not type(engine):
        raise ValueError(f"The engine name {engine.name!r} is taken ({type(taken).__module__}."
                         f"{type(taken).__qualname__}): give {type(engine).__name__} another name.")
    if not dataclasses.is_dataclass(engine.Options):
        raise TypeError(f"{type(engine).__name__}.Options must be a dataclass (its fields are the engine's options).")
    for option in named_options(engine):
        kind = option_type(option)
        others = {other.name: option_type(field) for other in _ENGINES.values() if other.name != engine.name
                  for field in named_options(other) if field.name == option.name}
        if kind not in OPTION_TYPES or option.name in RESERVED_OPTIONS or set(others.values()) - {kind}:
            raise ValueError(f"{type(engine).__name__}.Options.{option.name} ({option.type}) cannot be a flag: an "
                             f"option given by name is one of {', '.join(OPTION_TYPES)} (or None), not named like "
                             "one of from_pretrained's arguments or a RALM setting, and typed as other engines "
                             f"type it ({others or 'none does'}).")
    _ENGINES[engine.name] = engine
    return engine


def option_type(option: dataclasses.Field) -> str:
    """An option's type as its annotation names it, ``None`` left out.

    Examples:
        >>> @dataclass(frozen=True)
        ... class Options:
        ...     max_input_length: int | None = None
        >>> option_type(dataclasses.fields(Options)[0])
        'int'
    """
    annotation = option.type if isinstance(option.type, str) else getattr(option.type, "__name__", str(option.type))
    return " | ".join(part.strip() for part in annotation.split("|") if part.strip() != "None")


def get_engine(name: str) -> Engine:
    """The engine registered as ``name``.

    Raises:
        SettingError: another name, in one line listing the registered engines.
    """
    engine = _ENGINES.get(name) if isinstance(name, str) else None
    if engine is None:
        raise SettingError(f"{setting('engine')} must be one of {', '.join(engine_names())}, got {name!r}.")
    return engine


def engine_names() -> tuple[str, ...]:
    """The registered engines' names: transformers, the engines hf-ralm ships, then those registered from
    outside."""
    return tuple(_ENGINES)


def engines() -> tuple[Engine, ...]:
    """The registered engines, in `engine_names`' order."""
    return tuple(_ENGINES.values())


def named_options(engine: Engine) -> tuple[dataclasses.Field, ...]:
    """The options of ``engine`` given by name (a command-line flag each, and lm-eval's ``model_args``): the fields of
    its ``Options`` with a ``help`` in their metadata."""
    return tuple(f for f in dataclasses.fields(engine.Options) if "help" in f.metadata)


def option_owners() -> dict[str, tuple[str, ...]]:
    """Every option given by name, with the engines that declare it, in the table's order.

    Examples:
        >>> any(DEFAULT_ENGINE in owners for owners in option_owners().values())  # the transformers engine has none
        False
    """
    owners: dict[str, tuple[str, ...]] = {}
    for engine in _ENGINES.values():
        for option in named_options(engine):
            owners[option.name] = (*owners.get(option.name, ()), engine.name)
    return owners
