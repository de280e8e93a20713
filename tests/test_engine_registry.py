"""The reader engine registry (:mod:`hf_ralm.core.engines`): an engine registered from outside the package is a value
of ``engine=`` everywhere at once, in ``from_pretrained``, ``--engine`` (its options as flags) and lm-eval's
``model_args``, and evaluation, ``--compare`` and generation run on its reader as they run on the transformers model
it wraps; a bad engine name or option is refused in one line that lists the registered engines.

The engine here, ``plain-forward``: a stand-in defined in this file, whose reader scores every input with one plain
forward of the tiny random Llama (nothing batched, no keys/values kept) and continues prompts one full forward a
token. Nothing in hf_ralm knows it."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
import torch

from conftest import EVAL_TEXT, TEST_DEVICE_ARGS
from hf_ralm import Engine, Loading, Reader, RetrievalAugmentedModel, engine_names, model_identity, register_engine
from hf_ralm.cli import main
from hf_ralm.core.engines import registry
from hf_ralm.core.engine_generation import generate_on_engine
from hf_ralm.errors import SettingError, setting
from hf_ralm.testing import next_token_logits

NAME = "plain-forward"
SETTINGS = {"retrieval_stride": 4, "query_length": 8, "max_length": 24, "max_doc_tokens": 8}


@dataclasses.dataclass(frozen=True)
class PlainOptions:
    """The stand-in's one option, given by name (a help: a flag, a model_args key), checked here."""

    max_input_length: int = dataclasses.field(default=64, metadata={"help": "the longest input it scores"})

    def __post_init__(self):
        if isinstance(self.max_input_length, bool) or not isinstance(self.max_input_length, int) \
                or self.max_input_length < 2:
            raise SettingError(f"{setting('max_input_length')} must be an integer of at least 2, got "
                               f"{self.max_input_length!r}.")


class PlainReader:
    """A ``hf_ralm.Reader`` that scores each input with one plain forward of ``model`` (float32 softmax, as the
    transformers scorer's) and draws each continuation's tokens one full forward at a time."""

    engine = NAME

    def __init__(self, model, options: PlainOptions):
        self.model, self.options = model, options
        self.config, self.generation_config, self.dtype = model.config, model.generation_config, model.dtype
        self.device, self.max_input_length = torch.device("cpu"), options.max_input_length
        self.calls: Counter = Counter()

    def _scored(self, item) -> tuple[torch.Tensor, bool]:
        """The NLLs of the text's tokens ``ids[first_scored:end]``, each from the input's tokens before it, and
        whether each is the most likely there."""
        start = item.first_scored - item.begin
        with torch.inference_mode():
            logits = self.model(torch.tensor([item.tokens()])).logits[0, start - 1 : item.length - 1].float()
        targets = torch.tensor(list(item.ids[item.first_scored : item.end]))
        log_probs = torch.log_softmax(logits, -1)
        nlls = -log_probs.gather(-1, targets[:, None])[:, 0].double()
        return nlls, bool((logits.argmax(-1) == targets).all())

    def score_inputs(self, inputs):
        self.calls["score_inputs"] += 1
        return [self._scored(item)[0] for item in inputs]

    def score_continuations(self, inputs):
        self.calls["score_continuations"] += 1
        return [(-float(nlls.sum()), greedy) for nlls, greedy in map(self._scored, inputs)]

    def continue_prompts(self, continuations, sampling):
        self.calls["continue_prompts"] += 1
        outputs = []
        for continuation in continuations:
            tokens, new = list(continuation.prompt), []
            while len(new) < continuation.max_tokens and not (new and new[-1] in sampling.eos_token_ids):
                with torch.inference_mode():
                    new.append(int(next_token_logits(self.model, tokens).argmax()))
                tokens.append(new[-1])
            outputs.append(new)
        return outputs

    def generate(self, input_ids=None, attention_mask=None, generation_config=None, **kwargs):
        return generate_on_engine(self, input_ids, attention_mask, generation_config, **kwargs)

    def identity(self):
        return {**model_identity(self.model), "engine": self.engine, "engine_options": dataclasses.asdict(self.options)}


class PlainForward(Engine):
    """The stand-in engine: its name, help, options and loader; its register line is in the fixture below."""

    name = NAME
    help = "a stand-in: one plain forward per input"
    Options = PlainOptions

    def load(self, name_or_path: str, options: PlainOptions, loading: Loading) -> PlainReader:
        from transformers import AutoModelForCausalLM

        return PlainReader(AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch.float32).eval(), options)


@pytest.fixture()
def plain_forward(monkeypatch):
    """``plain-forward`` registered for one test; the table is the built-in one again afterwards."""
    monkeypatch.setattr(registry, "_ENGINES", dict(registry._ENGINES))
    return register_engine(PlainForward())


def ralms(model_dir, retriever, **settings):
    """The tiny Llama as a RALM on the stand-in and on transformers, with ``retriever`` and the settings."""
    on_engine = RetrievalAugmentedModel.from_pretrained(str(model_dir), retriever=retriever, engine=NAME,
                                                        engine_options={"max_input_length": 48},
                                                        **SETTINGS, **settings)
    plain = RetrievalAugmentedModel.from_pretrained(str(model_dir), retriever=retriever, dtype="float32",
                                                    device="cpu", **SETTINGS, **settings)
    return on_engine, plain


def test_the_built_in_engines_are_registry_entries():
    assert engine_names() == ("transformers", "vllm")
    assert [option.name for option in registry.named_options(registry.get_engine("vllm"))] == [
        "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization", "max_model_len", "enforce_eager",
        "kv_cache_memory_bytes", "enable_prefix_caching"]  # dtype is the model's own, extra a mapping
    assert registry.named_options(registry.get_engine("transformers")) == ()


def test_a_registered_engine_loads_its_reader_by_name(plain_forward, tiny_model_dir, tiny_index):
    assert engine_names() == ("transformers", "vllm", NAME)
    on_engine, _ = ralms(tiny_model_dir, tiny_index["retriever"])
    reader = on_engine.language_model
    assert type(reader) is PlainReader and isinstance(reader, Reader) and reader.max_input_length == 48
    assert model_identity(reader)["engine"] == NAME and on_engine.device == torch.device("cpu")
    with pytest.raises(ValueError, match="'plain-forward' is taken"):
        register_engine(type("Other", (PlainForward,), {})())


def test_evaluation_compare_and_generation_run_on_it(plain_forward, tiny_model_dir, tiny_index, tiny_tokenizer):
    """The stand-in's figures are the transformers model's (its reader scores the same inputs, one forward each), for
    evaluation with the reader's own ranking and gate, --compare's rows and greedy generation with its sources."""
    on_engine, plain = ralms(tiny_model_dir, tiny_index["retriever"], rerank="lm", rerank_candidates=2,
                             retrieval_gate="lm", gate_threshold=-1.0)
    got, expected = (ralm.evaluate_perplexity(EVAL_TEXT, show_progress=False) for ralm in (on_engine, plain))
    assert got.figures["nll_sum"] == pytest.approx(expected.figures["nll_sum"], rel=1e-6)
    assert got.chosen == expected.chosen and got.figures["num_windows_with_passage"] > 0
    reader = on_engine.language_model
    assert reader.calls["score_inputs"] > 0 and set(reader.calls) == {"score_inputs"}
    rows, expected_rows = (ralm.compare_strategies(EVAL_TEXT, ["none", "top1", "lm-gate"], show_progress=False).rows
                           for ralm in (on_engine, plain))
    assert [row.nll_sum for row in rows] == pytest.approx([row.nll_sum for row in expected_rows], rel=1e-6)
    assert [row.num_windows_with_passage for row in rows] == [row.num_windows_with_passage for row in expected_rows]
    prompts = ["the emperor of rome and the senate", "the sailor took the boat to the"]
    texts, expected_texts = (ralm.generate_texts(prompts, max_new_tokens=10) for ralm in (on_engine, plain))
    assert [(t.output_ids, t.sources) for t in texts] == [(t.output_ids, t.sources) for t in expected_texts]
    strides = -(-max(len(t.output_ids) for t in texts) // SETTINGS["retrieval_stride"])
    assert any(t.sources for t in texts) and reader.calls["continue_prompts"] == strides  # one engine call a stride


def test_the_command_line_runs_it_by_name(plain_forward, files, tiny_index, capsys, tmp_path, monkeypatch):
    """``--engine plain-forward`` and its option's flag, read from the registry when the parser is made: eval-lm,
    --compare and generate give what the transformers model gives."""
    monkeypatch.setenv("COLUMNS", "1000")
    with pytest.raises(SystemExit):
        main(["eval-lm", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert f"--engine {{transformers,vllm,{NAME}}}" in shown and f"or {NAME} (a stand-in: one plain" in shown
    assert f"--max-input-length MAX_INPUT_LENGTH --engine {NAME}: the longest input it scores" in shown
    common = ["--model", files["model"], "--dataset-path", files["dataset"], "--retriever", "bm25", "--index-dir",
              tiny_index["index_dir"], "--max-length", "24", "--stride", "4", "--query-length", "8",
              "--max-doc-tokens", "8"]
    engine = ["--engine", NAME, "--max-input-length", "48"]
    for name, extra in (("engine", engine), ("plain", TEST_DEVICE_ARGS)):
        main(["eval-lm", *common, *extra, "--output-dir", str(tmp_path / name)])
        main(["eval-lm", *common, *extra, "--compare", "none,top1", "--output-dir", str(tmp_path / f"{name}-compare")])
        main(["generate", "--model", files["model"], "--retriever", "bm25", "--index-dir", tiny_index["index_dir"],
              "--stride", "4", "--query-length", "8", "--max-length", "48", "--max-doc-tokens", "8",
              "--max-new-tokens", "8", "--prompt", "the emperor of rome", *extra,
              "--output-json", str(tmp_path / f"{name}.json")])
    capsys.readouterr()
    figures = [json.loads((tmp_path / name / "eval.json").read_text()) for name in ("engine", "plain")]
    assert figures[0]["token_ppl"] == pytest.approx(figures[1]["token_ppl"], rel=1e-6)
    assert figures[0]["num_windows_with_passage"] == figures[1]["num_windows_with_passage"] > 0
    settings = json.loads((tmp_path / "engine" / "windows" / "settings.json").read_text())
    assert settings["engine"] == NAME and settings["engine_options"] == {"max_input_length": 48}
    compared = [json.loads((tmp_path / f"{name}-compare" / "compare.json").read_text())["rows"]
                for name in ("engine", "plain")]
    assert [row["token_ppl"] for row in compared[0]] == pytest.approx([row["token_ppl"] for row in compared[1]],
                                                                      rel=1e-6)
    generated = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("engine", "plain")]
    assert [record["output_ids"] for record in generated[0]] == [record["output_ids"] for record in generated[1]]


def test_lm_evals_model_args_take_its_options(plain_forward, tiny_model_dir):
    """lm-eval's ``engine=`` and the engine's options as ``model_args``; the evaluator's device is not given to an
    engine that places the model itself."""
    from test_lm_eval import require

    require("lm_eval")
    from hf_ralm.integrations.lm_eval import RalmLM

    lm = RalmLM.create_from_arg_string(f"pretrained={tiny_model_dir},engine={NAME},max_input_length=32",
                                       {"device": "cpu", "batch_size": 8})
    assert type(lm.ralm.language_model) is PlainReader and lm.ralm.language_model.max_input_length == 32
    assert lm.get_model_info()["ralm"]["reader"]["engine_options"] == {"max_input_length": 32}


def test_a_bad_engine_or_option_is_refused_in_one_line_listing_the_engines(plain_forward, tiny_model_dir, files,
                                                                           capsys):
    from conftest import fail

    path = str(tiny_model_dir)
    with pytest.raises(SettingError, match=r"^engine must be one of transformers, vllm, plain-forward, got "
                                           r"'plain-froward'\.$"):
        RetrievalAugmentedModel.from_pretrained(path, engine="plain-froward")
    with pytest.raises(SettingError) as info:
        RetrievalAugmentedModel.from_pretrained(path, engine=NAME, engine_options={"max_input_lenght": 32})
    assert str(info.value) == (
        "max_input_lenght: no option of engine plain-forward nor of another engine; drop it (the engines' options: "
        "transformers: none; vllm: tensor_parallel_size, pipeline_parallel_size, gpu_memory_utilization, "
        "max_model_len, enforce_eager, kv_cache_memory_bytes, enable_prefix_caching; plain-forward: "
        "max_input_length).")
    with pytest.raises(SettingError, match=r"^max_input_length must be an integer of at least 2, got 1\.$"):
        RetrievalAugmentedModel.from_pretrained(path, engine=NAME, engine_options={"max_input_length": 1})
    with pytest.raises(SettingError, match=r"^max_input_length: options of engine plain-forward; give it, or drop it"):
        RetrievalAugmentedModel.from_pretrained(path, engine_options={"max_input_length": 32})
    with pytest.raises(SettingError, match=r"^device: not taken by engine plain-forward, which places and loads"):
        RetrievalAugmentedModel.from_pretrained(path, engine=NAME, device="cpu")
    run = ["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--output-dir", str(files["out"])]
    fail(capsys, files, [*run, "--engine", "plain-froward"],  # argparse quotes the choices in some Pythons
         "argument --engine: invalid choice: 'plain-froward' (choose from ", "transformers", "vllm", NAME)
    fail(capsys, files, [*run, "--max-input-length", "32"],
         "--max-input-length: options of --engine plain-forward; give it, or drop it.")
    fail(capsys, files, [*run, "--engine", NAME, "--max-input-length", "1"],
         "--max-input-length must be an integer of at least 2, got 1.")


def test_what_an_engine_declares_is_checked_when_it_registers(plain_forward):
    @dataclasses.dataclass(frozen=True)
    class Clashing:
        max_model_len: str = dataclasses.field(default="", metadata={"help": "typed otherwise than vllm's"})

    @dataclasses.dataclass(frozen=True)
    class Shadowing:
        retrieval_stride: int = dataclasses.field(default=4, metadata={"help": "a RALM setting's name"})

    for options, problem in ((Clashing, "typed as other engines type it ({'vllm': 'int'})"),
                             (Shadowing, "not named like one of from_pretrained's arguments or a RALM setting")):
        engine = type("Bad", (Engine,), {"name": "bad", "Options": options})()
        with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{")):
            register_engine(engine)
    with pytest.raises(TypeError, match="Options must be a dataclass"):
        register_engine(type("Bad", (Engine,), {"name": "bad", "Options": dict})())
    with pytest.raises(ValueError, match="has no name"):
        register_engine(Engine())
    assert engine_names() == ("transformers", "vllm", NAME)


def test_a_reader_that_lacks_part_of_the_protocol_is_named_with_what_it_lacks(tiny_llama):
    """A reader that scores its inputs itself but lacks the rest of the protocol is refused, naming what it lacks,
    rather than taken for a transformers model and failing further on; a torch module is never an engine's reader."""
    from hf_ralm.core.engines.reader import engine_reader

    half = type("Half", (), {"engine": NAME, "score_inputs": lambda self, inputs: []})()
    with pytest.raises(TypeError, match=r"^Half scores inputs as an engine's reader does, but has no config, "
                                        r"generation_config, dtype, device, max_input_length, score_continuations, "
                                        r"continue_prompts, generate, identity: "):
        engine_reader(half)
    reader = PlainReader(tiny_llama, PlainOptions())
    assert engine_reader(reader) is reader and engine_reader(tiny_llama) is None
    on_engine = RetrievalAugmentedModel(RetrievalAugmentedModel.config_class(), reader)
    assert engine_reader(on_engine) is None  # a RALM forwards its reader's attributes, but runs in this process
