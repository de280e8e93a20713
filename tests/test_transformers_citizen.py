"""A RALM where transformers expects a causal LM: ``GenerationMixin`` and ``pipeline("text-generation")`` (greedy and
sampling, ``max_new_tokens``, ``return_full_text``, stop strings, streamers; the passages behind a pipeline's text),
the Auto classes on a saved folder and on a Hub snapshot (a plain model's loading unchanged), ``dtype="auto"`` as
transformers means it, library messages logged and never printed, and Apple/Intel GPUs chosen by default."""

from __future__ import annotations

import ast
import logging
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationMixin, pipeline
from transformers.generation.streamers import BaseStreamer

from conftest import EVAL_TEXT, ON_TEST_DEVICE, REPO_ROOT, make_tiny_model
from hf_ralm import RetrievalAugmentedModel
from hf_ralm.errors import SettingError

PROMPT = "the emperor of rome and the senate ruled"
NEW_TOKENS = 10
STRIDE = 4
SETTINGS = dict(max_length=32, retrieval_stride=STRIDE, query_length=8, max_doc_tokens=10)


@pytest.fixture(scope="module")
def ralm(tiny_model_dir, tiny_index):
    return RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                   index_dir=tiny_index["index_dir"], **ON_TEST_DEVICE, **SETTINGS)


@pytest.fixture(scope="module")
def generator(ralm):
    return pipeline("text-generation", model=ralm, tokenizer=ralm.tokenizer)


def prompt_ids(ralm, text: str = PROMPT) -> torch.Tensor:
    """The prompt's ids as the text-generation pipeline encodes them (no special tokens)."""
    return ralm.tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids


def greedy(ralm, text: str = PROMPT, **kwargs):
    return ralm.generate(prompt_ids(ralm, text), max_new_tokens=NEW_TOKENS, do_sample=False,
                         return_dict_in_generate=True, **kwargs)


# --------------------------------------------------------------------------------------------------------------
# GenerationMixin and pipeline("text-generation")
# --------------------------------------------------------------------------------------------------------------


def test_the_ralm_is_a_generating_transformers_model(ralm, caplog):
    assert isinstance(ralm, GenerationMixin) and ralm.can_generate()
    # generate() and a pipeline read the reader's own generation config (its special tokens and defaults)
    assert ralm.generation_config is ralm.language_model.generation_config
    with caplog.at_level(logging.ERROR, logger="transformers"):
        pipeline("text-generation", model=ralm, tokenizer=ralm.tokenizer)
    assert not [m for m in caplog.messages if "is not supported for text-generation" in m]  # a registered causal LM


def test_pipeline_greedy_is_generate_with_retrieval_every_stride(ralm, generator):
    expected = greedy(ralm)
    with ralm.collect_sources() as sources:
        out = generator(PROMPT, max_new_tokens=NEW_TOKENS, do_sample=False, return_tensors=True)
    assert out[0]["generated_token_ids"] == expected.sequences[0].tolist()
    assert sources == expected.sources and expected.ralm_stats["strides"] == -(-NEW_TOKENS // STRIDE)
    assert [s["start"] for s in sources[0]] == list(range(0, NEW_TOKENS, STRIDE))  # a passage every s tokens
    assert len({s["id"] for s in sources[0]}) > 1  # re-retrieved: the passage changes as the text grows
    plain = ralm.language_model.generate(prompt_ids(ralm), max_new_tokens=NEW_TOKENS, do_sample=False)
    assert plain[0].tolist() != expected.sequences[0].tolist()  # the passages changed the tokens


def test_pipeline_sampling_is_generate_under_the_same_seed(ralm, generator):
    kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=True, temperature=1.5, top_k=40)
    torch.manual_seed(7)
    expected = ralm.generate(prompt_ids(ralm), **kwargs)[0].tolist()
    torch.manual_seed(7)
    assert generator(PROMPT, return_tensors=True, **kwargs)[0]["generated_token_ids"] == expected
    torch.manual_seed(8)
    assert generator(PROMPT, return_tensors=True, **kwargs)[0]["generated_token_ids"] != expected  # it samples


def test_pipeline_texts_and_streamers(ralm, generator):
    prompt_length = prompt_ids(ralm).shape[1]
    ids = greedy(ralm).sequences[0].tolist()
    new_text = generator(PROMPT, max_new_tokens=NEW_TOKENS, do_sample=False, return_full_text=False)[0]
    # (transformers' pipeline decodes the new tokens alone, or the whole text less the prompt: a leading space)
    assert new_text["generated_text"].strip() == ralm.tokenizer.decode(ids[prompt_length:], skip_special_tokens=True)
    full_text = generator(PROMPT, max_new_tokens=NEW_TOKENS, do_sample=False)[0]["generated_text"]
    assert full_text == PROMPT + new_text["generated_text"]

    class Collect(BaseStreamer):
        def __init__(self):
            self.tokens: list[int] = []
            self.ended = False

        def put(self, value):
            self.tokens += value.reshape(-1).tolist()

        def end(self):
            self.ended = True

    streamer = Collect()
    generator(PROMPT, max_new_tokens=NEW_TOKENS, do_sample=False, streamer=streamer)
    assert streamer.ended and streamer.tokens[-NEW_TOKENS:] == ids[prompt_length:]  # streamed as they came


def char_tokenizer():
    """A character-level WordPiece tokenizer (``the`` is ``t ##h ##e``): stop strings need a tokenizer that spells
    any string, which the word-level tiny tokenizer does not."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from conftest import SPECIAL_TOKENS

    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *letters, *("##" + c for c in letters), ".", ","])}
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>",
                                   unk_token="<unk>", pad_token="<pad>")


def test_pipeline_stop_strings_are_generates(tiny_llama, tiny_index):
    ralm = RetrievalAugmentedModel.from_pretrained(tiny_llama, tokenizer=char_tokenizer(), retriever="bm25",
                                                   index_dir=tiny_index["index_dir"], **SETTINGS)
    generator = pipeline("text-generation", model=ralm, tokenizer=ralm.tokenizer)
    prompt_length = prompt_ids(ralm).shape[1]
    full = greedy(ralm).sequences[0].tolist()
    stop = ralm.tokenizer.decode(full[prompt_length + 2: prompt_length + 4])  # two characters a few tokens in
    stopped = greedy(ralm, stop_strings=[stop]).sequences[0].tolist()
    assert len(stopped) < len(full) and stopped == full[: len(stopped)]
    assert ralm.tokenizer.decode(stopped[prompt_length:]).endswith(stop)
    out = generator(PROMPT, max_new_tokens=NEW_TOKENS, do_sample=False, stop_strings=[stop], return_tensors=True)
    assert out[0]["generated_token_ids"] == stopped


def test_collect_sources_gives_each_prompt_its_passages(ralm, generator):
    prompts = [PROMPT, "the sailor took the ship to the island in a storm"]
    with ralm.collect_sources() as sources, ralm.collect_sources() as inner:
        generator(prompts, max_new_tokens=NEW_TOKENS, do_sample=False)
    assert sources == inner == [greedy(ralm, text).sources[0] for text in prompts]
    assert sources[0] != sources[1] and all(row for row in sources)
    generator(PROMPT, max_new_tokens=2, do_sample=False)  # outside the block: nothing recorded
    assert len(sources) == len(prompts)


# --------------------------------------------------------------------------------------------------------------
# The Auto classes
# --------------------------------------------------------------------------------------------------------------


def same_evaluation(loaded, ralm) -> None:
    expected = ralm.evaluate_perplexity(EVAL_TEXT, show_progress=False)
    got = loaded.evaluate_perplexity(EVAL_TEXT, show_progress=False)
    assert [[p.id for p in w] for w in got.passages] == [[p.id for p in w] for w in expected.passages]
    assert got.figures["token_ppl"] == expected.figures["token_ppl"]


def test_auto_model_loads_a_saved_ralm_and_a_plain_model_as_before(ralm, tiny_model_dir, tmp_path):
    ralm.save_pretrained(tmp_path / "saved", save_index=True)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", **ON_TEST_DEVICE)
    assert type(loaded) is RetrievalAugmentedModel
    assert {k: v for k, v in loaded.config.to_dict().items() if k != "transformers_version"} == \
        {k: v for k, v in ralm.config.to_dict().items() if k != "transformers_version"}
    same_evaluation(loaded, ralm)
    # the RALM settings given to the Auto class apply, as they do to RetrievalAugmentedModel.from_pretrained
    assert AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved"), retrieval_stride=8,
                                                **ON_TEST_DEVICE).config.retrieval_stride == 8
    assert type(AutoModelForCausalLM.from_pretrained(tiny_model_dir)).__name__ == "LlamaForCausalLM"


def test_auto_model_loads_a_ralm_from_a_hub_snapshot_offline(ralm, tmp_path):
    ralm.save_pretrained(tmp_path / "saved", save_index=True)
    repo = tmp_path / "hub-cache" / "models--someone--tiny-ralm"
    shutil.copytree(tmp_path / "saved", repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    loaded = AutoModelForCausalLM.from_pretrained("someone/tiny-ralm", cache_dir=str(tmp_path / "hub-cache"),
                                                  local_files_only=True, **ON_TEST_DEVICE)
    assert type(loaded) is RetrievalAugmentedModel
    # the snapshot's commit named the RALM's repository, never its base model's (a local folder here)
    assert Path(loaded.retriever.index_dir).resolve() == (repo / "snapshots" / "0123abcd" / "index").resolve()
    same_evaluation(loaded, ralm)


# --------------------------------------------------------------------------------------------------------------
# dtype: "auto" is transformers' word, hf-ralm's choice is "device-default"
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bf16_model_dir(tmp_path_factory, tiny_tokenizer):
    path = tmp_path_factory.mktemp("tiny-llama-bf16")
    make_tiny_model("llama").to(torch.bfloat16).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    return path


def test_dtype_auto_is_the_checkpoints_own_and_device_default_is_hf_ralms(bf16_model_dir, files, tmp_path):
    def dtype(**kwargs):
        return RetrievalAugmentedModel.from_pretrained(str(bf16_model_dir), device="cpu", **kwargs).language_model.dtype

    transformers_auto = AutoModelForCausalLM.from_pretrained(bf16_model_dir, dtype="auto").dtype
    assert dtype(dtype="auto") == torch.bfloat16 == transformers_auto  # the checkpoint's own, as transformers loads
    assert dtype() == dtype(dtype="device-default") == torch.float32  # hf-ralm's choice on a CPU, the default
    skeleton = RetrievalAugmentedModel.from_pretrained(str(bf16_model_dir), dtype="auto", load_weights=False)
    assert skeleton.language_model.dtype == torch.bfloat16
    with pytest.raises(SettingError, match="dtype must be one of auto, device-default, bfloat16"):
        dtype(dtype="half")

    import json

    from hf_ralm.cli import main

    main(["eval-lm", "--model", str(bf16_model_dir), "--dataset-path", files["dataset"], "--max-length", "32",
          "--dtype", "auto", "--device", "cpu", "--output-dir", str(tmp_path / "out")])
    settings = json.loads((tmp_path / "out" / "windows" / "settings.json").read_text())  # what the run depends on
    assert settings["dtype"] == "float32"  # the command line's --dtype auto stays hf-ralm's choice for the device


# --------------------------------------------------------------------------------------------------------------
# Library messages: logged, never printed; the command line shows them
# --------------------------------------------------------------------------------------------------------------


def test_library_code_prints_nothing():
    """No ``print`` and no writes to ``sys.stderr``/``sys.stdout`` outside the command line (docstring examples
    aside): a library's messages go through logging, where its user can silence or redirect them."""
    # where a stream is named without writing to the user's output: the progress bars ask whether stderr, tqdm's
    # stream, is a terminal; a worker process (utils/worker_processes.serve) talks to its parent over its own stdio
    allowed = {"src/hf_ralm/utils/progress.py": 1, "src/hf_ralm/utils/worker_processes.py": 3}
    found = []
    for path in sorted((REPO_ROOT / "src" / "hf_ralm").rglob("*.py")):
        if path.relative_to(REPO_ROOT / "src" / "hf_ralm").parts[0] == "cli":  # the command line's own output
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            printed = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
            stream = isinstance(node, ast.Attribute) and node.attr in ("stderr", "stdout") \
                and isinstance(node.value, ast.Name) and node.value.id == "sys"
            if printed or stream:
                found.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    counts = {name: sum(1 for place in found if place.startswith(f"{name}:")) for name in allowed}
    assert counts == allowed, found  # exactly these: one more, elsewhere or there, is a write to check
    assert all(place.split(":")[0] in allowed for place in found), found


def test_index_announcements_are_logged_and_the_command_line_shows_them(files, tmp_path, capsys, caplog):
    from hf_ralm.cli import main
    from hf_ralm.retrieval.bm25 import BM25Retriever

    library = logging.getLogger("hf_ralm")
    before = (library.level, list(library.handlers))
    with caplog.at_level(logging.INFO, logger="hf_ralm"):
        BM25Retriever.build_or_load(files["corpus"], str(tmp_path / "library"))
    assert any(m.startswith("hf-ralm: building the bm25 index of corpus.jsonl") for m in caplog.messages)
    assert "building" not in capsys.readouterr().err  # logged at info: the library's user decides what shows

    main(["index", "--corpus", files["corpus"], "--index-dir", str(tmp_path / "cli")])
    assert f"hf-ralm: building the bm25 index of corpus.jsonl (0.0 MB) in {tmp_path / 'cli'}" \
        in capsys.readouterr().err
    assert (library.level, list(library.handlers)) == before  # the command line left logging as it found it


# --------------------------------------------------------------------------------------------------------------
# Devices: an Apple or Intel GPU is chosen by default, not ignored
# --------------------------------------------------------------------------------------------------------------


def test_default_device_takes_an_intel_or_apple_gpu(monkeypatch, caplog):
    from hf_ralm.core.placement import default_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    assert default_device() == torch.device("xpu") and default_device(1) == torch.device("xpu:1")
    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert default_device() == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert default_device(0) == torch.device("cuda:0")  # CUDA first
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_built", lambda: True)
    with caplog.at_level(logging.WARNING, logger="hf_ralm"):
        assert default_device() == torch.device("cpu")
    assert any("sees no Apple GPU here" in m for m in caplog.messages)  # says why it stays on the CPU


def test_resolve_device_knows_intel_gpus(monkeypatch):
    from hf_ralm.core.placement import resolve_device

    monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    with pytest.raises(SettingError, match=r"device 'xpu': PyTorch sees no Intel GPU \(XPU\) here"):
        resolve_device("xpu")
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 1)
    assert resolve_device("xpu") == torch.device("xpu") and resolve_device("xpu:0") == torch.device("xpu:0")
    with pytest.raises(SettingError, match=r"this machine has 1 Intel GPU \(XPU\)\(s\), xpu:0 to xpu:0"):
        resolve_device("xpu:1")
