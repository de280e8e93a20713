"""Bad input through the Python API (tiny models and corpora): an argument of the wrong type, empty, or holding an item
of the wrong type, and token ids outside the model's vocabulary, are refused before anything runs with hf-ralm's own
error (an ``InputTypeError``, which is a ``TypeError``, or a ``SettingError``, a ``ValueError``), whose one line names
the argument, what was given and what it takes; never a library's "object is not iterable" or "index out of range in
self"."""

from __future__ import annotations

import os

import pytest
import torch

from conftest import MODEL_VOCAB_SIZE
from hf_ralm import RetrievalAugmentedModel
from hf_ralm import errors
from hf_ralm.errors import InputError
from hf_ralm.evaluation.qa import evaluate_qa, exact_match_score
from hf_ralm.metrics.compute import compute_ralm_perplexity

SETTINGS = dict(retrieval_stride=4, query_length=8, max_length=16, max_doc_tokens=12)
OUT_OF_VOCABULARY = f"outside the model's vocabulary of {MODEL_VOCAB_SIZE} ids (0 to {MODEL_VOCAB_SIZE - 1})"


@pytest.fixture()
def ralm(tiny_llama, tiny_tokenizer, tiny_index):
    return RetrievalAugmentedModel.from_pretrained(tiny_llama, tokenizer=tiny_tokenizer,
                                                   retriever=tiny_index["retriever"], **SETTINGS)


def refused(error: type[Exception], call, *expected: str) -> str:
    """The one-line message of ``error`` that ``call()`` raises, holding every ``expected`` part."""
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert isinstance(caught.value, InputError) and "\n" not in message
    for part in expected:
        assert part in message, message
    return message


TEXT_OR_IDS = "text_or_ids takes a text (str) or its token ids (a list of int, or a 1-D tensor)"


@pytest.mark.parametrize("given,error,expected", [
    (None, TypeError, [TEXT_OR_IDS, "got None."]),
    (123, TypeError, [TEXT_OR_IDS, "got an int (123)."]),
    (["the king", "the queen"], TypeError, [TEXT_OR_IDS, "got a list (['the king', 'the queen'])",
                                            "hf_ralm.join_rows(rows)"]),
    ([5, 6.5, 7], TypeError, ["text_or_ids[1] takes a token id (int), got a float (6.5)."]),
    (torch.tensor([[5, 6], [7, 8]]), TypeError, [TEXT_OR_IDS, "got a Tensor of shape (2, 2)", "a single row"]),
    ([], ValueError, ["text_or_ids holds no token ids"]),
    ([5, 6, 999, 7], ValueError, [f"text_or_ids[2] is the token id 999, {OUT_OF_VOCABULARY}"]),
    ([5, -1, 7], ValueError, ["text_or_ids[1] is the token id -1", OUT_OF_VOCABULARY]),
])
def test_evaluate_perplexity_refuses_what_is_no_text_or_ids(ralm, given, error, expected):
    refused(error, lambda: ralm.evaluate_perplexity(given, show_progress=False), *expected)


def test_compare_strategies_refuses_ids_outside_the_vocabulary(ralm):
    refused(ValueError, lambda: ralm.compare_strategies([5, 6, 7, 200], ["none"]),
            f"text_or_ids[3] is the token id 200, {OUT_OF_VOCABULARY}")


PROMPTS = "prompts takes a list of texts (str)"


@pytest.mark.parametrize("given,error,expected", [
    ("The Eiffel Tower is", TypeError, [PROMPTS, "got a str ('The Eiffel Tower is')", "give a list of one, [text]"]),
    (None, TypeError, [PROMPTS, "got None."]),
    ([], ValueError, ["prompts is empty"]),
    ([None], TypeError, ["prompts[0] takes a text (str), got None."]),
    (["the king", 5], TypeError, ["prompts[1] takes a text (str), got an int (5)."]),
])
def test_generate_texts_refuses_what_is_no_list_of_prompts(ralm, given, error, expected):
    refused(error, lambda: ralm.generate_texts(given, max_new_tokens=2), *expected)


INPUTS = "takes text prompts (a str or a list of str) or token ids (a 2-D tensor, a row per prompt)"


@pytest.mark.parametrize("inputs,kwargs,error,expected", [
    (torch.tensor([[5, 6, 999]]), {}, ValueError, [f"inputs[0][2] is the token id 999, {OUT_OF_VOCABULARY}"]),
    (None, {"input_ids": torch.tensor([[5, 6], [7, 130]])}, ValueError,
     [f"input_ids[1][1] is the token id 130, {OUT_OF_VOCABULARY}"]),
    ([], {}, ValueError, ["inputs is empty"]),
    ([None], {}, TypeError, ["inputs " + INPUTS, "got a list ([None])"]),
    ([[5, 6, 7]], {}, TypeError, ["inputs " + INPUTS, "torch.tensor(rows)"]),
    (123, {}, TypeError, ["inputs " + INPUTS, "got an int (123)."]),
    (torch.tensor([5, 6, 7]), {}, TypeError, ["inputs " + INPUTS, "got a Tensor of shape (3,)", "ids[None]"]),
])
def test_generate_refuses_bad_inputs_before_the_model_runs(ralm, inputs, kwargs, error, expected):
    refused(error, lambda: ralm.generate(inputs, max_new_tokens=2, **kwargs), *expected)


@pytest.mark.parametrize("given,error,expected", [
    (torch.tensor([[5, 6, 999, 7]]), ValueError, [f"input_ids[0][2] is the token id 999, {OUT_OF_VOCABULARY}"]),
    (None, TypeError, ["input_ids takes a tensor of token ids", "got None."]),
    ([5, 6, 7], TypeError, ["input_ids takes a tensor of token ids", "got a list ([5, 6, 7])."]),
])
def test_forward_refuses_bad_input_ids(ralm, given, error, expected):
    refused(error, lambda: ralm(given), *expected)


@pytest.mark.parametrize("given", [None, 123])
def test_save_pretrained_refuses_what_is_no_path(ralm, tiny_index, given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(TypeError, lambda: ralm.save_pretrained(given), "save_directory takes a folder's path (a str or an "
            "os.PathLike), got")
    refused(TypeError, lambda: tiny_index["retriever"].save_pretrained(given), "save_directory takes a folder's path")
    assert os.listdir(tmp_path) == []  # no folder named "None" or "123"


@pytest.mark.parametrize("given,expected", [
    (None, "got None."),
    (123, "got an int (123)."),
])
def test_from_pretrained_refuses_what_is_no_model_without_asking_the_hub(given, expected):
    refused(TypeError, lambda: RetrievalAugmentedModel.from_pretrained(given),
            "pretrained_model_name_or_path takes a causal LM's Hub id or folder", expected)


@pytest.mark.parametrize("kwargs,error,expected", [
    ({"retriever": 123}, TypeError, ["retriever takes a retriever's name (none, bm25", "got an int (123)."]),
    ({"retriever": "bm25", "corpus": 123}, TypeError, ["corpus takes a corpus file's path", "got an int (123)."]),
    ({"retriever": "bm25", "corpus": []}, ValueError, ["corpus is an empty list"]),
    ({"retriever": "bm25", "corpus": [None]}, TypeError, ["corpus[0] takes a corpus file's path", "got None."]),
])
def test_from_pretrained_refuses_bad_retriever_arguments(tiny_llama, tiny_tokenizer, tmp_path, kwargs, error,
                                                         expected):
    refused(error, lambda: RetrievalAugmentedModel.from_pretrained(
        tiny_llama, tokenizer=tiny_tokenizer, index_dir=str(tmp_path / "index"), **kwargs), *expected)
    assert not (tmp_path / "index").exists()


QUERIES = "queries takes a list of texts (str)"


@pytest.mark.parametrize("call,error,expected", [
    (lambda r: r.retrieve(None), TypeError, [QUERIES, "got None."]),
    (lambda r: r.retrieve("the king"), TypeError, [QUERIES, "got a str ('the king')", "[text]"]),
    (lambda r: r.retrieve(["the king", None]), TypeError, ["queries[1] takes a text (str), got None."]),
    (lambda r: r.retrieve(["the king"], k=0), ValueError, ["k must be at least 1, got 0."]),
    (lambda r: r.max_scores("the king"), TypeError, [QUERIES, "got a str ('the king')"]),
])
def test_retrieve_refuses_what_is_no_list_of_queries(tiny_index, call, error, expected):
    refused(error, lambda: call(tiny_index["retriever"]), *expected)


@pytest.mark.parametrize("given,error,expected", [
    (None, TypeError, ["predictions takes a list of texts (str), got None."]),
    ([123], TypeError, ["predictions[0] takes a text (str), got an int (123)."]),
    ("the king", TypeError, ["predictions takes a list of texts (str), got a str ('the king')"]),
    ([], ValueError, ["predictions is empty"]),
])
def test_ralm_perplexity_metric_refuses_bad_predictions(tiny_model_dir, monkeypatch, tmp_path, given, error,
                                                        expected):
    import evaluate

    import hf_ralm.metrics

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)
    metric = evaluate.load(hf_ralm.metrics.metric_path("ralm_perplexity"), cache_dir=str(tmp_path))
    refused(error, lambda: metric.compute(predictions=given, model_id=str(tiny_model_dir)), *expected)
    refused(error, lambda: compute_ralm_perplexity(given, str(tiny_model_dir)), *expected)


@pytest.mark.parametrize("predictions,references,error,expected", [
    (None, ["Rome"], TypeError, ["predictions takes a list of texts (str), got None."]),
    (["Rome"], None, TypeError, ["references takes a list with, per prediction, its gold answer", "got None."]),
    (["Rome"], [5], TypeError, ["references[0] takes a gold answer (a str) or answers (a list of str), got an int"]),
    ("Rome", "Rome", TypeError, ["predictions takes a list of texts (str), got a str ('Rome')"]),
])
def test_exact_match_refuses_bad_predictions_and_references(predictions, references, error, expected):
    refused(error, lambda: exact_match_score(predictions, references), *expected)


@pytest.mark.parametrize("examples,error,expected", [
    ("nq-open.jsonl", TypeError, ["examples takes a list of questions", "load_questions(path)"]),
    (None, TypeError, ["examples takes a list of questions", "got None."]),
    ([{"question": "who was the first emperor of rome", "answers": ["augustus"]}, {"answers": ["x"]}], ValueError,
     ["examples[1] has no 'question'"]),
])
def test_evaluate_qa_refuses_what_is_no_list_of_questions(tiny_llama, tiny_tokenizer, examples, error, expected):
    refused(error, lambda: evaluate_qa(tiny_llama, tiny_tokenizer, examples), *expected)


def test_type_errors_are_type_errors_and_input_errors():
    kind = errors.InputTypeError
    assert issubclass(kind, TypeError) and issubclass(kind, errors.SettingError)
    assert issubclass(kind, ValueError)  # as every InputError: what the command line reports in one line
