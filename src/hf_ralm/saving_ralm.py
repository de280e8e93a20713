"""The saving and pushing of a [`RetrievalAugmentedModel`][hf_ralm.RetrievalAugmentedModel], what its
[`save_pretrained`][hf_ralm.RetrievalAugmentedModel.save_pretrained] and
[`push_to_hub`][hf_ralm.RetrievalAugmentedModel.push_to_hub] run: a RALM folder holds the RALM config
(``config.json``), the retriever's ``retriever_config.json`` (with ``save_index`` its index under ``index/``) and a
model card (``README.md``, ``hf_ralm.model_card.ralm_model_card``), never the base weights.

A link where the folder is written is refused before anything is written (a user's file is never written through one);
a folder pushed to the Hub names its base model by a Hub id, refused in one line before the repository is created when
it would name a folder on this machine.

Examples:
    ```python
    save_ralm(model.config, model.retriever, "my-ralm", save_index=True)   # model.save_pretrained("my-ralm", ...)
    push_ralm(model.config, model.retriever, "me/smollm2-ralm-wiki", base_model="HuggingFaceTB/SmolLM2-135M")
    ```
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from typing import Any, Sequence

from transformers.utils import CONFIG_NAME

from .config.configuration_ralm import RalmConfig
from .errors import RalmWarning, SavedFolderError
from .evaluation.compare import Comparison
from .model_card import ralm_model_card
from .retrieval.base import RETRIEVER_CONFIG_FILE, SAVED_INDEX_DIR, Retriever
from .retrieval.saved_paths import names_a_local_path
from .utils.atomic import write_text_atomic
from .utils.checks import check_path, refuse_type
from .utils.outputs import check_no_links

SAVED_ENTRIES = (CONFIG_NAME, RETRIEVER_CONFIG_FILE, "README.md", SAVED_INDEX_DIR, f"{SAVED_INDEX_DIR}.tmp")
"""What [`RetrievalAugmentedModel.save_pretrained`][hf_ralm.RetrievalAugmentedModel.save_pretrained] writes in its
folder (the index and its build folder with ``save_index``)."""


def save_ralm(config: RalmConfig, retriever: Any, save_directory: str | os.PathLike, *, save_index: bool = False,
              comparison: Comparison | None = None, repo_id: str | None = None, dataset: str | None = None,
              tags: Sequence[str] = (), base_model: str | None = None, **kwargs) -> None:
    """What [`save_pretrained`][hf_ralm.RetrievalAugmentedModel.save_pretrained] runs, which says what each argument
    does: the folder of the RALM of ``config`` and ``retriever`` written at ``save_directory``, its config naming the
    base model by ``base_model`` when given; a base model that is a folder on this machine is said in a warning.

    Args:
        config: the RALM's config.
        retriever: its retriever (one that is no [`Retriever`][hf_ralm.retrieval.Retriever] is not saved).
        save_directory: the folder to write.
        save_index: copy the retriever's index into the folder.
        comparison: measured figures for the card.
        repo_id: the Hub repository the card names.
        dataset: the dataset the ``comparison`` was measured on.
        tags: tags that join the card's own.
        base_model: the base model's Hub id, for the config to name.
        **kwargs: for ``RalmConfig.save_pretrained``.
    """
    save_directory = check_path("save_directory", save_directory)
    config = config if base_model is None else hub_config(config, base_model)
    base = config.base_model_name_or_path
    if base and names_a_local_path(base):
        warnings.warn(RalmWarning(
            f"{save_directory} names its base model by the local folder {base!r}, so it loads only where that "
            "folder is: give save_pretrained(..., base_model='OWNER/NAME'), the base model's Hub id, for a "
            "folder that loads anywhere."), stacklevel=3)  # the caller of save_pretrained
    write_ralm_folder(save_directory, config, retriever, save_index=save_index, comparison=comparison,
                      repo_id=repo_id, dataset=dataset, tags=tags, **kwargs)


def write_ralm_folder(save_directory: str | os.PathLike, config: RalmConfig, retriever: Any, *, save_index: bool,
                      comparison: Comparison | None, repo_id: str | None, dataset: str | None, tags: Sequence[str],
                      **kwargs) -> None:
    """Write the RALM folder at ``save_directory`` with ``config`` as its RALM config (what
    ``save_ralm`` and ``push_ralm`` share; the arguments
    are theirs). A link where it writes is refused first: a user's file is never written through one."""
    check_no_links(save_directory, SAVED_ENTRIES,
                   f"remove the link, or save to another folder than {save_directory}")
    os.makedirs(save_directory, exist_ok=True)
    config.save_pretrained(save_directory, **kwargs)
    retriever_file = os.path.join(save_directory, RETRIEVER_CONFIG_FILE)
    if isinstance(retriever, Retriever):
        retriever.save_pretrained(save_directory, save_index=save_index)
    elif os.path.exists(retriever_file):  # left by an earlier save here: it does not describe this model
        os.remove(retriever_file)
    card = ralm_model_card(config, retriever, repo_id=repo_id, index_included=save_index,
                           comparison=comparison, dataset=dataset, tags=tags)
    write_text_atomic(os.path.join(save_directory, "README.md"), str(card), suffix=".md")


def hub_config(config: RalmConfig, base_model: str | None) -> RalmConfig:
    """The RALM config a pushed repository holds: a copy of ``config`` whose base model is named by ``base_model`` (a
    Hub id) when given.

    Args:
        config: the RALM's config (left as it is).
        base_model: the base model's Hub id, or ``None`` for ``config``'s own base model.

    Returns:
        The config to upload.

    Raises:
        SavedFolderError: ``base_model`` is a local path, or without it ``config``'s base model is a folder on this
            machine (or none): the repository would load nowhere else.

    Examples:
        >>> config = RalmConfig(base_model_name_or_path="./smollm2")
        >>> hub_config(config, "HuggingFaceTB/SmolLM2-135M").base_model_name_or_path
        'HuggingFaceTB/SmolLM2-135M'
        >>> hub_config(config, None)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SavedFolderError: This RALM's base model is the local folder './smollm2', ...
    """
    base = base_model or config.base_model_name_or_path
    if base_model is not None and names_a_local_path(base_model):
        raise SavedFolderError(f"base_model={base_model!r} is a local path: give the base model's Hub id (such as "
                               "HuggingFaceTB/SmolLM2-135M), which the pushed repository names.")
    if not base or names_a_local_path(base):
        what = f"is the local folder {base!r}" if base else "is not known"
        raise SavedFolderError(f"This RALM's base model {what}, which a Hub repository cannot load elsewhere: "
                               "give its Hub id, push_to_hub(..., base_model='OWNER/NAME').")
    config = copy.deepcopy(config)
    config.base_model_name_or_path = base
    return config


def push_ralm(config: RalmConfig, retriever: Any, repo_id: str, *, push_index: bool = False,
              comparison: Comparison | None = None, dataset: str | None = None, commit_message: str | None = None,
              commit_description: str | None = None, private: bool | None = None, token: str | bool | None = None,
              revision: str | None = None, create_pr: bool = False, tags: Sequence[str] | None = None,
              base_model: str | None = None) -> str:
    """What [`push_to_hub`][hf_ralm.RetrievalAugmentedModel.push_to_hub] runs: the folder of the RALM of ``config``
    and ``retriever``, written in a temporary folder, uploaded to ``repo_id`` (created when missing), after its base
    model's name is checked (``hub_config``). The keyword arguments are ``push_to_hub``'s, which says what each does.

    Args:
        config: the RALM's config.
        retriever: its retriever.
        repo_id: the Hub repository.

    Returns:
        The commit's URL (the pull request's with ``create_pr``).

    Raises:
        SavedFolderError: as ``hub_config``, before the repository is created.
    """
    from huggingface_hub import HfApi

    if not isinstance(repo_id, str):
        refuse_type("repo_id", repo_id, "a Hub repository id (a str, OWNER/NAME)")
    pushed = hub_config(config, base_model)  # refused before the repository is created
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        write_ralm_folder(folder, pushed, retriever, save_index=push_index, comparison=comparison, repo_id=repo_id,
                          dataset=dataset, tags=tags or ())
        info = api.upload_folder(repo_id=repo_id, folder_path=folder, revision=revision, create_pr=create_pr,
                                 commit_message=commit_message or f"Upload In-Context RALM over "
                                                                  f"{pushed.base_model_name_or_path}",
                                 commit_description=commit_description)
    url = getattr(info, "pr_url", None) if create_pr else None
    return str(url or getattr(info, "commit_url", info))
