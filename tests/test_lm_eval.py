"""lm-evaluation-harness's ``ralm`` model (hf_ralm.integrations.lm_eval), run through lm-eval's real evaluator,
offline, on the local tasks of tests/lm_eval_tasks (the tiny tokenizer's words) and benchmarks/data/lm_eval_tasks
(NQ-open from ../shared/data):

* loglikelihood_rolling is eval-lm: each document's log-likelihood is -(eval-lm's nll_sum on it) plus its first token
  given the prefix token, exactly, with real BM25 retrieval; with the prefix token in the window and no retriever it
  is lm-eval's own hf model where their windows coincide, and on lm-eval's own windows (rolling_windows=lm-eval) it is
  hf's on multi-window documents, with SmolLM2 and Gemma;
* loglikelihood scores each continuation with the context's passage in front (and equals hf without a retriever),
  retrieving with what retrieval_query says, through the gates;
* generate_until is the library's generation, cut at lm-eval's stop strings (and equals hf without a retriever);
* the results' config block holds the RALM's settings and the index's fingerprint; ``hf-ralm lm-eval`` is lm-eval's
  command line with ralm; ``import hf_ralm`` registers ralm lazily and works without lm-eval; the distribution
  declares ralm in lm-eval's entry-point group for model plugins.

They skip when lm-eval (or accelerate, which lm-eval's hf model imports) is missing, unless
``HF_RALM_REQUIRE_LM_EVAL=1`` (CI sets it), where they fail.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
import torch

from _require import require_modules
from conftest import REPO_ROOT, SHARED_DATA, TEST_DEVICE, require_shared_file, write_jsonl

TASKS = REPO_ROOT / "tests" / "lm_eval_tasks"
BENCHMARK_TASKS = REPO_ROOT / "benchmarks" / "data" / "lm_eval_tasks"
WINDOWS = {"max_length": 24, "max_doc_tokens": 16, "retrieval_stride": 4, "query_length": 8}
"""The RALM settings of the tests with retrieval: documents of 32 to 87 tokens get 2 to 16 windows with a passage."""


def require(*modules: str) -> None:
    """Skip unless ``modules`` are installed; with ``HF_RALM_REQUIRE_LM_EVAL`` on (:mod:`_require`), fail instead."""
    require_modules("LM_EVAL", "pip install 'hf-ralm[lm-eval]' accelerate", *modules)


@pytest.fixture(scope="module")
def lm_eval():
    require("lm_eval")
    import lm_eval

    import hf_ralm  # noqa: F401  (registers ralm)

    return lm_eval


@pytest.fixture(scope="module")
def tasks(lm_eval):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=[str(TASKS), str(BENCHMARK_TASKS)], include_defaults=False,
                       metadata={"shared_data": str(SHARED_DATA)})


@pytest.fixture(scope="module")
def hf_model(lm_eval, tiny_model_dir):
    """lm-eval's own hf model on the tiny Llama: ``hf_model(max_length)``."""
    require("accelerate")
    from lm_eval.models.huggingface import HFLM

    return lambda max_length=None: HFLM(pretrained=str(tiny_model_dir), max_length=max_length, dtype="float32",
                                        device=TEST_DEVICE, batch_size=4)


def model_args(tiny_model_dir, **settings) -> str:
    given = {"pretrained": tiny_model_dir, "dtype": "float32", "device": TEST_DEVICE, **settings}
    return ",".join(f"{key}={value}" for key, value in given.items())


def evaluate(lm_eval, tasks, model, names, **options) -> dict:
    return lm_eval.simple_evaluate(model=model, tasks=names, task_manager=tasks, log_samples=True, **options)


def responses(results: dict, task: str) -> list:
    """Each document's responses, in document order: its requests' results (one per choice for multiple choice)."""
    return [[response[0] for response in sample["resps"]]
            for sample in sorted(results["samples"][task], key=lambda sample: sample["doc_id"])]


def rows(name: str) -> list[dict]:
    with open(TASKS / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def eval_lm_nll_sum(capsys, tmp_path, text: str, tiny_model_dir, tiny_index) -> float:
    """``hf-ralm eval-lm``'s nll_sum on ``text`` under :data:`WINDOWS` with the tiny index."""
    from hf_ralm.cli import main

    flags = {"max_length": "--max-length", "max_doc_tokens": "--max-doc-tokens", "retrieval_stride": "--stride",
             "query_length": "--query-length"}
    dataset = write_jsonl(tmp_path / f"doc-{abs(hash(text))}.jsonl", [{"text": text}])
    capsys.readouterr()
    main(["eval-lm", "--model", str(tiny_model_dir), "--dataset-path", str(dataset), "--retriever", "bm25",
          "--corpus", tiny_index["corpus"], "--index-dir", tiny_index["index_dir"], "--dtype", "float32",
          "--device", TEST_DEVICE, *[arg for key, value in WINDOWS.items() for arg in (flags[key], str(value))]])
    return json.loads(capsys.readouterr().out)["nll_sum"]


# ------------------------------------------------------------------------------------------------------------------
# loglikelihood_rolling
# ------------------------------------------------------------------------------------------------------------------


def test_rolling_is_eval_lm_plus_the_first_token(lm_eval, tasks, tiny_model_dir, tiny_index, tiny_llama,
                                                 tiny_tokenizer, capsys, tmp_path):
    from hf_ralm.retrieval.base import retriever_identity

    args = model_args(tiny_model_dir, retriever="bm25", corpus=tiny_index["corpus"],
                      index_dir=tiny_index["index_dir"], **WINDOWS)
    results = evaluate(lm_eval, tasks, "ralm", ["ralm_tiny_rolling"], model_args=args)
    got = [response[0] for response in responses(results, "ralm_tiny_rolling")]
    texts = [row["text"] for row in rows("rolling.jsonl")]
    with torch.no_grad():  # log p(token | BOS): the first token, which eval-lm does not score
        bos = torch.tensor([[tiny_tokenizer.bos_token_id]], device=TEST_DEVICE)
        first = torch.log_softmax(tiny_llama(bos).logits[0, -1], -1)
    for text, value in zip(texts, got):
        first_id = tiny_tokenizer(text, add_special_tokens=False)["input_ids"][0]
        expected = -eval_lm_nll_sum(capsys, tmp_path, text, tiny_model_dir, tiny_index) + float(first[first_id])
        assert value == pytest.approx(expected, rel=1e-6, abs=0)

    # lm-eval's own figures, normalised over the documents by lm-eval's word count
    words = sum(len(re.split(r"\s+", text)) for text in texts)
    word_ppl = results["results"]["ralm_tiny_rolling"]["word_perplexity,none"]
    assert word_ppl == pytest.approx(math.exp(-sum(got) / words), rel=1e-9)
    assert results["results"]["ralm_tiny_rolling"]["bits_per_byte,none"] == pytest.approx(
        -sum(got) / sum(len(text.encode()) for text in texts) / math.log(2), rel=1e-9)

    # the results' config block: the RALM's settings, the index's fingerprint, what retrieval did
    ralm = results["config"]["ralm"]
    assert {key: ralm["settings"][key] for key in WINDOWS} == WINDOWS
    assert ralm["retriever"]["corpus_fingerprint"] == retriever_identity(tiny_index["retriever"])["corpus_fingerprint"]
    assert ralm["retriever"]["corpus_fingerprint"]
    assert results["config"]["model"] == "ralm" and results["config"]["model_dtype"] == "float32"
    requests = ralm["requests"]
    assert requests["rolling_documents"] == 5
    assert 0 < requests["rolling_windows_with_passage"] <= requests["rolling_windows"]


def test_rolling_with_the_prefix_token_in_the_window_is_lm_evals_hf(lm_eval, tasks, tiny_model_dir, hf_model):
    """hf's windows at max_length 16: [BOS, d0..d14] scoring d0..d15, then disjoint 16-token chunks each after one
    token of context, the last with a full context. The RALM's, with BOS as token 0, max_length 17 and stride 16: the
    same for documents of at most 16 tokens or of a multiple of 16 (10, 32 and 48 tokens); those of 41 and 87 tokens
    end with another window."""
    args = model_args(tiny_model_dir, retriever="none", prefix_token_in_window=True, max_length=17,
                      retrieval_stride=16)
    ralm = responses(evaluate(lm_eval, tasks, "ralm", ["ralm_tiny_rolling"], model_args=args), "ralm_tiny_rolling")
    hf = responses(evaluate(lm_eval, tasks, hf_model(16), ["ralm_tiny_rolling"]), "ralm_tiny_rolling")
    lengths = [len(row["text"].split()) for row in rows("rolling.jsonl")]
    coincide = [i for i, n in enumerate(lengths) if n <= 16 or n % 16 == 0]
    assert [lengths[i] for i in coincide] == [10, 32, 48]
    for i in coincide:
        assert ralm[i][0] == pytest.approx(hf[i][0], rel=1e-6)
    assert ralm[3][0] != pytest.approx(hf[3][0], rel=1e-6)  # 41 tokens: its last window starts elsewhere


LIGHTHOUSE = ("The lighthouse at the northern end of the island was built in 1874 from granite quarried on the "
              "mainland and carried across the strait by barge. Its keepers lived in two cottages beside the tower,"
              " and for almost a century they trimmed the wicks, wound the clockwork that turned the lens, and "
              "logged every ship that passed. In winter storms the spray reached the lantern room, sixty metres "
              "above the sea, and the keepers sometimes went weeks without news from the harbour town. The light "
              "was automated in 1968, the cottages were sold, and the lens, a first-order Fresnel lens made in "
              "Paris, now stands in the maritime museum, where visitors can still see the scratches left by a "
              "hundred years of polishing.")
"""A document of about 150 tokens: three windows of lm-eval's at max_length 64, the last with a full context."""


@pytest.mark.integration
@pytest.mark.parametrize("name", ["smollm2-135m-instruct", "gemma-3-270m"])
def test_rolling_on_lm_evals_windows_is_lm_evals_hf(lm_eval, real_model_dir, name):
    """rolling_windows=lm-eval: lm-eval's hf model's log-likelihood of multi-window documents, with SmolLM2 (no BOS
    added) and Gemma (whose tokenizer adds BOS: hf scores [BOS, BOS, text])."""
    require("accelerate")
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from hf_ralm.integrations.lm_eval import RalmLM

    folder = str(real_model_dir(name))
    documents = [LIGHTHOUSE, LIGHTHOUSE[:300]]
    requests = [Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=i)
                for i, text in enumerate(documents)]
    hf = HFLM(pretrained=folder, max_length=64, dtype="float32", device=TEST_DEVICE, batch_size=4)
    expected = hf.loglikelihood_rolling(requests, disable_tqdm=True)
    ralm = RalmLM(folder, retriever="none", rolling_windows="lm-eval", max_length=65, dtype="float32",
                  device=TEST_DEVICE, batch_size=4)
    assert ralm.loglikelihood_rolling(requests, disable_tqdm=True) == pytest.approx(expected, rel=1e-6, abs=0)
    assert ralm.stats.rolling_windows == 3  # windows after each document's first: 2 and 1
    assert (hf.tok_encode(LIGHTHOUSE)[0] == hf.prefix_token_id) == (name == "gemma-3-270m")


# ------------------------------------------------------------------------------------------------------------------
# loglikelihood
# ------------------------------------------------------------------------------------------------------------------


def test_multiple_choice_without_retrieval_is_lm_evals_hf(lm_eval, tasks, tiny_model_dir, hf_model):
    ralm = evaluate(lm_eval, tasks, "ralm", ["ralm_tiny_choice"], model_args=model_args(tiny_model_dir))
    hf = evaluate(lm_eval, tasks, hf_model(), ["ralm_tiny_choice"])
    for ours, theirs in zip(responses(ralm, "ralm_tiny_choice"), responses(hf, "ralm_tiny_choice")):
        assert [logprob for logprob, _ in ours] == pytest.approx([logprob for logprob, _ in theirs], rel=1e-6)
        assert [greedy for _, greedy in ours] == [greedy for _, greedy in theirs]
    assert ralm["results"]["ralm_tiny_choice"]["acc,none"] == hf["results"]["ralm_tiny_choice"]["acc,none"]
    assert isinstance(ralm["results"]["ralm_tiny_choice"]["acc_stderr,none"], float)


class Recorder:
    """A retriever that records the queries it is asked."""

    def __init__(self, retriever):
        self.retriever, self.queries = retriever, []

    def retrieve(self, queries, k=1):
        self.queries += list(queries)
        return self.retriever.retrieve(queries, k=k)


@pytest.fixture()
def built(tiny_llama, tiny_tokenizer, tiny_index):
    """``built(**settings)``: a RetrievalAugmentedModel on the tiny Llama whose BM25 retriever records its queries."""
    from hf_ralm import RalmConfig, RetrievalAugmentedModel

    def build(**settings):
        config = RalmConfig(**{**WINDOWS, **settings})
        return RetrievalAugmentedModel(config, tiny_llama, Recorder(tiny_index["retriever"]), tiny_tokenizer)

    return build


@pytest.mark.parametrize("settings", [{}, {"num_passages": 2, "max_length": 48}], ids=["top-1", "two passages"])
def test_continuation_is_scored_with_the_contexts_passages_in_front(lm_eval, tasks, built, tiny_llama,
                                                                    tiny_tokenizer, settings):
    from hf_ralm.integrations.lm_eval import RalmLM
    from hf_ralm.testing import spec_prefix

    model = built(**settings)
    results = evaluate(lm_eval, tasks, RalmLM(model), ["ralm_tiny_choice"])
    assert results["config"]["ralm"]["requests"]["loglikelihood_contexts"] == 6  # one retrieval per context
    sizes = []
    for row, answers in zip(rows("choices.jsonl"), responses(results, "ralm_tiny_choice")):
        context = tiny_tokenizer(row["context"])["input_ids"]
        query = tiny_tokenizer.decode(context[-WINDOWS["query_length"]:])
        assert query in model.retriever.queries
        found = model.retriever.retriever.retrieve([query], k=model.config.num_passages)[0]
        sizes.append(len(found))
        prefix = spec_prefix(tiny_tokenizer, found, model.config)  # the most relevant nearest the context
        for choice, (logprob, greedy) in zip(row["choices"], answers):
            continuation = tiny_tokenizer(" " + choice, add_special_tokens=False)["input_ids"]
            dropped = max(0, len(prefix) + len(context) + len(continuation) - model.config.max_length)  # make room
            tokens = prefix + context[dropped:] + continuation
            with torch.no_grad():
                inputs = torch.tensor([tokens], device=TEST_DEVICE)
                log_probs = torch.log_softmax(tiny_llama(inputs).logits[0, :-1].float(), -1)
            scored = log_probs[-len(continuation):]
            target = torch.tensor(continuation, device=TEST_DEVICE)
            assert logprob == pytest.approx(float(scored.gather(-1, target[:, None]).sum()), rel=1e-5)
            assert greedy == bool((scored.argmax(-1) == target).all())
    assert max(sizes) == model.config.num_passages  # BM25 finds fewer for some contexts: as many as it finds


def test_retrieval_query_takes_a_document_field(lm_eval, tasks, built):
    from hf_ralm.integrations.lm_eval import RalmLM

    model = built()
    evaluate(lm_eval, tasks, RalmLM(model, retrieval_query="doc:context"), ["ralm_tiny_choice"])
    assert sorted(model.retriever.queries) == sorted(row["context"] for row in rows("choices.jsonl"))
    with pytest.raises(ValueError, match="have no field 'question'"):
        evaluate(lm_eval, tasks, RalmLM(built(), retrieval_query="doc:question"), ["ralm_tiny_choice"])


def test_the_lm_gate_decides_for_each_context(lm_eval, tasks, built):
    """A gate that never opens gives the scores without retrieval; one that always does, those of top-1."""
    from hf_ralm.integrations.lm_eval import RalmLM

    def run(**settings):
        results = evaluate(lm_eval, tasks, RalmLM(built(**settings)), ["ralm_tiny_choice"])
        return responses(results, "ralm_tiny_choice"), results["config"]["ralm"]["requests"]

    closed, requests = run(retrieval_gate="lm", gate_threshold=1e9)
    assert requests["loglikelihood_contexts_with_passage"] == 0
    opened, requests = run(retrieval_gate="lm", gate_threshold=-1e9)
    assert requests["loglikelihood_contexts_with_passage"] == 6
    assert opened == run()[0]
    from hf_ralm import RalmConfig, RetrievalAugmentedModel

    plain = built()
    plain = RetrievalAugmentedModel(RalmConfig(**WINDOWS), plain.language_model, None, plain.tokenizer)
    assert closed == responses(evaluate(lm_eval, tasks, RalmLM(plain), ["ralm_tiny_choice"]), "ralm_tiny_choice")


# ------------------------------------------------------------------------------------------------------------------
# generate_until
# ------------------------------------------------------------------------------------------------------------------


def test_generation_is_ralm_generation_cut_at_the_stop_strings(lm_eval, tasks, built):
    from hf_ralm.integrations.lm_eval import RalmLM

    model = built()
    results = evaluate(lm_eval, tasks, RalmLM(model, batch_size=4), ["ralm_tiny_generate"])
    contexts = [row["context"] for row in rows("choices.jsonl")]
    # each prompt alone, all 12 tokens, cut at the first stop string afterwards
    expected = [model.generate_texts([context], max_new_tokens=12)[0].text.split(".")[0] for context in contexts]
    assert [answers[0] for answers in responses(results, "ralm_tiny_generate")] == expected
    requests = results["config"]["ralm"]["requests"]
    assert requests["generation_prompts"] == 6
    assert 0 < requests["generation_strides_with_passage"] <= requests["generation_strides"]
    assert isinstance(results["results"]["ralm_tiny_generate"]["exact_match_stderr,none"], float)


def test_nq_open_generation_without_retrieval_is_lm_evals_hf(lm_eval, tasks, tiny_model_dir, hf_model):
    """The NQ-open-style task of benchmarks/data/lm_eval_tasks, on the shared data's questions, offline."""
    require_shared_file(SHARED_DATA / "nq-open" / "nq-open-gold-2000.jsonl.gz")
    ralm = evaluate(lm_eval, tasks, "ralm", ["ralm_nq_open_local"], model_args=model_args(tiny_model_dir), limit=3)
    hf = evaluate(lm_eval, tasks, hf_model(), ["ralm_nq_open_local"], limit=3)
    assert responses(ralm, "ralm_nq_open_local") == responses(hf, "ralm_nq_open_local")
    assert [sample["doc"]["question"] for sample in ralm["samples"]["ralm_nq_open_local"]] == [
        "who got the first nobel prize in physics", "when is the next deadpool movie being released",
        "the south west wind blows across nigeria between"]
    metrics = ralm["results"]["ralm_nq_open_local"]
    assert {"exact_match,remove_whitespace", "exact_match_stderr,remove_whitespace"} <= set(metrics)


# ------------------------------------------------------------------------------------------------------------------
# Settings, the command line, the import
# ------------------------------------------------------------------------------------------------------------------


def test_model_args_are_checked(lm_eval, tiny_model_dir, built):
    from hf_ralm.errors import SettingError
    from hf_ralm.integrations.lm_eval import RalmLM

    with pytest.raises(SettingError, match="does not take 'strid'"):
        RalmLM.create_from_arg_string(f"pretrained={tiny_model_dir},strid=4")
    with pytest.raises(SettingError, match="drop retrieval_stride, retriever,"):
        RalmLM(built(), retriever="bm25", retrieval_stride=8)
    with pytest.raises(SettingError, match="retrieval_query must be one of"):
        RalmLM(built(), retrieval_query="question")
    with pytest.raises(SettingError, match="oracle"):
        RalmLM(built(rerank="oracle"))
    with pytest.raises(SettingError, match="rolling_windows must be one of ralm, lm-eval"):
        RalmLM(built(), rolling_windows="hf")
    with pytest.raises(SettingError, match="rolling_windows=lm-eval .* leave no room for a passage"):
        RalmLM(built(), rolling_windows="lm-eval")
    # model_args' device wins over the evaluator's (the command line's default --device)
    lm = RalmLM.create_from_arg_string(f"pretrained={tiny_model_dir},device=cpu,retrieval_stride=8",
                                       {"device": "cuda:0", "batch_size": "auto:4", "max_batch_size": None})
    assert lm.device.type == "cpu" and lm.batch_size == "auto" and lm.ralm.config.retrieval_stride == 8


def test_hf_ralm_lm_eval_is_lm_evals_command_line(lm_eval, tiny_model_dir, tmp_path, capsys):
    from hf_ralm.cli import build_parser, main

    assert "lm-eval" in build_parser().format_help()
    main(["lm-eval", "--tasks", "ralm_tiny_choice", "--include_path", str(TASKS), "--limit", "2",
          "--model_args", f"pretrained={tiny_model_dir},retriever=none,retrieval_stride=8", "--output_path",
          str(tmp_path / "out"), "--log_samples"])
    printed = capsys.readouterr().out
    assert "ralm_tiny_choice" in printed and "acc" in printed
    [results_file] = (tmp_path / "out").glob("**/results_*.json")
    results = json.loads(results_file.read_text())
    assert results["config"]["model"] == "ralm" and results["config"]["batch_size"] == "8"
    assert results["config"]["ralm"]["settings"]["retrieval_stride"] == 8
    assert list((tmp_path / "out").glob("**/samples_ralm_tiny_choice_*.jsonl"))

    with pytest.raises(SystemExit) as info:
        main(["lm-eval", "--tasks", "ralm_tiny_choice", "--include_path", str(TASKS),
              "--model_args", f"pretrained={tiny_model_dir},strid=8"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1].startswith("hf-ralm: error: The ralm model does not take 'strid'")
    assert "Traceback" not in err


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)


def test_import_registers_ralm_without_loading_lm_evals_evaluator(lm_eval):
    done = run_python(
        "import sys, hf_ralm\n"
        "from lm_eval.api.registry import model_registry\n"
        "assert 'ralm' in model_registry\n"
        "loaded = [m for m in ('lm_eval.api.model', 'lm_eval.evaluator', 'lm_eval.models', "
        "'hf_ralm.integrations.lm_eval') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from lm_eval.api.registry import get_model\n"
        "print(get_model('ralm').__module__)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hf_ralm.integrations.lm_eval"


def test_the_distribution_declares_ralm_in_lm_evals_plugin_group(lm_eval):
    """lm-eval's entry-point group for model plugins (``lm_eval.models``, read by the releases after 0.4.13) names
    the ralm model, so that ``lm-eval run --model ralm`` finds it without ``import hf_ralm``; loaded without that
    import, it is the model class."""
    import importlib.metadata

    from hf_ralm import LM_EVAL_MODEL

    [entry] = [entry for entry in importlib.metadata.entry_points(group="lm_eval.models") if entry.name == "ralm"]
    assert entry.value == LM_EVAL_MODEL
    done = run_python("import importlib.metadata, sys\n"
                      "[entry] = importlib.metadata.entry_points(group='lm_eval.models', name='ralm')\n"
                      "assert 'hf_ralm' not in sys.modules\n"
                      "model = entry.load()\n"
                      "from lm_eval.api.model import LM\n"
                      "print(model.__module__, model.__name__, issubclass(model, LM))\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hf_ralm.integrations.lm_eval", "RalmLM", "True"]


def test_without_lm_eval_import_works_and_the_command_names_the_extra():
    done = run_python("import sys\n"
                      "sys.modules['lm_eval'] = None  # as if lm-eval were not installed\n"
                      "import hf_ralm\n"
                      "print(sorted(m for m in sys.modules if m.startswith('lm_eval')))\n"
                      "from hf_ralm.cli import main\n"
                      "main(['lm-eval', '--tasks', 'wikitext'])\n")
    assert done.stdout.strip() == "['lm_eval']"  # only the marker above: nothing of lm-eval was loaded
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == ("hf-ralm: error: The ralm model of lm-evaluation-harness needs "
                                                    "lm-eval, which is not installed: pip install \"hf-ralm[lm-eval]\"")


def test_help_of_the_command_is_lm_evals(lm_eval, capsys):
    from hf_ralm.cli import main

    with pytest.raises(SystemExit) as info:
        main(["lm-eval", "--help"])
    assert info.value.code == 0
    assert "--model_args" in capsys.readouterr().out
