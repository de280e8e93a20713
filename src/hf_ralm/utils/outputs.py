"""No input is an output: the checks run on every path a command will write, before any work.

An output file is refused (one line naming it and how to fix it) when it is one of the run's inputs (the same file,
links resolved: writing it would destroy that input), when it exists but hf-ralm did not write it (hf-ralm never writes
over files of others), or when its folder cannot be written to (found before the run, not after hours of it). A file
hf-ralm wrote (a rerun) is replaced, and the log says so. hf-ralm's JSON outputs are told by their form: exactly what
[`write_json_atomic`][hf_ralm.utils.atomic.write_json_atomic] writes ([`json_text`][hf_ralm.utils.atomic.json_text]),
holding what that output holds ([`json_object_with`][hf_ralm.utils.outputs.json_object_with],
[`json_records_with`][hf_ralm.utils.outputs.json_records_with]); a folder hf-ralm writes is told by its manifest (a
run's settings file, a retrieval dataset's fingerprint).

Examples:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> notes = os.path.join(folder, "notes.json")
    >>> _ = open(notes, "w").write("my notes")
    >>> check_output_file(notes, "--output-json", json_records_with("prompt_ids"), "generation output")
    Traceback (most recent call last):
    ...
    hf_ralm.errors.OutputFolderError: ... is no generation output hf-ralm wrote: ... move the file away ...
    >>> check_output_file(notes, "--output-json", json_records_with("prompt_ids"), "generation output",
    ...                   inputs={"--prompts-file": notes})
    Traceback (most recent call last):
    ...
    hf_ralm.errors.InputError: --output-json ... is also the run's --prompts-file ...
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..errors import InputError, OutputFolderError
from .atomic import json_text
from .checks import special_file_kind

logger = logging.getLogger(__name__)

OUTPUT_FOLDER_PURPOSE = "where the run keeps its records and results"
"""What an output folder (``--output-dir``) is for, as a message that refuses one says."""

Recogniser = Callable[[Path], bool]
"""Whether hf-ralm wrote the file at a path (of one kind of output)."""

InputPaths = Mapping[str, "str | os.PathLike | Iterable[str | os.PathLike] | None"]
"""A run's inputs: what names each (a flag, a setting) → its path, several paths, or ``None`` (not given)."""


def written_as_json(path: Path, holds: Callable[[Any], bool]) -> bool:
    """Whether ``path`` holds exactly what hf-ralm's JSON writer writes ([`json_text`][hf_ralm.utils.atomic.json_text])
    of a value that ``holds`` accepts."""
    try:
        text = path.read_text(encoding="utf-8")
        value = json.loads(text)
        return json_text(value) == text and holds(value)
    except (OSError, ValueError):  # unreadable, not UTF-8, not JSON, a NaN: not hf-ralm's
        return False


def json_object_with(*keys: str) -> Recogniser:
    """A JSON object hf-ralm wrote holding ``keys`` (``eval.json``: ``settings_digest``; a run's settings file).

    Examples:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp(), "eval.json")
        >>> _ = path.write_text('{\\n  "settings_digest": "a36b"\\n}\\n')
        >>> json_object_with("settings_digest")(path), json_object_with("token_ppl")(path)
        (True, False)
        >>> _ = path.write_text('{"settings_digest": "a36b"}')   # written by hand, or by another program
        >>> json_object_with("settings_digest")(path)
        False
    """
    return lambda path: written_as_json(path, lambda value: isinstance(value, dict) and all(k in value for k in keys))


def json_records_with(*keys: str) -> Recogniser:
    """A JSON list hf-ralm wrote of objects holding ``keys`` (a retrieval file's windows, ``generate``'s texts)."""
    return lambda path: written_as_json(path, lambda value: isinstance(value, list) and all(
        isinstance(item, dict) and all(k in item for k in keys) for item in value))


def jsonl_records(holds: Callable[[Any], bool]) -> Recogniser:
    """A JSON-lines file hf-ralm wrote: each line a JSON value as ``json.dumps(value, ensure_ascii=False)`` writes it,
    that ``holds`` accepts (QA's ``predictions.jsonl``, the gold passages)."""
    def wrote(path: Path) -> bool:
        try:
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            return all(line == json.dumps(json.loads(line), ensure_ascii=False) + "\n" and holds(json.loads(line))
                       for line in lines)
        except (OSError, ValueError):
            return False

    return wrote


def text_starting_with(first_line: str) -> Recogniser:
    """A text file hf-ralm wrote, told by its first line (a CSV's header of hf-ralm's columns)."""
    def wrote(path: Path) -> bool:
        try:
            with open(path, encoding="utf-8", newline="") as f:
                return f.readline() == first_line + "\n"
        except (OSError, ValueError):
            return False

    return wrote


def check_output_file(path: str | os.PathLike, name: str, hf_ralm_wrote: Recogniser, what: str, *,
                      inputs: InputPaths | None = None) -> bool:
    """Refuse, before any work, the output file ``path`` (given by ``name``: a flag, or a setting marked with
    [`setting`][hf_ralm.errors.setting]) when it is one of ``inputs``
    ([`check_not_an_input`][hf_ralm.utils.outputs.check_not_an_input]), when its folder cannot be written to
    ([`check_writable`][hf_ralm.utils.outputs.check_writable]), or when it exists but is no ``what`` hf-ralm wrote
    (``hf_ralm_wrote``: [`check_replaceable`][hf_ralm.utils.outputs.check_replaceable]). Returns whether it replaces one
    hf-ralm wrote (said on the log)."""
    path = Path(path)
    check_not_an_input(path, name, inputs or {})
    check_writable(Path(os.path.abspath(path)).parent, name)
    if not check_replaceable(path, hf_ralm_wrote, what, f"give {name} another path, or move the file away"):
        return False
    logger.info("hf-ralm: replacing %s (the %s hf-ralm wrote there)", path, what)
    return True


def check_not_an_input(path: str | os.PathLike, name: str, inputs: InputPaths) -> None:
    """Refuse (an [`InputError`][hf_ralm.InputError]) an output ``path`` that is one of the run's ``inputs``: the same
    file, through a link or not."""
    for input_name, given in inputs.items():
        for input_path in [given] if isinstance(given, (str, os.PathLike)) else given or []:
            if _same_file(path, input_path):
                raise InputError(f"{name} {path} is also the run's {input_name} ({input_path}): writing the "
                                 f"output would destroy that input. Give {name} another path.")


def check_writable(folder: str | os.PathLike, name: str, purpose: str | None = None) -> None:
    """Refuse (an [`OutputFolderError`][hf_ralm.errors.OutputFolderError]) an output ``folder`` that cannot be made or
    written to: its nearest existing part is a file (what ``mkdir`` would report as ``[Errno 20] Not a directory``), or
    a folder this process may not write to. ``name`` gave it: the output folder itself, whose ``purpose`` the message
    says (e.g. ``"where the run keeps its records and results"``), or, without ``purpose``, the output file it holds."""
    folder = Path(os.path.abspath(folder))
    existing = next(part for part in (folder, *folder.parents) if part.exists())
    if not existing.is_dir():
        fix = f"give the path of a new or empty folder, {purpose}" if purpose else f"give {name} a path in a folder"
        raise OutputFolderError(f"{existing} is a file, where {name} needs a folder: {fix}.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputFolderError(f"{existing} cannot be written to (read-only, or not this user's), and {name} "
                                f"writes there: give {name} a path in a folder you can write to, or make it "
                                "writable.")


def check_replaceable(path: str | os.PathLike, hf_ralm_wrote: Recogniser, what: str, fix: str) -> bool:
    """Refuse (an [`OutputFolderError`][hf_ralm.errors.OutputFolderError] saying ``fix``) to replace or delete ``path``
    when it exists but is no ``what`` hf-ralm wrote (``hf_ralm_wrote``); whether it exists."""
    path = Path(path)
    if not os.path.lexists(path):
        return False
    check_plain_output(path, fix)  # before hf_ralm_wrote reads it: /dev/full would be read for ever
    if path.is_dir() or not hf_ralm_wrote(path):
        raise OutputFolderError(f"{path} is no {what} hf-ralm wrote: {fix} (hf-ralm never writes over or deletes "
                                "files of others).")
    return True


def check_plain_output(path: str | os.PathLike, fix: str) -> None:
    """Refuse (an [`OutputFolderError`][hf_ralm.errors.OutputFolderError] saying ``fix``) an existing output ``path``
    that is a symbolic link ([`check_not_a_link`][hf_ralm.utils.outputs.check_not_a_link]), or a FIFO, a device or a
    socket: hf-ralm writes its outputs to regular files only, and reads one first to tell whether it wrote it
    (``/dev/full`` or ``/dev/zero`` would be read for ever).

    Examples:
        >>> check_plain_output("/dev/full", "give --output-json another path")
        Traceback (most recent call last):
        ...
        hf_ralm.errors.OutputFolderError: /dev/full is a character device, not a regular file: ... another path.
    """
    check_not_a_link(path, fix)
    try:
        kind = special_file_kind(os.stat(path).st_mode)
    except (OSError, ValueError):  # missing: nothing to refuse
        return
    if kind is not None:
        raise OutputFolderError(f"{os.fspath(path)} is {kind}, not a regular file: hf-ralm writes its outputs to "
                                f"regular files only; {fix}.")


def check_not_a_link(path: str | os.PathLike, fix: str) -> None:
    """Refuse (an [`OutputFolderError`][hf_ralm.errors.OutputFolderError] saying ``fix``) to write ``path`` when it is a
    symbolic link: a write through it would change what it points to (a file hf-ralm did not write, outside the folder
    being written), and replacing it would drop the link without a word; hf-ralm does neither."""
    if os.path.islink(path):
        raise OutputFolderError(f"{os.fspath(path)} is a symbolic link (to {os.readlink(path)}): hf-ralm writes "
                                f"nothing through a link, nor replaces one, so what it points to is left as it is; "
                                f"{fix}.")


def check_no_links(folder: str | os.PathLike, names: Iterable[str], fix: str) -> None:
    """Refuse ([`check_not_a_link`][hf_ralm.utils.outputs.check_not_a_link]) to write into ``folder`` (which may itself
    be a link) when one of the entries ``names`` it writes there, or anything under one that is a folder, is a symbolic
    link.

    Examples:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> os.symlink(os.path.expanduser("~/.bashrc"), os.path.join(folder, "config.json"))
        >>> check_no_links(folder, ["config.json", "README.md"], "remove the link, or save to another folder")
        Traceback (most recent call last):
        ...
        hf_ralm.errors.OutputFolderError: .../config.json is a symbolic link (to .../.bashrc): hf-ralm writes ...
    """
    for name in names:
        entry = os.path.join(folder, name)
        check_not_a_link(entry, fix)
        for top, folders, files in os.walk(entry):  # a folder that is no link: what is under it (links not followed)
            for part in (*folders, *files):
                check_not_a_link(os.path.join(top, part), fix)


def _same_file(path: str | os.PathLike, other: str | os.PathLike) -> bool:
    """Whether two paths name one existing file or folder (links resolved)."""
    try:
        return os.path.samefile(path, other)
    except (OSError, ValueError):  # either is missing: nothing to destroy
        return False
