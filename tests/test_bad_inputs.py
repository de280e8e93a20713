"""Bad input through the ``hf-ralm`` command line (in-process, tiny models and corpora): every case ends with one line
``hf-ralm: error: ...`` that names the file or the setting and says how to fix it, exit status 2, no traceback
(``--debug`` shows one), and nothing written where the results would go (no ``eval.json``, no retrieval file, no
half-built index)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ARTICLES, ON_TEST_DEVICE, TEST_DEVICE_ARGS, fail, make_tiny_tokenizer, require_dense, write_jsonl
from hf_ralm.cli import main
from hf_ralm.errors import IndexFolderError, SavedFolderError
from hf_ralm.retrieval import load_retriever_from_pretrained, retriever_class
from hf_ralm.retrieval.index_folder import INDEX_FILE
from hf_ralm.core.windows import plan_settings, plan_windows


def settings(files, *extra: str) -> list[str]:
    """The flags of a valid evaluation of the tiny model (L=16, s=4, 8-token passages), writing to ``out``."""
    return ["--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16", "--stride", "4",
            "--query-length", "8", "--max-doc-tokens", "8", *TEST_DEVICE_ARGS, "--output-dir", str(files["out"]),
            *extra]


def retrieval_file(capsys, files) -> list[dict]:
    """A valid retrieval file for :func:`settings` (``retrieve`` with BM25), its items."""
    path = files["tmp"] / "r.json"
    argv = settings(files, "--retriever", "bm25", "--corpus", files["corpus"], "--index-dir", files["index"],
                    "--save-retrieval-file", str(path))
    argv[argv.index("--output-dir") + 1] = str(files["tmp"] / "retrieved")  # the evaluations' output stays empty
    main(["retrieve", *argv])
    capsys.readouterr()
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------------------------------------------
# Retrieval files
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content,expected", [
    ("not json [", ["is not JSON (Expecting value: line 1 column 1)", "hf-ralm retrieve --save-retrieval-file"]),
    ('{"begin_location": 0}', ["holds an object, not a list with one item per window"]),
    ("[1, 2]", ["item 0 is a number, not an object"]),
    (b"[\"\xff\"]", [":1: the retrieval file is not UTF-8 (line 1, byte 3)", "save the file as UTF-8"]),
])
def test_retrieval_file_that_is_no_list_of_windows(files, capsys, content, expected):
    path = files["tmp"] / "bad.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    fail(capsys, files, ["eval-lm", *settings(files, "--retrieval-file", str(path))], str(path), *expected)


@pytest.mark.parametrize("damage,expected", [
    (lambda items: items[2].pop("begin_location"), "item 2 has no 'begin_location'"),
    (lambda items: items[1].update(end_location="16"), "item 1 has end_location '16', not a token offset"),
    (lambda items: items[3].update(retrieved_docs=[{"title": "Rome"}]),
     "item 3 has a passage (retrieved_docs[0]) without a 'text' string"),
    (lambda items: items[4].update(retrieved_docs=[{"text": "rome", "score": "high"}]),
     "item 4 has a passage (retrieved_docs[0]) whose score 'high' is no number"),
])
def test_retrieval_file_items_without_their_fields(files, capsys, damage, expected):
    items = retrieval_file(capsys, files)
    damage(items)
    path = files["tmp"] / "r.json"
    path.write_text(json.dumps(items))
    line = fail(capsys, files, ["eval-lm", *settings(files, "--retrieval-file", str(path))], str(path), expected)
    assert "each item needs begin_location and end_location" in line


@pytest.mark.parametrize("flag,value,expected", [
    ("--stride", "2", "To use the file, evaluate with --stride=4;"),
    ("--max-length", "12", "To use the file, evaluate with --max-length=16;"),
    ("--max-eval-tokens", "40", "the dataset, tokenizer and --max-eval-tokens that give"),
])
def test_retrieval_file_of_other_windows_says_what_would_match(files, capsys, flag, value, expected):
    items = retrieval_file(capsys, files)
    path = files["tmp"] / "r.json"
    argv = settings(files, "--retrieval-file", str(path))
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    num_tokens = items[-1]["end_location"]
    line = fail(capsys, files, ["eval-lm", *argv], str(path), expected,
                f"the file's windows are --stride=4, --max-length=16 over {num_tokens} tokens")
    assert "write one for these settings with hf-ralm retrieve" in line


def test_plan_settings_reads_the_windows_a_file_was_made_with():
    for num_tokens, max_length, stride in [(30, 10, 4), (100, 16, 4), (20, 16, 1), (40, 9, 8)]:
        ends = [w.end for w in plan_windows(num_tokens, max_length, stride)]
        assert plan_settings(ends) == (stride, max_length, num_tokens)
    assert plan_settings([12]) == (None, None, 12)  # one window: the text fits, nothing more is known
    assert plan_settings([10, 13]) == (None, 10, 13)  # two: the stride is only known to be at least 3
    assert plan_settings([10, 14, 20]) is None  # stride 4, then 6: no plan
    assert plan_settings([]) is None


# ----------------------------------------------------------------------------------------------------------------
# Corpora and titles
# ----------------------------------------------------------------------------------------------------------------


def index_argv(files, corpus: str) -> list[str]:
    return ["index", "--corpus", corpus, "--index-dir", files["index"]]


@pytest.mark.parametrize("command", ["index", "eval-lm"])
@pytest.mark.parametrize("lines,expected", [
    ([json.dumps(ARTICLES[0]), json.dumps({"id": "2", "body": "no text"})],
     ":2: corpus rows need a 'text' field, got ['body', 'id']; give every row its article text"),
    ([json.dumps(ARTICLES[0]), "", json.dumps({"id": "3", "text": None})],
     ":3: the row's 'text' is None, not a string"),
    ([json.dumps(ARTICLES[0]), "{not json"], ":2: not a JSON object"),
    (["", json.dumps({"id": "1", "title": "T", "text": "   "})], "gave no passages: no row has a non-empty 'text'"),
])
def test_corpus_rows_without_text_or_passages(files, capsys, command, lines, expected):
    corpus = files["tmp"] / "bad.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    argv = index_argv(files, str(corpus)) if command == "index" else \
        ["eval-lm", *settings(files, "--retriever", "bm25", "--corpus", str(corpus), "--index-dir", files["index"])]
    fail(capsys, files, argv, str(corpus), expected)
    assert not os.path.exists(files["index"]) and not os.path.exists(files["index"] + ".tmp")


@pytest.mark.parametrize("name", ["bad.jsonl", "bad.jsonl.gz", "bad.tsv"])
def test_corpus_that_is_not_utf8_names_the_line(files, capsys, name):
    lines = [b"id\ttext\ttitle", b"1\tthe king\tKing", b"2\tthe caf\xe9 of rome\tRome"] if name.endswith("tsv") else \
        [json.dumps(a).encode() for a in ARTICLES[:2]] + [b'{"id": "3", "text": "caf\xe9"}']
    data = b"\n".join(lines) + b"\n"
    corpus = files["tmp"] / name
    corpus.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    fail(capsys, files, index_argv(files, str(corpus)), f"{corpus}:3: the corpus is not UTF-8 (line 3, byte")


def test_tsv_corpus_without_its_columns(files, capsys):
    corpus = files["tmp"] / "bad.tsv"
    corpus.write_text("title\tbody\nKing\tthe king\n")
    fail(capsys, files, index_argv(files, str(corpus)), str(corpus), "has no id and no text column",
         "must name the columns id, text and title")


@pytest.mark.parametrize("content,expected", [
    (None, "--forbidden-titles file '{path}' does not exist: give a text file with one article title per line"),
    ("\n  \n", "--forbidden-titles file '{path}' holds no titles: give one article title per line, or leave "
               "--forbidden-titles out"),
    (b"Rome\nCaf\xe9\n", "{path}:2: the titles file is not UTF-8"),
])
def test_forbidden_titles_file_missing_empty_or_not_utf8(files, capsys, tiny_index, content, expected):
    path = files["tmp"] / "forbidden_titles.txt"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    argv = settings(files, "--retriever", "bm25", "--index-dir", tiny_index["index_dir"], "--forbidden-titles",
                    str(path))
    fail(capsys, files, ["eval-lm", *argv], expected.format(path=path))


@pytest.mark.parametrize("content,expected", [
    (b'{"text": "the king"}\n{"body": "x"}\n', ':2: a dataset row must be a JSON object with a \'text\' string'),
    (b'{"text": "the king"}\n{"text": "caf\xe9"}\n', ":2: the dataset is not UTF-8"),
])
def test_dataset_rows_without_text_or_not_utf8(files, capsys, content, expected):
    path = files["tmp"] / "data.jsonl"
    path.write_bytes(content)
    fail(capsys, files, ["eval-lm", *settings(files)], f"{path}{expected}")


# ----------------------------------------------------------------------------------------------------------------
# Index folders, every backend
# ----------------------------------------------------------------------------------------------------------------


def backend(name: str, request) -> list[str]:
    """The ``--retriever`` flags of a backend whose optional packages are here (else a skip, as their own tests)."""
    if name == "dense":
        require_dense()
    elif name == "lucene":
        request.getfixturevalue("pyserini")
    return ["--retriever", name]


def largest_file(index_dir: str) -> str:
    info = json.loads(open(os.path.join(index_dir, INDEX_FILE)).read())
    return max(info["files"], key=info["files"].get)


def truncate(index_dir: str) -> str:
    name = largest_file(index_dir)
    with open(os.path.join(index_dir, name), "r+b") as f:
        f.truncate(os.path.getsize(f.name) // 2)
    return f"is truncated or damaged: {name} holds"


def remove_file(index_dir: str) -> str:
    name = largest_file(index_dir)
    os.remove(os.path.join(index_dir, name))
    return f"is incomplete: {name} is missing"


def older_version(index_dir: str) -> str:
    """An index as an older hf-ralm wrote it: no file sizes, and (bm25, dense) a setting it did not record."""
    path = os.path.join(index_dir, INDEX_FILE)
    info = json.loads(open(path).read())
    del info["files"]
    key = {"bm25": "stemmer", "dense": "pooling"}.get(info["retriever"])
    if key is None:  # lucene records nothing more: an older index without its Lucene files
        for name in os.listdir(os.path.join(index_dir, "lucene")):
            os.remove(os.path.join(index_dir, "lucene", name))
        expected = "is incomplete: lucene/segments_* is missing"
    else:
        del info[key]
        expected = f"was built by an older hf-ralm: its {INDEX_FILE} records no {key}"
    with open(path, "w") as f:
        json.dump(info, f)
    return expected


def damaged_info(index_dir: str) -> str:
    with open(os.path.join(index_dir, INDEX_FILE), "w") as f:
        f.write('{"retriever": "bm2')
    return f"is damaged: its {INDEX_FILE} is not a JSON object"


def file_outside(index_dir: str) -> str:
    """A hostile hf_ralm_index.json: its list of files names one outside the folder (there, of the size it records,
    so that only where it lies is wrong)."""
    path = os.path.join(index_dir, INDEX_FILE)
    info = json.loads(open(path).read())
    with open(os.path.join(os.path.dirname(index_dir), "elsewhere.txt"), "w") as f:
        f.write("not the index's")
    info["files"]["../elsewhere.txt"] = len("not the index's")
    with open(path, "w") as f:
        json.dump(info, f)
    return f"is damaged: its {INDEX_FILE} lists '../elsewhere.txt', which leads outside the folder"


def folder_bytes(folder: str) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes, by relative path."""
    root = Path(folder)
    return {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*") if path.is_file()}


@pytest.mark.parametrize("damage", [truncate, remove_file, older_version, damaged_info, file_outside])
@pytest.mark.parametrize("name", ["bm25", "dense", "lucene"])
def test_unusable_index_is_refused_and_rebuilt_only_when_whole(files, capsys, request, name, damage):
    kind = backend(name, request)
    main(["index", *kind, "--corpus", files["corpus"], "--index-dir", files["index"]])
    expected = damage(files["index"])
    capsys.readouterr()
    corpus_hint = f"--corpus {files['corpus']}" if damage is not damaged_info else "--corpus FILE"
    fail(capsys, files, ["eval-lm", *settings(files, *kind, "--index-dir", files["index"])],
         f"The {name} index in '{files['index']}' {expected}",
         f"Rebuild it: `hf-ralm index --retriever {name} {corpus_hint} --index-dir {files['index']}`, or pass the "
         "corpus where the index is used (--corpus, corpus=)")

    argv = ["eval-lm", *settings(files, *kind, "--index-dir", files["index"], "--corpus", files["corpus"])]
    if damage is older_version and name != "lucene":  # every file there as written, only its settings old: rebuilt
        main(argv)
        err = capsys.readouterr().err
        assert f"hf-ralm: rebuilding the {name} index in {files['index']}: it {expected}" in err
    else:  # a manifest whose files are not all there as written does not make the folder hf-ralm's: nothing removed
        before = folder_bytes(files["index"])
        fail(capsys, files, argv, f"'{files['index']}' holds {INDEX_FILE} but no whole hf-ralm index: the index "
             f"{expected}", "nothing there was changed", "delete the folder yourself if none of it is yours")
        assert folder_bytes(files["index"]) == before
        shutil.rmtree(files["index"])  # as the line says; then the corpus builds it anew
        main(argv)
        capsys.readouterr()
    report = json.loads((files["out"] / "eval.json").read_text())
    assert report["num_windows_with_passage"] > 0
    info = json.loads(open(os.path.join(files["index"], INDEX_FILE)).read())
    assert all(os.path.getsize(os.path.join(files["index"], f)) == size for f, size in info["files"].items())


def test_index_of_another_backend_is_never_built_over(files, capsys, request):
    main(index_argv(files, files["corpus"]))
    fail(capsys, files, ["eval-lm", *settings(files, *backend("lucene", request), "--index-dir", files["index"],
                                              "--corpus", files["corpus"])],
         f"'{files['index']}' holds a 'bm25' index, not a lucene one: give each retriever its own --index-dir")
    assert json.loads(open(os.path.join(files["index"], INDEX_FILE)).read())["retriever"] == "bm25"


# ----------------------------------------------------------------------------------------------------------------
# Folders that are not hf-ralm's: never built over, never removed
# ----------------------------------------------------------------------------------------------------------------

BACKENDS = ["bm25", "dense", "lucene", "hybrid"]


def listing(folder: Path) -> dict[str, int]:
    """Every file and folder under ``folder``, with its size: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(Path(folder).rglob("*"))}


@pytest.mark.parametrize("where", ["data", "."])
@pytest.mark.parametrize("name", BACKENDS)
def test_index_dir_that_holds_other_files_is_refused_and_left_as_it_is(files, capsys, request, monkeypatch,
                                                                       name, where):
    """A mistyped ``--index-dir`` (the corpus's own folder, the working folder) is refused with one line naming what
    it holds; nothing in it is touched (before: bm25 and dense deleted the folder and built there)."""
    kind = backend(name, request)
    data = files["tmp"] / "data"
    data.mkdir()
    corpus = shutil.copy(files["corpus"], data / "wiki.jsonl")
    (data / "notes.txt").write_text("mine")
    monkeypatch.chdir(data if where == "." else files["tmp"])
    before = listing(files["tmp"])
    fail(capsys, files, ["index", *kind, "--corpus", str(corpus), "--index-dir", where],
         f"'{where}' is not an hf-ralm index folder and is not empty: it holds notes.txt, wiki.jsonl (2 entries)",
         "choose a new or empty --index-dir")
    assert listing(files["tmp"]) == before


def test_an_empty_index_dir_is_built_in(files, capsys):
    os.mkdir(files["index"])
    main(index_argv(files, files["corpus"]))
    assert os.path.isfile(os.path.join(files["index"], INDEX_FILE))


@pytest.mark.parametrize("name", ["bm25", "dense", "lucene"])
def test_a_folder_named_like_the_build_folder_is_never_removed(files, capsys, request, name):
    """``<index-dir>.tmp`` is where a build is written before it is renamed; one that hf-ralm did not make (no
    marker of its own in it) is the user's: refused, kept (before: removed, or emptied by the dense build)."""
    mine = files["tmp"] / "index.tmp"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    fail(capsys, files, ["index", *backend(name, request), "--corpus", files["corpus"], "--index-dir", files["index"]],
         f"'{mine}', where the build of '{files['index']}' is written, was not made by hf-ralm",
         "move it away or choose another --index-dir")
    assert listing(mine) == {"notes.txt": 4} and not os.path.exists(files["index"])


def test_save_index_over_a_folder_of_other_files_is_refused(tiny_index, tmp_path):
    """``save_pretrained(dir, save_index=True)`` copies the index to ``dir/index``: a user's folder there is refused
    and kept (before: replaced by the copy)."""
    mine = tmp_path / "saved" / "index"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(IndexFolderError, match=f"'{mine}' is not an hf-ralm index folder and is not empty: it holds "
                                               r"notes.txt \(1 entry\)"):
        tiny_index["retriever"].save_pretrained(tmp_path / "saved", save_index=True)
    assert listing(mine) == {"notes.txt": 4}


# ----------------------------------------------------------------------------------------------------------------
# Saved and downloaded folders whose files name paths outside them (a hostile Hub repository)
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def outside_index(tmp_path_factory):
    """``outside_index(name)``: a ``name`` index of ARTICLES that lies outside every saved folder (built on first
    use, once per module): what a hostile folder points at."""
    root = tmp_path_factory.mktemp("outside")
    corpus = str(write_jsonl(root / "corpus.jsonl", ARTICLES))
    built: dict = {}

    def index(name: str):
        if name not in built:
            built[name] = retriever_class(name).build_or_load(corpus, str(root / name))
        return built[name]

    return index


def pointing_outside(config: dict, folder: Path, how: str) -> dict:
    """``config`` (a retriever's, with absolute index folders) with every index folder it names recorded so that it
    leads out of ``folder``: by its absolute path, through ``..``, or through a symbolic link inside ``folder``."""
    def outside(path: str) -> str:
        if how == "absolute":
            return path
        if how == "parent":
            return os.path.relpath(path, folder)
        link = folder / f"link-{len(os.listdir(folder))}"
        link.symlink_to(path, target_is_directory=True)
        return link.name

    if "sparse" in config:  # hybrid: both sides
        return {**config, **{side: {**config[side], "index_dir": outside(config[side]["index_dir"])}
                             for side in ("sparse", "dense")}}
    return {**config, "index_dir": outside(config["index_dir"])}


def saved_folder(tmp_path: Path, config: dict | None = None, name: str = "downloaded") -> Path:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    if config is not None:
        (folder / "retriever_config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("how", ["absolute", "parent", "symlink"])
@pytest.mark.parametrize("name", BACKENDS)
def test_saved_folder_naming_an_index_outside_it_is_refused(outside_index, request, tmp_path, name, how):
    """A ``retriever_config.json`` whose index folder leads out of its folder is refused with one line: the file,
    the key, the path and how to go on; the same folder given explicitly (``index_dir=``) is opened (before: any
    index anywhere was opened silently)."""
    backend(name, request)
    retriever = outside_index(name)
    folder = saved_folder(tmp_path)
    config = pointing_outside(retriever.config(), folder, how)
    (folder / "retriever_config.json").write_text(json.dumps(config))
    recorded = (config["sparse"] if name == "hybrid" else config)["index_dir"]
    with pytest.raises(SavedFolderError) as info:
        load_retriever_from_pretrained(str(folder))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{folder / 'retriever_config.json'}: its index_dir {recorded!r} leads outside "
                              f"{str(folder)!r}"), message
    assert "index_dir=" in message and "save_index=True" in message
    explicit = retriever.index_dir
    assert len(load_retriever_from_pretrained(str(folder), index_dir=explicit)) == len(retriever)


@pytest.mark.parametrize("name", BACKENDS)
def test_saved_folder_naming_an_outside_folder_never_builds_there(files, request, tmp_path, name):
    """With ``corpus=`` (the documented rebuild), a saved folder that names a folder outside it is refused before
    anything is built: that folder is left as it was (before: deleted, and an index built there)."""
    backend(name, request)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    folder = saved_folder(tmp_path, {"type": name, "index_dir": str(precious)})
    with pytest.raises(SavedFolderError, match="its index_dir .*precious' leads outside"):
        load_retriever_from_pretrained(str(folder), corpus=files["corpus"])
    assert listing(precious) == {"notes.txt": 4}


def test_saved_lucene_folder_naming_a_path_as_its_prebuilt_index_is_refused(outside_index, request, tmp_path):
    backend("lucene", request)
    path = outside_index("lucene").index_dir
    folder = saved_folder(tmp_path, {"type": "lucene", "prebuilt": path})
    with pytest.raises(SavedFolderError, match=f"retriever_config.json: its prebuilt '{path}' leads outside"):
        load_retriever_from_pretrained(str(folder))


def test_saved_dense_folder_naming_an_encoder_outside_it_is_refused(outside_index, tmp_path):
    """A dense index inside the saved folder whose encoder (in retriever_config.json, or in the index's own
    hf_ralm_index.json) is a folder elsewhere on this machine: refused unless the caller names the encoder (before:
    that folder was loaded as the encoder); hf-ralm's default encoder is no path the folder chose."""
    require_dense()
    from hf_ralm.retrieval.dense import default_encoder

    retriever = outside_index("dense")
    elsewhere = tmp_path / "some-model"
    elsewhere.symlink_to(default_encoder(), target_is_directory=True)
    folder = saved_folder(tmp_path)
    retriever.save_pretrained(folder, save_index=True)
    assert load_retriever_from_pretrained(str(folder)).encoder.name == default_encoder()
    index_info = folder / "index" / INDEX_FILE
    index_info.write_text(json.dumps({**json.loads(index_info.read_text()), "encoder": str(elsewhere)}))
    config = json.loads((folder / "retriever_config.json").read_text())
    for saved in ({**config, "encoder": str(elsewhere)}, {k: v for k, v in config.items() if k != "encoder"}):
        (folder / "retriever_config.json").write_text(json.dumps(saved))
        with pytest.raises(SavedFolderError, match=f"its encoder '{elsewhere}' leads outside .*encoder="):
            load_retriever_from_pretrained(str(folder))
    assert load_retriever_from_pretrained(str(folder), encoder=str(elsewhere)).encoder.name == str(elsewhere)


@pytest.mark.parametrize("saved_in", ["retriever_config.json", "config.json"])
def test_saved_ralm_naming_an_index_outside_it_is_refused(files, tiny_index, tmp_path, saved_in):
    """``from_pretrained`` of a saved RALM whose retriever is recorded with an index elsewhere (as save_pretrained
    without save_index records it; in config.json as older versions saved it): refused with what to pass, and opened
    when the caller passes it (before: followed silently)."""
    from hf_ralm import RetrievalAugmentedModel

    ralm = RetrievalAugmentedModel.from_pretrained(files["model"], retriever="bm25",
                                                   index_dir=tiny_index["index_dir"], **ON_TEST_DEVICE)
    saved = tmp_path / "my-ralm"
    ralm.save_pretrained(saved)  # without its index: recorded by its absolute path
    if saved_in == "config.json":  # the older layout: the retriever's description inside config.json
        (saved / "retriever_config.json").unlink()
        config = json.loads((saved / "config.json").read_text())
        (saved / "config.json").write_text(json.dumps({**config, "retriever": ralm.retriever.config()}))
    else:  # as saved before the index's identity was recorded (with it, it is followed: test_saved_folders.py)
        (saved / "retriever_config.json").write_text(json.dumps(ralm.retriever.config()))
    recorded = os.path.abspath(tiny_index["index_dir"])
    with pytest.raises(SavedFolderError) as info:
        RetrievalAugmentedModel.from_pretrained(str(saved), **ON_TEST_DEVICE)
    assert str(info.value).startswith(f"{saved / saved_in}: its index_dir {recorded!r} leads outside "
                                      f"{str(saved)!r}"), str(info.value)
    assert f"index_dir={recorded!r}" in str(info.value)
    again = RetrievalAugmentedModel.from_pretrained(str(saved), index_dir=recorded, **ON_TEST_DEVICE)
    assert again.retriever.config() == ralm.retriever.config()


# ----------------------------------------------------------------------------------------------------------------
# Settings the model cannot hold
# ----------------------------------------------------------------------------------------------------------------


def test_window_that_cannot_hold_a_passage_and_a_stride(files, capsys, tiny_index):
    """A passage that, cut at --max-doc-tokens, leaves no room in the window for a stride is refused as soon as it
    is met, in eval-lm, retrieve and generate alike, with the flags to change."""
    model = ["--model", files["model"], *TEST_DEVICE_ARGS, "--retriever", "bm25", "--index-dir",
             tiny_index["index_dir"], "--max-length", "16", "--stride", "4", "--query-length", "8",
             "--max-doc-tokens", "13"]
    data = ["--dataset-path", files["dataset"], "--output-dir", str(files["out"])]
    expected = ("--max-length (16) cannot hold a passage of 13 tokens (--max-doc-tokens: 13) and the --stride (4) "
                "tokens after it: lower --max-doc-tokens to at most 12 or raise --max-length to at least 17.")
    fail(capsys, files, ["eval-lm", *model, *data], expected)
    retrieve = ["--dataset-path", files["dataset"], "--output-dir", str(files["tmp"] / "retrieved")]
    fail(capsys, files, ["retrieve", *model, *retrieve, "--rerank", "lm", "--save-retrieval-file",
                         str(files["tmp"] / "r.json")], expected)
    fail(capsys, files, ["generate", *model, "--prompt", "the king", "--output-json", str(files["out"] / "g.json")],
         expected)
    assert not (files["tmp"] / "r.json").exists() and not (files["out"] / "g.json").exists()


def test_generation_context_always_holds_the_stride(tiny_llama, tiny_tokenizer, tiny_index):
    """At the limit (max_doc_tokens + stride = max_length) every window with retrieval is longer than its passage
    can be, so no passage covers a scored token; and generation, refused one token beyond it, keeps room for the
    stride in every context."""
    from hf_ralm import RalmConfig
    from hf_ralm.generation import ralm_generate, stride_start

    for num_tokens, max_length, stride in [(100, 16, 4), (57, 12, 5), (40, 9, 1)]:
        for w in plan_windows(num_tokens, max_length, stride)[1:]:
            assert w.score_begin - w.begin >= max_length - stride  # the passage's room lies before the scored tokens
    for length in range(0, 40):  # [passage; x[a:]] plus the stride fits, whatever x's length
        start = stride_start(length, 4, 12, 16)
        assert 12 + (length - start) + 4 <= 16 and start <= length
    config = RalmConfig(retrieval_stride=4, query_length=8, max_length=16, max_doc_tokens=13)
    with pytest.raises(ValueError, match=r"^max_length \(16\) cannot hold a passage of 13 tokens"):
        ralm_generate(tiny_llama, tiny_tokenizer, tiny_index["retriever"], config, "the king", max_new_tokens=2)
    config.max_doc_tokens = 12
    assert ralm_generate(tiny_llama, tiny_tokenizer, tiny_index["retriever"], config, "the king",
                         max_new_tokens=2).shape == (1, 4)


def test_max_eval_tokens_below_two(files, capsys):
    fail(capsys, files, ["eval-lm", *settings(files, "--max-eval-tokens", "1")],
         "--max-eval-tokens must be at least 2, got 1.")


# ----------------------------------------------------------------------------------------------------------------
# No pad token: none is needed
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def no_pad_model_dir(tmp_path, tiny_llama):
    """The tiny Llama with a tokenizer that has no pad token, and no pad token in its configs either."""
    tokenizer = make_tiny_tokenizer()
    tokenizer.pad_token = None
    assert tokenizer.pad_token_id is None
    tiny_llama.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    config_path = tmp_path / "model" / "config.json"
    config = json.loads(config_path.read_text())
    config["pad_token_id"] = None
    config_path.write_text(json.dumps(config))
    generation_path = tmp_path / "model" / "generation_config.json"
    if generation_path.exists():
        generation = json.loads(generation_path.read_text())
        generation.pop("pad_token_id", None)
        generation_path.write_text(json.dumps(generation))
    return str(tmp_path / "model")


def test_batches_need_no_pad_token(files, capsys, tiny_index, no_pad_model_dir):
    """Prompts of different lengths batched together (left padding) generate what each does alone, and evaluation
    batches need no padding: a tokenizer without a pad token is fine everywhere."""
    prompts = ["the king and the queen sat on the", "rome"]
    common = ["generate", "--model", no_pad_model_dir, "--max-new-tokens", "6", "--stride", "2", "--query-length", "4",
              "--max-doc-tokens", "8", "--retriever", "bm25", "--index-dir", tiny_index["index_dir"], *TEST_DEVICE_ARGS]
    outputs = {}
    for batch_size in ("1", "2"):
        path = files["tmp"] / f"generated-{batch_size}.json"
        main([*common, *(flag for p in prompts for flag in ("--prompt", p)), "--batch-size", batch_size,
              "--output-json", str(path)])
        outputs[batch_size] = [(r["output_ids"], r["sources"]) for r in json.loads(path.read_text())]
    assert outputs["1"] == outputs["2"]

    figures = []
    for batch_size in ("1", "5"):
        argv = settings(files, "--batch-size", batch_size)
        argv[argv.index("--model") + 1] = no_pad_model_dir
        argv[argv.index("--output-dir") + 1] = str(files["tmp"] / f"eval-{batch_size}")
        main(["eval-lm", *argv])
        figures.append(json.loads((files["tmp"] / f"eval-{batch_size}" / "eval.json").read_text())["nll_sum"])
    assert figures[0] == pytest.approx(figures[1], rel=1e-6)


# ----------------------------------------------------------------------------------------------------------------
# --debug
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback_then_the_one_line(files, capsys, where):
    path = files["tmp"] / "bad.json"
    path.write_text("not json [")
    argv = ["eval-lm", *settings(files, "--retrieval-file", str(path))]
    argv = ["--debug", *argv] if where == "before" else [*argv, "--debug"]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "RetrievalFileError" in err
    assert err.rstrip("\n").splitlines()[-1].startswith(f"hf-ralm: error: {path} is not JSON")
    assert not (files["out"] / "eval.json").exists()


# ----------------------------------------------------------------------------------------------------------------
# Damaged records in --output-dir, and output folders that hold files of others
# ----------------------------------------------------------------------------------------------------------------


def rewrite_chunk(path: Path, change, older: bool = False) -> None:
    """Rewrite a chunk's content with ``change`` applied (its checksum kept); ``older``: as versions before the
    checksum wrote it (no checksum, counts or settings digest)."""
    with gzip.open(path, "rt") as f:
        content = json.load(f)
    if older:
        content = {"rows": content["rows"], "seconds": content["seconds"], "git_commit": content["git_commit"]}
    change(content["rows"])
    with gzip.open(path, "wt") as f:
        json.dump(content, f)


def older(change):
    return lambda path: rewrite_chunk(path, change, older=True)


def gzip_of(data: bytes):
    return lambda path: path.write_bytes(gzip.compress(data))


@pytest.mark.parametrize("damage,expected", [
    (lambda path: rewrite_chunk(path, lambda rows: rows[1].update(nlls=[0.0])),
     "its rows do not match its checksum: they changed after it was written"),
    (older(lambda rows: rows[1].update(nlls=[0.0])), "window 5 holds 1 NLLs, where the run scores 4 of its tokens"),
    (older(lambda rows: rows[1].update(nlls=None)), "window 5 holds no NLLs, where the run scores 4 of its tokens"),
    (older(lambda rows: rows[2]["nlls"].__setitem__(0, float("nan"))), "record 2: nlls[0] is NaN, not a finite "
                                                                       "number"),
    (older(lambda rows: rows[0].pop("chosen")), "its record 0: the record lacks ['chosen']"),
    (older(lambda rows: rows[3].update(gate_score="high")), "record 3: gate_score is \"high\", not a number"),
    (older(lambda rows: rows.pop()), "it holds 3 records, where its name says 4"),
    (lambda path: path.write_bytes(path.read_bytes()[:-12]),
     "Compressed file ended before the end-of-stream marker was reached"),
    (lambda path: path.write_bytes(path.read_bytes()[:10] + b"\x07" + path.read_bytes()[11:]),
     "Error -3 while decompressing data: invalid block type"),
    (lambda path: path.write_bytes(b"random bytes, not a chunk"), "Not a gzipped file"),
    (gzip_of(b'{"rows": ['), "Expecting value: line 1 column 11"),
    (gzip_of(b'[1, 2]'), "it holds no list of rows"),
])
def test_damaged_chunk_is_named_and_repaired(files, capsys, damage, expected):
    """A damaged chunk is never used (no traceback, no silent figure): one line names it, and --repair moves it to
    the folder's damaged/ and computes its windows again, to the same figures."""
    argv = ["eval-lm", *settings(files, "--chunk-size", "4")]
    main(argv)
    whole = json.loads((files["out"] / "eval.json").read_text())
    (files["out"] / "eval.json").unlink()  # as if the run had stopped before its end
    chunk = files["out"] / "windows" / "chunk-00000004-00000008.json.gz"
    damage(chunk)
    capsys.readouterr()
    fail(capsys, files, argv, f"holds 1 damaged chunk(s) ({chunk.name}: ", expected, "rerun with --repair")
    main([*argv, "--repair"])
    assert "hf-ralm: warning: moved 1 damaged chunk(s) of " in capsys.readouterr().err
    repaired = json.loads((files["out"] / "eval.json").read_text())
    assert repaired["token_ppl"] == whole["token_ppl"]
    assert repaired["num_resumed_windows"] == whole["num_windows"] - 4  # only the damaged chunk was computed again
    assert [p.name.split("-", 2)[2] for p in (files["out"] / "windows" / "damaged").iterdir()] == [chunk.name]


def test_damaged_chunk_of_retrieve_is_named_and_repaired(files, capsys):
    """retrieve's records hold no NLLs: a chunk whose records do is damaged as well."""
    argv = ["retrieve", *settings(files, "--retriever", "bm25", "--corpus", files["corpus"], "--index-dir",
                                  files["index"], "--chunk-size", "4", "--save-retrieval-file",
                                  str(files["tmp"] / "r.json"))]
    main(argv)
    whole = (files["tmp"] / "r.json").read_text()
    (files["out"] / "eval.json").unlink()
    damage = older(lambda rows: rows[0].update(nlls=[1.5, 2.5, 3.5, 4.5]))
    damage(files["out"] / "windows" / "chunk-00000000-00000004.json.gz")
    fail(capsys, files, argv, "chunk-00000000-00000004.json.gz: window 0 holds 4 NLLs, where the run scores none")
    main([*argv, "--repair"])
    assert (files["tmp"] / "r.json").read_text() == whole


def command_argv(files, command: str) -> list[str]:
    """A valid run of ``command`` of the tiny model, writing to ``out``."""
    bm25 = ["--retriever", "bm25", "--corpus", files["corpus"], "--index-dir", files["index"]]
    questions = write_jsonl(files["tmp"] / "questions.jsonl", [{"question": "who ruled rome", "answers": ["nero"]}])
    return {
        "eval-lm": ["eval-lm", *settings(files)],
        "retrieve": ["retrieve", *settings(files, *bm25, "--save-retrieval-file", str(files["tmp"] / "r.json"))],
        "eval-lm --compare": ["eval-lm", *settings(files, *bm25, "--compare", "none,top1")],
        "eval-qa": ["eval-qa", "--model", files["model"], "--questions", str(questions), *TEST_DEVICE_ARGS,
                    "--output-dir", str(files["out"])],
        "rerank-data": ["rerank-data", "--model", files["model"], *TEST_DEVICE_ARGS, *bm25, "--articles",
                        files["corpus"], "--max-length", "16", "--stride", "4", "--query-length", "8",
                        "--max-doc-tokens", "8", "--rerank-candidates", "2", "--output-dir", str(files["out"])],
    }[command]


@pytest.mark.parametrize("command", ["eval-lm", "retrieve", "eval-lm --compare", "eval-qa", "rerank-data"])
def test_output_dir_with_files_of_others_is_refused_and_kept(files, capsys, command):
    """An --output-dir holding anything but the command's own outputs is refused, naming the folder and what is in
    it, and --overwrite deletes nothing there."""
    argv = command_argv(files, command)
    main(argv)  # the command's own outputs: a rerun (and an overwrite) goes on there
    main([*argv, "--overwrite"] if command != "eval-qa" else argv)
    capsys.readouterr()
    (files["out"] / "eval.json").unlink(missing_ok=True)  # (fail() checks that no eval.json is written)
    own = sorted(p.name for p in files["out"].iterdir())
    (files["out"] / "notes.txt").write_text("mine")
    (files["out"] / "data").mkdir()
    for extra in ([], ["--overwrite"] if command != "eval-qa" else []):
        fail(capsys, files, [*argv, *extra], f"{files['out']} holds files hf-ralm did not write (data, notes.txt)",
             "give a new or empty --output-dir")
    assert sorted(p.name for p in files["out"].iterdir()) == sorted([*own, "data", "notes.txt"])
