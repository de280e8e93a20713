"""The ``transformers`` engine, the default: the reader is a transformers causal LM in this process, loaded with
``AutoModelForCausalLM`` on hf-ralm's device and precision (or placed by accelerate's ``device_map``), which hf-ralm
runs itself. It takes every loading argument of ``from_pretrained`` and no options of its own.

Examples:
    ```python
    engine = get_engine("transformers")
    model = engine.load("HuggingFaceTB/SmolLM2-135M", engine.options(), Loading({"dtype": "float32"}))
    ```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import SettingError, setting
from ...utils.extras import require
from ...utils.paths import OFFLINE_HINT
from .registry import Engine, Loading, NoOptions, register_engine

if TYPE_CHECKING:  # torch and transformers where a model loads: the command line reads the registry without them
    import torch
    from transformers import PreTrainedModel


def _check_loading_extras(kwargs: dict) -> None:
    """Refuse at once, in one line naming the extra, a base model's loading that needs a package that is not
    installed (transformers would say so only after reading the model's files): accelerate for ``device_map``, gguf
    for ``gguf_file``."""
    if kwargs.get("device_map") is not None:
        require("accelerate", "accelerate", setting("device_map"))
    if kwargs.get("gguf_file"):
        require("gguf", "gguf", setting("gguf_file"))


def _model_type(name_or_path: str, kwargs: dict) -> str | None:
    """The ``model_type`` of the checkpoint's config (``None`` when it cannot be read without loading the model, e.g.
    a GGUF file): what ``dtype="device-default"`` needs to know of the model's family."""
    from transformers import PreTrainedConfig

    config_kwargs = {k: kwargs[k] for k in ("revision", "cache_dir", "token", "local_files_only") if k in kwargs}
    try:
        config_dict, _ = PreTrainedConfig.get_config_dict(name_or_path, **config_kwargs)
    except (OSError, ValueError):
        return None
    text_config = config_dict.get("text_config") or {}
    return text_config.get("model_type") or config_dict.get("model_type")


def placement(kwargs: dict, device: str | torch.device | None, name_or_path: str
              ) -> tuple[dict, torch.device | None]:
    """The base model's loading arguments with its precision resolved, and the device it goes to after loading
    (``None`` with ``device_map``: placed while loading).

    Args:
        kwargs: the loading arguments (``dtype`` or its older name ``torch_dtype``; not given: hf-ralm's choice for
            the device, `hf_ralm.core.placement.resolve_dtype`).
        device: where the model goes (``None``: `hf_ralm.core.placement.default_device`).
        name_or_path: the checkpoint, whose family the device's default precision may depend on.

    Returns:
        The loading arguments with ``dtype`` resolved, and the device.
    """
    from ...runs.shards import Shard
    from ..dtypes import DEVICE_DEFAULT
    from ..placement import default_device, resolve_device, resolve_dtype

    if "torch_dtype" in kwargs:  # transformers' older name
        if "dtype" in kwargs:
            raise SettingError("Give dtype or torch_dtype (its older name), not both.")
        kwargs = {**{k: v for k, v in kwargs.items() if k != "torch_dtype"}, "dtype": kwargs["torch_dtype"]}
    if kwargs.get("device_map") is not None:
        if device is not None:
            raise SettingError(f"Give {setting('device')} or {setting('device_map')}, not both: device_map places the "
                               "model's layers itself.")
        target = default_device(Shard.resolve().local_rank)
    else:
        target = resolve_device(device) if device is not None else default_device(Shard.resolve().local_rank)
    dtype = kwargs.get("dtype", DEVICE_DEFAULT)
    model_type = _model_type(name_or_path, kwargs) if dtype == DEVICE_DEFAULT and target.type == "cuda" else None
    kwargs = {**kwargs, "dtype": resolve_dtype(dtype, target, model_type)}
    return kwargs, None if kwargs.get("device_map") is not None else target


def _base_model_skeleton(name_or_path: str, model_kwargs: dict) -> PreTrainedModel:
    """The base model built from its config on the ``meta`` device: no weights read, no memory taken."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config_kwargs = {k: model_kwargs[k] for k in ("gguf_file", "revision", "cache_dir", "token", "local_files_only")
                     if k in model_kwargs}
    try:
        config = AutoConfig.from_pretrained(name_or_path, **config_kwargs)
    except OSError as error:
        raise OSError(f"Could not read the config of the causal LM {name_or_path!r}: {error}") from error
    dtype = model_kwargs["dtype"]
    if dtype == "auto":  # the checkpoint's own, as from_pretrained reads it (float32 when its config names none)
        dtype = getattr(config.get_text_config(), "dtype", None) or torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype  # a config read from JSON names it
    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(config, dtype=dtype)
    base.config.name_or_path = name_or_path  # what model_identity names it by, as for a loaded model
    return base


def _load_base_model(name_or_path: str, model_args: tuple, model_kwargs: dict):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(name_or_path, *model_args, **model_kwargs)
    except OSError as error:
        raise OSError(
            f"Could not load the causal LM {name_or_path!r}: it is neither a local model folder nor a model that "
            f"could be fetched from the Hub (a typo, or {OFFLINE_HINT}). Original error: {error}"
        ) from error


class TransformersEngine(Engine):
    """The reader as a transformers model in this process: what ``from_pretrained`` loads unless told otherwise."""

    name = "transformers"
    help = "in this process"
    Options = NoOptions  # its loading arguments (device, dtype, device_map, ...) are from_pretrained's own
    loading_args = None

    def check_loading(self, loading: Loading) -> None:
        """Refuse a loading argument whose extra is not installed (``device_map``: accelerate; ``gguf_file``:
        gguf), before anything loads."""
        _check_loading_extras(dict(loading.kwargs))

    def adopt(self, model) -> Any:
        """A loaded transformers ``model`` as it is, in evaluation mode."""
        model.eval()
        return model

    def load(self, name_or_path: str, options: NoOptions, loading: Loading) -> PreTrainedModel:
        """The causal LM ``name_or_path`` loaded with ``loading``'s arguments, on its device in its precision
        (`placement`), in evaluation mode: with ``load_weights=False`` its skeleton on the ``meta`` device. A model in
        bfloat16 on a CPU without bfloat16 instructions gets its linear layers computed in float32
        (`hf_ralm.utils.widened_linear.widen_where_bfloat16_is_slow`)."""
        kwargs, device = placement(dict(loading.kwargs), loading.device, name_or_path)
        if not loading.load_weights:
            return _base_model_skeleton(name_or_path, kwargs).eval()
        from ...utils.widened_linear import widen_where_bfloat16_is_slow

        base = _load_base_model(name_or_path, loading.model_args, kwargs)
        if device is not None:
            base.to(device)
        widen_where_bfloat16_is_slow(base)
        return base.eval()


register_engine(TransformersEngine())
