"""Index folders through the ``hf-ralm`` command line (in-process, tiny corpora): hf-ralm deletes only the files it
wrote, by name. A (re)build removes only what the folder's ``hf_ralm_index.json`` lists (and the manifest itself),
never the folder; anything else there stops it with one line naming it, exit status 2, and nothing changed. A
manifest alone does not make a folder hf-ralm's, an invalid one is one line, and index folders get the permissions
the umask leaves, as any folder."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ARTICLES, fail, require_dense, write_jsonl
from hf_ralm.cli import main
from hf_ralm.retrieval.index_folder import INDEX_FILE
from test_bad_inputs import settings

EXTRA = {"id": "a5", "title": "Cooking", "text": "the cook baked the bread in the oven and the soup in the pot ."}


def listing(folder) -> dict[str, int]:
    """Every file and folder under ``folder``, with its size: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(Path(folder).rglob("*"))}


def manifest(index_dir) -> dict:
    return json.loads((Path(index_dir) / INDEX_FILE).read_text())


def rewrite_manifest(index_dir, **changes) -> None:
    """Change (or, with ``None``, remove) keys of the index's ``hf_ralm_index.json``."""
    info = {**manifest(index_dir), **changes}
    (Path(index_dir) / INDEX_FILE).write_text(json.dumps({k: v for k, v in info.items() if v is not None}))


def build(files, *flags: str, corpus: str | None = None, index_dir: str | None = None) -> None:
    main(["index", *flags, "--corpus", corpus or files["corpus"], "--index-dir", index_dir or files["index"]])


def edited_corpus(files) -> str:
    """Another corpus (one article more): an index of ``files["corpus"]`` is stale for it, and rebuilt."""
    return str(write_jsonl(files["tmp"] / "edited.jsonl", [*ARTICLES, EXTRA]))


def kind_flags(name: str) -> list[str]:
    if name == "dense":
        require_dense()
    return ["--retriever", name]


@pytest.mark.parametrize("style,where", [("sizes", "notes.txt"), ("sizes", "bm25s/notes.txt"), ("older", "notes.txt")])
def test_a_users_file_inside_an_index_stops_its_rebuild_and_survives(files, capsys, where, style):
    """A file the user put inside an existing index (beside its files, or in one of its sub-folders) is never removed
    by the rebuild a stale corpus triggers (before: the whole folder was removed and rebuilt, rc 0); so beside the
    backend's own entries of an index built before file sizes were recorded (which are hf-ralm's, whole)."""
    build(files)
    if style == "older":
        rewrite_manifest(files["index"], files=None)
    mine = Path(files["index"]) / where
    mine.write_text("mine")
    before = listing(files["index"])
    fail(capsys, files, ["index", "--corpus", edited_corpus(files), "--index-dir", files["index"]],
         f"'{files['index']}' holds {where} (1 entry) that hf-ralm did not write",
         "nothing there was changed: move it out of the folder, or choose another --index-dir")
    assert listing(files["index"]) == before and mine.read_text() == "mine"
    assert not os.path.exists(files["index"] + ".tmp")


def test_a_users_file_inside_a_dense_index_stops_its_rebuild(files, capsys):
    """The dense build (its own, chunk by chunk) is refused before it encodes anything."""
    flags = kind_flags("dense")
    build(files, *flags)
    (Path(files["index"]) / "notes.txt").write_text("mine")
    before = listing(files["index"])
    fail(capsys, files, ["index", *flags, "--corpus", edited_corpus(files), "--index-dir", files["index"]],
         f"'{files['index']}' holds notes.txt (1 entry) that hf-ralm did not write")
    assert listing(files["index"]) == before and not os.path.exists(files["index"] + ".tmp")


def test_a_stray_manifest_does_not_make_a_users_folder_an_index(files, capsys):
    """``hf_ralm_index.json`` copied into a folder of the user's (``--index-dir data``) does not make it hf-ralm's:
    its files are not there, so nothing is removed (before: rc 0, the folder emptied, thesis and corpus gone)."""
    build(files)
    data = files["tmp"] / "data"
    data.mkdir()
    corpus = shutil.copy(files["corpus"], data / "corpus.jsonl")
    (data / "thesis.txt").write_text("my thesis")
    shutil.copy(Path(files["index"]) / INDEX_FILE, data / INDEX_FILE)
    before = listing(data)
    fail(capsys, files, ["index", "--corpus", str(corpus), "--index-dir", str(data)],
         f"'{data}' holds {INDEX_FILE} but no whole hf-ralm index: the index is incomplete:",
         f"it holds corpus.jsonl, {INDEX_FILE}, thesis.txt (3 entries)", "choose a new or empty --index-dir")
    assert listing(data) == before


@pytest.mark.parametrize("damage", ["missing", "resized"])
def test_a_manifest_whose_files_are_not_all_there_as_listed_is_not_hf_ralms(files, capsys, damage):
    """A folder whose manifest lists a missing file, or a file of another size than it records, is not hf-ralm's:
    a rebuild there removes nothing, not even the files it lists (before: the folder was removed)."""
    data = files["tmp"] / "data"
    data.mkdir()
    (data / "thesis.txt").write_text("my thesis")
    listed = {"thesis.txt": 9, "bm25s/params.index.json": 10} if damage == "missing" else {"thesis.txt": 999}
    (data / INDEX_FILE).write_text(json.dumps({"retriever": "bm25", "files": listed}))
    before = listing(data)
    expected = ("is incomplete: bm25s/params.index.json is missing" if damage == "missing" else
                "is truncated or damaged: thesis.txt holds 9 bytes, 999 were written")
    fail(capsys, files, ["index", "--corpus", files["corpus"], "--index-dir", str(data)],
         f"'{data}' holds {INDEX_FILE} but no whole hf-ralm index: the index {expected}")
    assert listing(data) == before


def test_a_corpus_kept_inside_its_index_folder_survives_its_edit(files, capsys):
    """A corpus kept inside its own index folder is the user's: reused while unchanged; once edited, the rebuild it
    triggers is refused and the corpus kept (before: rc 0, the rebuild removed the corpus with the old index)."""
    build(files)
    corpus = Path(shutil.copy(files["corpus"], Path(files["index"]) / "corpus.jsonl"))
    build(files, corpus=str(corpus))  # the same passages: the index is reused, nothing moves
    capsys.readouterr()
    write_jsonl(corpus, [*ARTICLES, EXTRA])
    before = listing(files["index"])
    fail(capsys, files, ["index", "--corpus", str(corpus), "--index-dir", files["index"]],
         f"'{files['index']}' holds corpus.jsonl (1 entry) that hf-ralm did not write")
    assert listing(files["index"]) == before and len(corpus.read_text().splitlines()) == len(ARTICLES) + 1


@pytest.mark.parametrize("changes,expected", [
    ({"files": ["bm25s/params.index.json"]},
     "records 'files' as [\"bm25s/params.index.json\"], not an object of file names"),
    ({"files": {"bm25s/params.index.json": "12"}},
     "records the size of 'bm25s/params.index.json' as \"12\", not a number of bytes"),
    ({"corpus": 5}, "records 'corpus' as 5, not a list of corpus files or null"),
    ({"retriever": ["bm25"]}, "records 'retriever' as [\"bm25\"], not a retriever's name"),
])
def test_an_invalid_manifest_is_one_line(files, capsys, changes, expected):
    """``hf_ralm_index.json`` is checked before it is read: a list of files (before: AttributeError, a traceback),
    sizes that are no numbers, a corpus or a retriever of another type are one line naming the file, whether the
    index is opened or rebuilt; a rebuild removes nothing (the folder is not provably hf-ralm's)."""
    build(files)
    rewrite_manifest(files["index"], **changes)
    before = listing(files["index"])
    fail(capsys, files, ["eval-lm", *settings(files, "--retriever", "bm25", "--index-dir", files["index"])],
         f"The bm25 index in '{files['index']}' is damaged: its {INDEX_FILE} {expected}",
         f"which rebuilds it there, once you have deleted '{files['index']}'")
    fail(capsys, files, ["index", "--corpus", files["corpus"], "--index-dir", files["index"]],
         f"'{files['index']}' holds {INDEX_FILE} but no whole hf-ralm index: the index is damaged: its {INDEX_FILE} "
         f"{expected}")
    assert listing(files["index"]) == before


def test_a_stale_index_is_rebuilt_in_its_own_folder_without_stale_files(files, capsys):
    """A stale index that holds only hf-ralm's files is rebuilt: its listed files are replaced (one that the new
    build does not write is gone), and the folder itself stays (before: removed and replaced by the build folder)."""
    build(files)
    index = Path(files["index"])
    (index / "bm25s" / "old.npy").write_bytes(b"an older build's file")
    rewrite_manifest(index, files={**manifest(index)["files"], "bm25s/old.npy": 21})
    folder = os.stat(index).st_ino
    build(files, corpus=edited_corpus(files))
    info = manifest(index)
    assert info["num_passages"] > 0 and info["corpus"] == [str(files["tmp"] / "edited.jsonl")]
    files_there = sorted(p for p in listing(index) if (index / p).is_file())
    assert files_there == sorted([*info["files"], INDEX_FILE])
    assert all((index / name).stat().st_size == size for name, size in info["files"].items())
    assert os.stat(index).st_ino == folder and not os.path.exists(f"{index}.tmp")


@pytest.mark.parametrize("umask,mode", [(0o022, 0o755), (0o002, 0o775)])
def test_a_new_index_folder_follows_the_umask(files, capsys, umask, mode):
    """An index folder is made as any folder is, with the permissions the umask leaves (before: 0o700, private)."""
    old = os.umask(umask)
    try:
        build(files)
    finally:
        os.umask(old)
    assert os.stat(files["index"]).st_mode & 0o777 == mode
    assert os.path.isfile(os.path.join(files["index"], INDEX_FILE))
