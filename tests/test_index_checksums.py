"""A damaged index is found before a passage is served (issue 63): a build records the SHA-256 digest of every file
in ``hf_ralm_index.json``; before use, each file is checked against it unless it is provably unchanged since it was
last verified (its stamp, kept in hf-ralm's cache, not in the index folder, which may be read-only), and ``hf-ralm
index --verify DIR`` checks every file. Same-size damage (the sizes alone passed it) is named by its file, with how
to rebuild, in Python and on the command line (exit status 2)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import fail, require_dense
from hf_ralm.cli import main
from hf_ralm.errors import IndexFolderError
from hf_ralm.retrieval import index_checks
from hf_ralm.retrieval.bm25 import BM25Retriever
from hf_ralm.retrieval.index_folder import INDEX_FILE
from test_bad_inputs import settings

ARROW = "passages/data-00000-of-00001.arrow"
SCORES = "bm25s/data.csc.index.npy"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """hf-ralm's cache (where the stamps of verified files go) in the test's own folder."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hf-ralm"


def build(files) -> Path:
    main(["index", "--corpus", files["corpus"], "--index-dir", files["index"]])
    return Path(files["index"])


def damage(path: Path) -> None:
    """Change ``path``'s content, not its size: words of the passages' table, or the last value of an array."""
    data = path.read_bytes()
    changed = data.replace(b" the ", b" XQZ ") if path.suffix == ".arrow" else data[:-4] + bytes(
        255 - b for b in data[-4:])
    assert changed != data and len(changed) == len(data)
    path.write_bytes(changed)


def hashed_files(monkeypatch) -> list[str]:
    """The files hashed from now on, by path (the hashing still done)."""
    seen = []
    digest = index_checks.file_digest
    monkeypatch.setattr(index_checks, "file_digest", lambda path: seen.append(path) or digest(path))
    return seen


def stamps(cache: Path) -> dict:
    (file,) = (cache / "index-checks").glob("*.json")
    return json.loads(file.read_text())


@pytest.mark.parametrize("name", [ARROW, SCORES])
def test_same_size_damage_is_found_before_a_passage_is_served(files, name):
    """A passage table whose words were changed, or a score array with other values, both of their recorded sizes,
    stop the load naming the file and how to rebuild (before: the altered texts, or other passages, were served)."""
    index = build(files)
    assert "XQZ" not in json.dumps([p.text for p in BM25Retriever.load(str(index)).retrieve(["emperor"], k=3)[0]])
    damage(index / name)
    with pytest.raises(IndexFolderError) as error:
        BM25Retriever.load(str(index))
    assert f"is damaged: {index / name} does not hold what hf-ralm wrote there" in str(error.value)
    assert f"Rebuild it: `hf-ralm index --retriever bm25 --corpus {files['corpus']} --index-dir {index}`" in str(
        error.value)


@pytest.mark.parametrize("command", ["retrieve", "eval-lm"])
def test_the_command_line_names_the_damaged_file(files, capsys, command):
    """``retrieve`` and ``eval-lm`` over a damaged index end with one line naming the file, exit status 2."""
    index = build(files)
    damage(index / ARROW)
    capsys.readouterr()
    extra = ["--save-retrieval-file", str(files["tmp"] / "r.json")] if command == "retrieve" else []
    fail(capsys, files, [command, *settings(files, "--retriever", "bm25", "--index-dir", str(index), *extra)],
         f"The bm25 index in '{index}' is damaged: {index / ARROW} does not hold what hf-ralm wrote there",
         "Rebuild it: `hf-ralm index --retriever bm25")
    assert not (files["tmp"] / "r.json").exists()


def test_with_the_corpus_a_damaged_index_is_rebuilt(files, capsys):
    """Given the corpus, a damaged index (all hf-ralm's files, at their names and sizes) is rebuilt, and stderr says
    why; the rebuilt one verifies."""
    index = build(files)
    damage(index / SCORES)
    capsys.readouterr()
    build(files)
    assert f"rebuilding the bm25 index in {index}: it is damaged: {index / SCORES}" in capsys.readouterr().err
    main(["index", "--verify", str(index)])
    assert json.loads(capsys.readouterr().out)["files"] == len(json.loads((index / INDEX_FILE).read_text())["files"])


def test_a_load_hashes_only_the_files_that_changed_since_they_were_verified(files, cache, monkeypatch):
    """The build stamps what it hashed, so the first load hashes nothing; a touched but unchanged file is hashed
    again, passes and is stamped anew, and the next load hashes nothing again."""
    index = build(files)
    hashed = hashed_files(monkeypatch)
    BM25Retriever.load(str(index))
    assert hashed == []
    os.utime(index / ARROW)
    BM25Retriever.load(str(index))
    assert hashed == [str(index / ARROW)]
    recorded = stamps(cache)
    assert recorded["index_dir"] == str(index.resolve())
    assert recorded["files"][ARROW][1:3] == [(index / ARROW).stat().st_size, (index / ARROW).stat().st_mtime_ns]
    BM25Retriever.load(str(index))
    assert hashed == [str(index / ARROW)]


def test_verify_reads_every_file(files, capsys, cache, monkeypatch):
    """``hf-ralm index --verify DIR`` (no --corpus) hashes every file whatever its stamp: damage that left a file's
    stamp as it was (here: a stamp recorded over the damage, as a failing disk would leave it) is trusted by a load,
    found by --verify (exit 2, the file named); a whole index verifies, exit 0."""
    index = build(files)
    hashed = hashed_files(monkeypatch)
    capsys.readouterr()
    main(["index", "--verify", str(index)])
    summary = json.loads(capsys.readouterr().out)
    listed = json.loads((index / INDEX_FILE).read_text())["files"]
    assert summary == {"index_dir": str(index), "checksum": "sha256", "files": len(listed),
                       "bytes": sum(listed.values())}
    assert sorted(hashed) == sorted(str(index / name) for name in listed)
    damage(index / SCORES)
    recorded = stamps(cache)
    recorded["files"][SCORES][1:] = index_checks.file_stamp(str(index / SCORES))
    (stamps_file,) = (cache / "index-checks").glob("*.json")
    stamps_file.write_text(json.dumps(recorded))
    BM25Retriever.load(str(index))  # trusted: its stamp says it was verified as it is
    fail(capsys, files, ["index", "--verify", str(index)],
         f"The bm25 index in '{index}' is damaged: {index / SCORES} does not hold what hf-ralm wrote there",
         "Rebuild it: `hf-ralm index --retriever bm25")


def test_a_read_only_index_is_verified_with_its_stamps_in_the_cache(files, cache, monkeypatch):
    """A copy of an index (new files: no stamps) made read-only is hashed at its first load, its stamps written to
    hf-ralm's cache, nothing in the folder; the next load hashes nothing."""
    copy = Path(shutil.copytree(build(files), files["tmp"] / "read-only"))
    before = {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in copy.rglob("*")}
    for path in [*copy.rglob("*"), copy]:
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)
    try:
        hashed = hashed_files(monkeypatch)
        BM25Retriever.load(str(copy))
        assert len(hashed) == len(json.loads((copy / INDEX_FILE).read_text())["files"])
        BM25Retriever.load(str(copy))
        assert len(hashed) == len(json.loads((copy / INDEX_FILE).read_text())["files"])
        assert {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in copy.rglob("*")} == before
        assert str(copy.resolve()) in {json.loads(p.read_text())["index_dir"]
                                       for p in (cache / "index-checks").glob("*.json")}
    finally:
        for path in [copy, *copy.rglob("*")]:
            path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o200)


def test_an_index_without_checksums_loads_and_says_so_once(files, capsys, caplog):
    """An index built before checksums were recorded is checked by its sizes, as before, and says once that it has
    no checksums; --verify cannot check it (exit 2, how to rebuild)."""
    index = build(files)
    info = json.loads((index / INDEX_FILE).read_text())
    del info["sha256"]
    (index / INDEX_FILE).write_text(json.dumps(info))
    with caplog.at_level(logging.WARNING, logger="hf_ralm"):
        BM25Retriever.load(str(index))
        BM25Retriever.load(str(index))
    said = [record.getMessage() for record in caplog.records if "records no checksums" in record.getMessage()]
    assert len(said) == 1 and "`hf-ralm index --verify` cannot check it" in said[0]
    fail(capsys, files, ["index", "--verify", str(index)],
         f"The bm25 index in '{index}' records no checksums of its files (built by an older hf-ralm)",
         "Rebuild it to record them: `hf-ralm index --retriever bm25")


def test_verify_refuses_what_no_hf_ralm_build_recorded(files, capsys):
    """A folder without hf_ralm_index.json (a Lucene index built elsewhere, a pyserini prebuilt index) has no
    checksums to verify; a digest that is no SHA-256 is an invalid manifest; --verify takes no --corpus."""
    elsewhere = files["tmp"] / "lucene-elsewhere"
    elsewhere.mkdir()
    (elsewhere / "segments_1").write_bytes(b"lucene")
    fail(capsys, files, ["index", "--verify", str(elsewhere)], "holds no index hf-ralm built (no hf_ralm_index.json)",
         "a pyserini prebuilt index has none")
    index = build(files)
    info = json.loads((index / INDEX_FILE).read_text())
    info["sha256"][ARROW] = "abc"
    (index / INDEX_FILE).write_text(json.dumps(info))
    fail(capsys, files, ["index", "--verify", str(index)],
         f"records the SHA-256 digest of '{ARROW}' as \"abc\", not 64 hex digits")
    fail(capsys, files, ["index", "--verify", str(index), "--corpus", files["corpus"]],
         "--verify DIR checks the index in DIR and builds nothing")


def test_a_dense_index_and_a_hybrid_folder_are_checked_too(files, capsys):
    """The dense backend's files are checked as the bm25 backend's: a damaged embeddings.npy stops its load; a
    hybrid folder's --verify checks both of its indexes."""
    require_dense()
    from hf_ralm.retrieval.dense import DenseRetriever

    folder = files["tmp"] / "hybrid"
    BM25Retriever.build(files["corpus"], str(folder / "bm25"), show_progress=False)
    DenseRetriever.build(files["corpus"], str(folder / "dense"), words_per_passage=20, show_progress=False)
    main(["index", "--verify", str(folder)])
    counts = [len(json.loads((folder / side / INDEX_FILE).read_text())["files"]) for side in ("bm25", "dense")]
    assert json.loads(capsys.readouterr().out)["files"] == sum(counts)
    damage(folder / "dense" / "embeddings.npy")
    with pytest.raises(IndexFolderError, match=f"is damaged: {folder / 'dense' / 'embeddings.npy'} does not hold"):
        DenseRetriever.load(str(folder / "dense"))
    fail(capsys, files, ["index", "--verify", str(folder)], f"{folder / 'dense' / 'embeddings.npy'} does not hold")


def test_a_cache_that_cannot_be_written_costs_only_the_hashing(files, monkeypatch, caplog):
    """Where no stamp can be recorded (hf-ralm's cache cannot be written), every load hashes the files and works;
    that is said once."""
    index = build(files)
    blocked = files["tmp"] / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("HF_HOME", str(blocked))
    hashed = hashed_files(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="hf_ralm"):
        BM25Retriever.load(str(index))
        BM25Retriever.load(str(index))
    assert len(hashed) == 2 * len(json.loads((index / INDEX_FILE).read_text())["files"])
    said = [record.getMessage() for record in caplog.records if "could not record" in record.getMessage()]
    assert len(said) == 1 and "hashed again at every load" in said[0]
