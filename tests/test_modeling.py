"""RetrievalAugmentedModel, RalmConfig and the evaluation pipeline (queries, passages, prefixes, BOS conventions)."""

from __future__ import annotations

import copy
import json
import math
import shutil
import warnings

import pytest
import torch

from conftest import BOS_ID, EVAL_TEXT, MODEL_VOCAB_SIZE, TEST_DEVICE, make_tiny_model, pretend_cpu, write_jsonl
from hf_ralm import RalmConfig, RetrievalAugmentedModel, evaluate_perplexity
from hf_ralm.evaluation.pipeline import evaluate_retrieval
from hf_ralm.core.model_inputs import window_prefixes

from hf_ralm.core.plan import prepare, tokenize_text, window_queries
from hf_ralm.errors import SettingError
from hf_ralm.core.modeling_utils import resolve_max_length
from hf_ralm.testing import reference_window_nlls
from hf_ralm.retrieval import BM25Retriever
from hf_ralm.core.passages import Passage
from hf_ralm.core.windows import plan_windows
from hf_ralm.core.perplexity import count_words

SETTINGS = dict(retrieval_stride=4, query_length=8, max_length=16, max_doc_tokens=12)  # L holds a passage and s


@pytest.fixture()
def ralm(tiny_llama, tiny_tokenizer, tiny_index):
    return RetrievalAugmentedModel.from_pretrained(
        tiny_llama, tokenizer=tiny_tokenizer, retriever="bm25", index_dir=tiny_index["index_dir"],
        corpus=tiny_index["corpus"], **SETTINGS,
    )


def text_ids(tokenizer, text=EVAL_TEXT):
    return tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids


def expected_prefixes(tokenizer, windows, passages, max_doc_tokens=SETTINGS["max_doc_tokens"]):
    """The reference convention, written out: the top passage as ``title + "\\n" + text`` encoded with the
    tokenizer's default special tokens and cut to ``max_doc_tokens``; nothing for window 0 or an empty retrieval."""
    out = []
    for w in windows:
        docs = passages[w.index] if w.index > 0 else []
        if not docs:
            out.append([])
            continue
        title, text = docs[0].title, docs[0].text
        out.append(tokenizer.encode(f"{title}\n{text}" if title else text)[:max_doc_tokens])
    return out


# --------------------------------------------------------------------------------------------------------------
# Wrapping a loaded model
# --------------------------------------------------------------------------------------------------------------


def test_from_pretrained_with_loaded_model(ralm, tiny_llama, tiny_tokenizer, tiny_index):
    assert ralm.language_model is tiny_llama
    assert ralm.tokenizer is tiny_tokenizer
    assert isinstance(ralm.retriever, BM25Retriever)
    assert isinstance(ralm.config, RalmConfig)
    assert ralm.config.model_type == "ralm"
    assert (ralm.config.retrieval_stride, ralm.config.query_length, ralm.config.max_length) == (4, 8, 16)
    assert ralm.config.max_doc_tokens == 12 and not ralm.config.bos_every_window
    assert not hasattr(ralm.config, "num_docs")  # eval-lm and generate retrieve the one passage they use
    assert "retriever" not in ralm.config.to_dict()  # the retriever is saved on its own (retriever_config.json)
    assert ralm.retriever.config()["type"] == "bm25"
    assert not tiny_llama.training


def test_dtype_device_default_follows_the_device(monkeypatch):
    from hf_ralm.errors import SettingError
    from hf_ralm.core.placement import resolve_dtype

    assert resolve_dtype("device-default", "cpu") == torch.float32 and resolve_dtype("float16", "cpu") == torch.float16
    assert resolve_dtype("auto", "cpu") == "auto"  # transformers' word: the checkpoint's own, read while loading
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert resolve_dtype("device-default", "cuda:1") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)  # e.g. a V100
    assert resolve_dtype("device-default", "cuda") == torch.float16
    with pytest.raises(SettingError, match="dtype must be one of auto, device-default, bfloat16, float16, float32, "
                                           "got 'half'"):
        resolve_dtype("half", "cpu")


def test_bfloat16_on_a_cpu_without_bfloat16_instructions_runs_its_products_in_float32(tiny_model_dir, monkeypatch):
    """A reader loaded in bfloat16 on an AVX2 CPU gets widened linear layers: still bfloat16, the same figures as
    PyTorch's own bfloat16 kernels to their rounding; nothing changes where bfloat16 is fast, unknown or not asked, and
    a model the user gives is left as it is."""
    from transformers import AutoModelForCausalLM

    from hf_ralm.utils.cpus import bfloat16_instructions, slow_bfloat16
    from hf_ralm.utils.widened_linear import WidenedLinear

    def widened(model) -> list[bool]:
        return [type(m) is WidenedLinear for m in model.language_model.modules() if isinstance(m, torch.nn.Linear)]

    pretend_cpu(monkeypatch)  # an AVX2 CPU: bfloat16 products take a slow path
    assert bfloat16_instructions() is False and slow_bfloat16(torch.bfloat16, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about any more
        model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), dtype="bfloat16", device="cpu")
    assert widened(model) and all(widened(model)) and model.language_model.dtype == torch.bfloat16
    given = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.bfloat16).eval()
    native = RetrievalAugmentedModel.from_pretrained(given)
    assert not any(widened(native))  # the user's model: PyTorch's own kernels
    ids = torch.randint(0, MODEL_VOCAB_SIZE, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        got, want = (m.language_model(ids).logits for m in (model, native))
    assert got.dtype == torch.bfloat16
    # both add in float32 and round to bfloat16 once per product; a rounding step (2^-8 relative) may differ, and
    # carry through the layers
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -6, atol=2 ** -6)
    torch.testing.assert_close(model.language_model.state_dict(), given.state_dict(), rtol=0, atol=0)

    assert not any(widened(RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), dtype="float32",
                                                                   device="cpu")))
    assert not slow_bfloat16(torch.bfloat16, "meta")
    for machine, avx512_bf16, amx in (("x86_64", True, False), ("AMD64", False, True), ("arm64", False, False)):
        pretend_cpu(monkeypatch, machine, avx512_bf16, amx)
        assert bfloat16_instructions() is (None if machine == "arm64" else True)
        assert not slow_bfloat16(torch.bfloat16, "cpu")
        assert not any(widened(RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), dtype="bfloat16",
                                                                       device="cpu")))


def test_a_widened_linear_layer_is_the_float32_product_rounded_to_bfloat16(monkeypatch):
    import copy
    import pickle

    from hf_ralm.utils import widen_bfloat16_matmuls
    from hf_ralm.utils.widened_linear import WidenedLinear

    torch.manual_seed(0)
    layer, no_bias = torch.nn.Linear(64, 48).to(torch.bfloat16), torch.nn.Linear(64, 8, bias=False).to(torch.bfloat16)

    class Quantized(torch.nn.Linear):  # a subclass has its own forward: left alone
        pass

    model = torch.nn.Sequential(layer, torch.nn.Sequential(no_bias), torch.nn.Linear(8, 8), Quantized(8, 8))
    x = torch.randn(5, 64).to(torch.bfloat16)
    native = layer(x)
    assert widen_bfloat16_matmuls(model) == 2  # the float32 layer and the subclass are not widened
    assert [type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.Linear)] == \
        ["WidenedLinear", "WidenedLinear", "Linear", "Quantized"]
    got = layer(x)
    exact = x.double() @ layer.weight.double().T + layer.bias.double()
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), exact, rtol=2 ** -8, atol=1e-6)  # one bfloat16 rounding of the product
    torch.testing.assert_close(got, native, rtol=2 ** -7, atol=1e-6)  # PyTorch's own kernel, to that rounding
    assert no_bias(x).dtype == torch.bfloat16

    seen = []
    real_linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda i, *a: seen.append(i.dtype) or real_linear(i, *a))
    layer(x)
    layer.to("meta")(x.to("meta"))  # not on the CPU (a model moved to a GPU): PyTorch's own kernel
    assert seen == [torch.float32, torch.bfloat16]
    monkeypatch.undo()

    for copied in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert type(copied) is WidenedLinear and copied.weight.dtype == torch.bfloat16


@pytest.mark.cpu_only(reason="the defaults of a machine without a GPU: float32 on the CPU")
def test_from_pretrained_places_the_model_and_forwards_its_loading_arguments(tiny_model_dir, monkeypatch):
    import hf_ralm.core.engines.transformers as engine
    import hf_ralm.core.placement as placement

    plain = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir))
    assert plain.language_model.dtype == torch.float32 and plain.language_model.device.type == "cpu"  # no GPU here
    chosen = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), dtype="bfloat16",
                                                     attn_implementation="eager")
    assert chosen.language_model.dtype == torch.bfloat16
    assert chosen.language_model.config._attn_implementation == "eager"
    assert RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), torch_dtype=torch.float16).dtype == \
        torch.float16
    loads = []
    load = engine._load_base_model
    monkeypatch.setattr(engine, "_load_base_model", lambda *args: loads.append(args[2]) or load(*args))
    mapped = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), device_map="cpu")  # accelerate places it
    assert loads[-1] == {"device_map": "cpu", "dtype": torch.float32} and mapped.language_model.device.type == "cpu"
    with pytest.raises(ValueError, match="Give device or device_map, not both"):
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), device="cpu", device_map="cpu")
    # where a GPU is, the model goes there by default: here the default device is made "meta" to see it move
    monkeypatch.setattr(placement, "default_device", lambda local_rank=None: torch.device("meta"))
    assert RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir)).language_model.device.type == "meta"


def test_forward_loss_is_mean_of_scored_token_nlls(ralm, tiny_tokenizer):
    ids = text_ids(tiny_tokenizer)
    n = ids.shape[1]
    out = ralm(ids)
    assert out.token_nlls.shape == (1, n) and out.token_windows.shape == (1, n)
    nll = out.token_nlls[0]
    assert math.isnan(nll[0]) and torch.isfinite(nll[1:]).all()
    assert out.loss.item() == pytest.approx(nll[1:].double().mean().item(), rel=1e-6)
    assert out.loss.item() == pytest.approx(torch.nanmean(out.token_nlls).item(), rel=1e-6)

    windows = plan_windows(n, 16, 4)
    # token_windows: the window that scored each token
    assert out.token_windows[0, 0].item() == -1
    for w in windows:
        assert (out.token_windows[0, w.score_begin : w.end] == w.index).all()
    # passages: one list per window; window 0 never retrieves; the tiny text matches the corpus, so others do
    [passages] = out.passages
    assert len(passages) == len(windows)
    assert passages[0] == []
    assert sum(1 for p in passages[1:] if p) >= len(windows) // 2
    assert all(isinstance(p, Passage) for docs in passages for p in docs)
    # the passage in context of token t is passages[token_windows[t]][0]
    t = windows[3].score_begin
    assert out.passages[0][out.token_windows[0, t]] == passages[3]


def test_forward_equals_reference_with_the_retrieved_passages(ralm, tiny_llama, tiny_tokenizer, tiny_index):
    """The whole pipeline against the reference loop fed with passages retrieved here, independently."""
    ids = text_ids(tiny_tokenizer)[0].tolist()
    windows = plan_windows(len(ids), 16, 4)
    retriever = tiny_index["retriever"]
    passages = [[]]
    for w in windows[1:]:
        query = tiny_tokenizer.decode(ids[max(0, w.prev_end - 8) : w.prev_end])
        passages.append(retriever.retrieve([query], k=1)[0])
    prefixes = expected_prefixes(tiny_tokenizer, windows, passages)
    assert any(prefixes[1:]) and not prefixes[0]
    ref = reference_window_nlls(tiny_llama, ids, windows, prefixes)
    out = ralm(torch.tensor([ids]))
    assert [[p.id for p in docs] for docs in out.passages[0]] == [[p.id for p in docs] for docs in passages]
    assert (out.token_nlls[0, 1:].double() - ref[1:]).abs().max().item() < 1e-4
    # retrieval changes the scores (the passages are really in context)
    plain = reference_window_nlls(tiny_llama, ids, windows, [[] for _ in windows])
    assert (plain[1:] - ref[1:]).abs().max().item() > 1e-2


def out_row0_loss(single_long) -> float:
    """The mean NLL of the 40-token row without tokens 30..34 (ignored through labels)."""
    nll = single_long.token_nlls[0]
    return torch.cat([nll[1:30], nll[35:]]).double().mean().item()


def test_forward_batch_with_padding_and_labels(ralm, tiny_tokenizer):
    ids = text_ids(tiny_tokenizer)[0]
    long_row, short_len = ids[:40], 25
    batch = torch.stack([long_row, torch.cat([ids[:short_len], torch.zeros(40 - short_len, dtype=torch.long)])])
    mask = torch.ones_like(batch)
    mask[1, short_len:] = 0
    labels = batch.clone()
    labels[0, 30:35] = -100
    out = ralm(batch, attention_mask=mask, labels=labels)
    single_long = ralm(long_row[None])
    single_short = ralm(ids[:short_len][None])
    # each row is evaluated alone; padding and ignored labels are not scored
    assert torch.allclose(out.token_nlls[1, :short_len], single_short.token_nlls[0], equal_nan=True)
    assert torch.isnan(out.token_nlls[1, short_len:]).all()
    assert (out.token_windows[1, short_len:] == -1).all()
    assert torch.isnan(out.token_nlls[0, 30:35]).all()
    kept = torch.cat([single_long.token_nlls[0, 1:30], single_long.token_nlls[0, 35:], single_short.token_nlls[0, 1:]])
    assert out.loss.item() == pytest.approx(kept.double().mean().item(), rel=1e-6)
    assert len(out.passages) == 2
    # a 1-D input is one row, and so are a 1-D mask and 1-D labels
    assert ralm(long_row).loss.item() == pytest.approx(single_long.loss.item(), rel=1e-6)
    mask_1d = torch.ones_like(long_row)
    mask_1d[30:] = 0
    masked = ralm(long_row, attention_mask=mask_1d)
    assert masked.loss.item() == pytest.approx(ralm(long_row[None, :30]).loss.item(), rel=1e-6)
    assert torch.isnan(masked.token_nlls[0, 30:]).all() and torch.isfinite(masked.token_nlls[0, 1:30]).all()
    labels_1d = long_row.clone()
    labels_1d[30:35] = -100
    assert ralm(long_row, labels=labels_1d).loss.item() == pytest.approx(out_row0_loss(single_long), rel=1e-6)


def test_forward_rejects_labels_that_are_not_the_text(ralm, tiny_tokenizer):
    ids = text_ids(tiny_tokenizer)[:, :20]
    labels = ids.clone()
    labels[0, 5] = (labels[0, 5] + 1) % 50
    with pytest.raises(ValueError, match="labels must equal input_ids"):
        ralm(ids, labels=labels)


def test_forward_refuses_arguments_it_does_not_take(ralm, tiny_tokenizer):
    """A causal LM's other arguments would shape one forward of the base model, which RALM does not run: each is
    refused by name, with what forward takes, before anything is scored (none dropped silently)."""
    ids = text_ids(tiny_tokenizer)[:, :20]
    with pytest.raises(TypeError) as raised:
        ralm(ids, use_cache=False, position_ids=ids)
    assert str(raised.value) == ("RetrievalAugmentedModel.forward() does not take position_ids, use_cache: it scores "
                                 "each row with retrieval and takes input_ids, attention_mask, labels, "
                                 "retrieval_file, batch_size, show_progress.")
    assert ralm.accepts_loss_kwargs is False  # so a Trainer passes it no num_items_in_batch


def test_weights_are_not_reinitialised(tiny_tokenizer, tiny_index):
    model = make_tiny_model("llama", seed=3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    wrapped = RetrievalAugmentedModel.from_pretrained(model, tokenizer=tiny_tokenizer, retriever="none", **SETTINGS)
    wrapped(text_ids(tiny_tokenizer)[:, :30])
    after = wrapped.language_model.state_dict()
    assert before.keys() == after.keys()
    for k in before:
        assert torch.equal(before[k], after[k]), k
    # the wrapper owns no parameters of its own
    assert {id(p) for p in wrapped.parameters()} == {id(p) for p in model.parameters()}


def test_attribute_forwarding(ralm, tiny_llama):
    assert ralm.device == tiny_llama.device and ralm.device.type == torch.device(TEST_DEVICE).type
    assert ralm.language_model.config.model_type == "llama"
    assert ralm.language_model.config.hidden_size == 32
    assert ralm.config.model_type == "ralm"  # the wrapper's own config is not forwarded
    # unknown attributes are looked up on the wrapped model
    assert ralm.lm_head is tiny_llama.lm_head
    assert ralm.model is tiny_llama.model
    assert ralm.generation_config is tiny_llama.generation_config
    with pytest.raises(AttributeError):
        ralm.no_such_attribute_anywhere


def test_config_overrides_and_other_retrievers(tiny_llama, tiny_tokenizer, tiny_index, tmp_path):
    forbidden = tmp_path / "forbidden.txt"
    forbidden.write_text("Rome\nMusic\n")
    model = RetrievalAugmentedModel.from_pretrained(
        tiny_llama, tokenizer=tiny_tokenizer, retriever="bm25", index_dir=tiny_index["index_dir"],
        forbidden_titles=str(forbidden), retrieval_stride=2, query_length=3, max_length=10, max_doc_tokens=5,
        bos_every_window=True, passage_template="{title}: {text}",
    )
    c = model.config
    assert (c.retrieval_stride, c.query_length, c.max_length, c.max_doc_tokens) == (2, 3, 10, 5)
    assert c.bos_every_window and c.passage_template == "{title}: {text}"
    assert model.retriever.config()["forbidden_titles"] == ["Music", "Rome"]
    assert model.retriever.retrieve(["emperor senate augustus"], k=1) == [[]]

    # a custom retriever object is used as is and not saved
    class Fixed:
        def retrieve(self, queries, k=1):
            return [[Passage("p", "Fixed", "the king")] for _ in queries]

    custom = RetrievalAugmentedModel.from_pretrained(tiny_llama, tokenizer=tiny_tokenizer, retriever=Fixed())
    assert isinstance(custom.retriever, Fixed)
    custom.save_pretrained(tmp_path / "custom")
    assert sorted(p.name for p in (tmp_path / "custom").iterdir()) == ["README.md", "config.json"]
    none = RetrievalAugmentedModel.from_pretrained(tiny_llama, tokenizer=tiny_tokenizer)
    assert none.retriever is None
    none.save_pretrained(tmp_path / "none")
    assert sorted(p.name for p in (tmp_path / "none").iterdir()) == ["README.md", "config.json"]
    assert none.config.retrieval_stride == 4 and none.config.query_length == 32  # the paper's defaults


def test_invalid_config_raises():
    with pytest.raises(ValueError, match=r"^retrieval_stride must be at least 1, got 0"):
        RalmConfig(retrieval_stride=0)
    with pytest.raises(ValueError, match=r"^query_length must be at least 1"):
        RalmConfig(query_length=0)
    with pytest.raises(ValueError, match=r"^max_length \(4\) must be larger than retrieval_stride \(4\)"):
        RalmConfig(max_length=4, retrieval_stride=4)
    assert RalmConfig(max_length=5, retrieval_stride=4, max_doc_tokens=1).max_length == 5


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"retrieval_stride": -3}, "retrieval_stride must be at least 1, got -3."),
        ({"retrieval_stride": 2.5}, "retrieval_stride must be an integer, got 2.5."),
        ({"query_length": 0}, "query_length must be at least 1, got 0."),
        ({"max_doc_tokens": 0}, "max_doc_tokens must be at least 1, got 0."),
        ({"max_length": 0}, "max_length must be at least 1, got 0."),
        ({"max_length": 3}, "max_length (3) must be larger than retrieval_stride (4), or windows would skip tokens: "
                            "lower retrieval_stride or raise max_length."),
        ({"bos_every_window": "yes"}, "bos_every_window must be bool, got 'yes'."),
        ({"passage_template": None}, "passage_template must be str, got None."),
        ({"base_model_name_or_path": 7}, "base_model_name_or_path must be str or None, got 7."),
    ],
)
def test_validate_names_the_argument(settings, message):
    """Each setting's error names the Python argument (the command line turns it into its flag)."""
    with pytest.raises(ValueError) as info:
        RalmConfig(**settings)
    assert str(info.value) == message
    config = RalmConfig()
    config.validate()
    for name, value in settings.items():
        setattr(config, name, value)  # set after construction: validate() (and save_pretrained) still catch it
    with pytest.raises(ValueError) as info:
        config.validate()
    assert str(info.value) == message


def test_query_length_defaults_to_the_retrievers():
    """``query_length=None`` (the default) is the retriever's: 32 for sparse retrieval and none, 64 for dense."""
    config = RalmConfig()
    assert config.query_length is None
    kinds = ("bm25", "lucene", None, "dense", "hybrid")
    assert [config.query_length_for(kind) for kind in kinds] == [32, 32, 32, 64, 64]
    assert config.query_length_for(BM25Retriever) == 32  # a retriever (its name) works as its kind
    assert RalmConfig(query_length=8).query_length_for("dense") == 8


def test_saved_config_with_num_docs_still_loads(tiny_model_dir, tmp_path):
    """``num_docs`` is no setting any more: a config.json saved with it loads, and the key is dropped."""
    RalmConfig(base_model_name_or_path=str(tiny_model_dir), retrieval_stride=8).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "num_docs": 3}))
    config = RalmConfig.from_pretrained(tmp_path)
    assert config.retrieval_stride == 8 and not hasattr(config, "num_docs")
    model = RetrievalAugmentedModel.from_pretrained(str(tmp_path))
    assert model.config.retrieval_stride == 8 and not hasattr(model.config, "num_docs")
    assert "num_docs" not in model.config.to_dict()


def test_invalid_settings_through_from_pretrained(tiny_llama, tiny_tokenizer):
    with pytest.raises(Exception, match="retrieval_stride"):
        RetrievalAugmentedModel.from_pretrained(tiny_llama, tokenizer=tiny_tokenizer, retrieval_stride=0)


# --------------------------------------------------------------------------------------------------------------
# save_pretrained / from_pretrained(saved folder)
# --------------------------------------------------------------------------------------------------------------


def test_save_and_reload(tiny_model_dir, tiny_index, tmp_path):
    first = RetrievalAugmentedModel.from_pretrained(
        str(tiny_model_dir), retriever="bm25", index_dir=tiny_index["index_dir"], corpus=tiny_index["corpus"],
        **SETTINGS,
    )
    assert first.config.base_model_name_or_path == str(tiny_model_dir)
    ids = text_ids(first.tokenizer)
    loss = first(ids).loss.item()

    saved = tmp_path / "my-ralm"
    first.save_pretrained(saved)
    # no weights, no tokenizer, no index (save_index=False)
    assert sorted(p.name for p in saved.iterdir()) == ["README.md", "config.json", "retriever_config.json"]
    written = json.loads((saved / "config.json").read_text())
    assert written["model_type"] == "ralm"
    assert written["base_model_name_or_path"] == str(tiny_model_dir)
    assert "retriever" not in written
    written_retriever = json.loads((saved / "retriever_config.json").read_text())
    assert written_retriever["type"] == "bm25"
    assert written_retriever["index_dir"] == first.retriever.config()["index_dir"]  # outside the folder: absolute
    assert (written["retrieval_stride"], written["query_length"], written["max_length"]) == (4, 8, 16)

    # followed on this machine, where it is still the index it was saved with (tests/test_saved_folders.py)
    assert RetrievalAugmentedModel.from_pretrained(str(saved)).retriever.config() == first.retriever.config()
    again = RetrievalAugmentedModel.from_pretrained(str(saved), index_dir=tiny_index["index_dir"])
    assert isinstance(again.retriever, BM25Retriever)
    assert again.retriever.config() == first.retriever.config()
    assert again.config.base_model_name_or_path == str(tiny_model_dir)
    for k, v in first.language_model.state_dict().items():
        assert torch.equal(v, again.language_model.state_dict()[k]), k
    out = again(ids)
    assert out.loss.item() == pytest.approx(loss, abs=1e-6)
    assert [[p.id for p in d] for d in out.passages[0]] == [[p.id for p in d] for d in first(ids).passages[0]]

    # saved settings can be overridden at load time
    other = RetrievalAugmentedModel.from_pretrained(str(saved), index_dir=tiny_index["index_dir"], retrieval_stride=2)
    assert other.config.retrieval_stride == 2 and other.config.query_length == 8
    assert other(ids).loss.item() != pytest.approx(loss, abs=1e-6)


SMALL_CORPUS = [
    {"id": "r1", "title": "Rome", "text": "the emperor and the senate ruled the empire of rome with the army"},
    {"id": "s1", "title": "Sailing", "text": "the sailor took the ship from the harbour to the island"},
    {"id": "k1", "title": "Kingdom", "text": "the king and the queen sat on the throne in the castle"},
]


def test_save_index_and_move_the_folder(tiny_model_dir, tmp_path):
    """A folder saved with save_index=True holds the index and records it relatively: it works once moved, with the
    original index gone."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", SMALL_CORPUS)
    first = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                    index_dir=str(tmp_path / "index"), corpus=str(corpus), **SETTINGS)
    ids = text_ids(first.tokenizer)
    out = first(ids)
    assert any(out.passages[0][1:])

    saved = tmp_path / "my-ralm"
    first.save_pretrained(saved, save_index=True)
    assert sorted(p.name for p in saved.iterdir()) == ["README.md", "config.json", "index", "retriever_config.json"]
    assert json.loads((saved / "retriever_config.json").read_text())["index_dir"] == "index"
    moved = tmp_path / "elsewhere" / "my-ralm"
    shutil.move(str(saved), str(moved))
    shutil.rmtree(tmp_path / "index")

    again = RetrievalAugmentedModel.from_pretrained(str(moved))
    assert again.retriever.index_dir == str(moved / "index")
    again_out = again(ids)
    assert again_out.loss.item() == pytest.approx(out.loss.item(), abs=1e-6)
    assert again_out.passages == out.passages
    # saved settings can be replaced at load time: here the forbidden titles
    strict = RetrievalAugmentedModel.from_pretrained(str(moved), forbidden_titles=["Rome", "Sailing", "Kingdom"])
    assert strict.retriever.forbidden_titles == {"Rome", "Sailing", "Kingdom"}
    assert not any(strict(ids).passages[0])


def test_folder_saved_with_the_retriever_in_config_json(tiny_model_dir, tiny_index, tmp_path):
    """Folders saved before retriever_config.json held the retriever's description in config.json: they load, their
    index folder (an absolute path) given as any index outside a saved folder is."""
    first = RetrievalAugmentedModel.from_pretrained(
        str(tiny_model_dir), retriever="bm25", index_dir=tiny_index["index_dir"], forbidden_titles=["Music"],
        **SETTINGS)
    saved = tmp_path / "old-ralm"
    first.save_pretrained(saved)
    (saved / "retriever_config.json").unlink()
    written = json.loads((saved / "config.json").read_text())
    (saved / "config.json").write_text(json.dumps({**written, "retriever": first.retriever.config()}))

    with pytest.raises(ValueError, match="config.json: its index_dir .* leads outside"):
        RetrievalAugmentedModel.from_pretrained(str(saved))
    again = RetrievalAugmentedModel.from_pretrained(str(saved), index_dir=tiny_index["index_dir"])
    assert isinstance(again.retriever, BM25Retriever) and again.retriever.config() == first.retriever.config()
    assert "retriever" not in again.config.to_dict()
    ids = text_ids(first.tokenizer)
    assert again(ids).loss.item() == pytest.approx(first(ids).loss.item(), abs=1e-6)
    again.save_pretrained(saved)  # saved again: the new form
    assert "retriever" not in json.loads((saved / "config.json").read_text())
    written = json.loads((saved / "retriever_config.json").read_text())  # and its outside index's identity
    assert {k: v for k, v in written.items() if k != "index_identity"} == first.retriever.config()


def test_save_without_retriever_removes_a_stale_retriever_config(tiny_llama, tiny_tokenizer, tiny_index, tmp_path):
    with_bm25 = RetrievalAugmentedModel.from_pretrained(tiny_llama, tokenizer=tiny_tokenizer, retriever="bm25",
                                                        index_dir=tiny_index["index_dir"])
    with_bm25.save_pretrained(tmp_path)
    assert (tmp_path / "retriever_config.json").exists()
    RetrievalAugmentedModel.from_pretrained(tiny_llama, tokenizer=tiny_tokenizer).save_pretrained(tmp_path)
    assert not (tmp_path / "retriever_config.json").exists()


def test_from_pretrained_unknown_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-model' does not exist: give a model folder"):
        RetrievalAugmentedModel.from_pretrained(str(tmp_path / "no-such-model"))  # never asked of the Hub
    with pytest.raises(OSError, match="Could not load the causal LM 'someone/no-such-model'.* Set HF_HUB_OFFLINE=1"):
        RetrievalAugmentedModel.from_pretrained("someone/no-such-model", local_files_only=True)


def test_saved_config_without_base_model(tmp_path):
    RalmConfig(retrieval_stride=4).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="without base_model_name_or_path"):
        RetrievalAugmentedModel.from_pretrained(str(tmp_path))


# --------------------------------------------------------------------------------------------------------------
# Queries, prefixes and BOS conventions
# --------------------------------------------------------------------------------------------------------------


PASSAGE = Passage("7", "Rome", "the emperor and the senate of rome", 2.0)


def _windows_and_passages():
    windows = plan_windows(40, 12, 4)
    passages = [[PASSAGE]] + [[PASSAGE] if w.index % 2 else [] for w in windows[1:]]  # window 0's is ignored
    return windows, passages


def test_default_prefixes_plain_tokenizer(tiny_tokenizer):
    windows, passages = _windows_and_passages()
    prefixes = window_prefixes(tiny_tokenizer, windows, passages, RalmConfig())
    encoded = tiny_tokenizer.encode("Rome\nthe emperor and the senate of rome")
    assert encoded[0] != BOS_ID  # this tokenizer adds no special tokens
    assert prefixes[0] == []  # window 0: no retrieval, no BOS
    for w in windows[1:]:
        assert prefixes[w.index] == (encoded if w.index % 2 else [])


def test_default_prefixes_bos_tokenizer(tiny_bos_tokenizer):
    """The reference convention: the passage is encoded with the tokenizer's default special tokens (so a Gemma-like
    tokenizer gives it a BOS) while windows without a passage get no BOS."""
    windows, passages = _windows_and_passages()
    prefixes = window_prefixes(tiny_bos_tokenizer, windows, passages, RalmConfig())
    assert prefixes[0] == []
    for w in windows[1:]:
        if w.index % 2:
            assert prefixes[w.index][0] == BOS_ID
            assert prefixes[w.index].count(BOS_ID) == 1
            assert prefixes[w.index][1:] == tiny_bos_tokenizer("Rome\nthe emperor and the senate of rome",
                                                               add_special_tokens=False)["input_ids"]
        else:
            assert prefixes[w.index] == []


@pytest.mark.parametrize("bos_tokenizer", [False, True])
def test_bos_every_window_prefixes(tiny_tokenizer, tiny_bos_tokenizer, bos_tokenizer):
    tokenizer = tiny_bos_tokenizer if bos_tokenizer else tiny_tokenizer
    windows, passages = _windows_and_passages()
    prefixes = window_prefixes(tokenizer, windows, passages, RalmConfig(bos_every_window=True))
    body = tokenizer("Rome\nthe emperor and the senate of rome", add_special_tokens=False)["input_ids"]
    assert prefixes[0] == [BOS_ID]
    for w in windows[1:]:
        # a BOS at position 0 of every window, never two
        assert prefixes[w.index] == ([BOS_ID] + body if w.index % 2 else [BOS_ID])


@pytest.mark.parametrize("bos_every_window", [False, True])
@pytest.mark.parametrize("bos_tokenizer", [False, True])
def test_max_doc_tokens(tiny_tokenizer, tiny_bos_tokenizer, bos_every_window, bos_tokenizer):
    tokenizer = tiny_bos_tokenizer if bos_tokenizer else tiny_tokenizer
    windows, passages = _windows_and_passages()
    config = RalmConfig(max_doc_tokens=4, bos_every_window=bos_every_window)
    prefixes = window_prefixes(tokenizer, windows, passages, config)
    full = tokenizer.encode("Rome\nthe emperor and the senate of rome")
    with_bos = bos_tokenizer or bos_every_window
    body = tokenizer("Rome\nthe emperor and the senate of rome", add_special_tokens=False)["input_ids"]
    expected = ([BOS_ID] + body)[:4] if with_bos else full[:4]
    assert prefixes[1] == expected
    assert all(len(p) <= 4 for p in prefixes)


def test_passage_without_title_and_custom_template(tiny_tokenizer):
    windows = plan_windows(16, 10, 4)
    assert len(windows) == 3
    passages = [[], [Passage("1", "", "the king", 1.0)], [Passage("2", "Music", "the band", 1.0)]]
    config = RalmConfig(passage_template="{title} , {text}")
    prefixes = window_prefixes(tiny_tokenizer, windows, passages, config)
    assert prefixes[1] == tiny_tokenizer.encode("the king")
    assert prefixes[2] == tiny_tokenizer.encode("Music , the band")


def test_evaluate_perplexity_bos_every_window(tiny_llama, tiny_tokenizer, tiny_bos_tokenizer):
    """bos_every_window gives windows without a passage a BOS at position 0, and it is what the model is fed."""
    class EveryOther:
        def retrieve(self, queries, k=1):
            return [[PASSAGE] if i % 2 else [] for i, _ in enumerate(queries)]

    ids = text_ids(tiny_tokenizer)[0, :60].tolist()
    for tokenizer in (tiny_tokenizer, tiny_bos_tokenizer):
        config = RalmConfig(bos_every_window=True, **SETTINGS)
        result = evaluate_perplexity(tiny_llama, tokenizer, ids, EveryOther(), config, show_progress=False)
        prefixes = window_prefixes(tokenizer, result.windows, result.passages, config)
        assert all(p[0] == BOS_ID for p in prefixes)
        assert any(not docs for docs in result.passages[1:]) and any(result.passages[1:])
        for w in result.windows:
            if not result.passages[w.index] or w.index == 0:
                assert prefixes[w.index] == [BOS_ID]
        ref = reference_window_nlls(tiny_llama, ids, result.windows, prefixes)
        assert (result.token_nlls[1:] - ref[1:]).abs().max().item() < 1e-4

        default = evaluate_perplexity(tiny_llama, tokenizer, ids, EveryOther(), RalmConfig(**SETTINGS),
                                      show_progress=False)
        default_prefixes = window_prefixes(tokenizer, default.windows, default.passages, RalmConfig(**SETTINGS))
        assert default_prefixes[0] == [] and all(p == [] for p, d in zip(default_prefixes, default.passages) if not d)
        # window 0 differs only by the BOS
        w0 = default.windows[0]
        assert not torch.allclose(default.token_nlls[1 : w0.end], result.token_nlls[1 : w0.end])


def test_evaluate_perplexity_default_convention_equals_reference(tiny_llama, tiny_bos_tokenizer, tiny_index):
    tokenizer = tiny_bos_tokenizer
    config = RalmConfig(**SETTINGS)
    result = evaluate_perplexity(tiny_llama, tokenizer, EVAL_TEXT, tiny_index["retriever"], config,
                                 show_progress=False, batch_size=3)
    ids = tokenizer(EVAL_TEXT, add_special_tokens=False)["input_ids"]
    assert result.ids == ids and BOS_ID not in ids  # the text is tokenized without special tokens
    prefixes = expected_prefixes(tokenizer, result.windows, result.passages)
    assert prefixes[0] == []
    assert all(p[0] == BOS_ID for p in prefixes if p)
    ref = reference_window_nlls(tiny_llama, ids, result.windows, prefixes)
    assert (result.token_nlls[1:] - ref[1:]).abs().max().item() < 1e-4
    f = result.figures
    assert f["nll_sum"] == pytest.approx(ref[1:].sum().item(), rel=1e-5)
    assert f["num_tokens"] == len(ids) and f["num_scored"] == len(ids) - 1
    assert f["num_words"] == count_words(EVAL_TEXT)
    assert f["token_ppl"] == pytest.approx(math.exp(f["nll_sum"] / len(ids)))
    assert f["word_ppl"] == pytest.approx(math.exp(f["nll_sum"] / f["num_words"]))
    assert f["num_windows"] == len(result.windows) == len(plan_windows(len(ids), 16, 4))
    assert f["num_windows_with_passage"] + f["num_empty_retrievals"] == len(result.windows) - 1
    assert f["max_length"] == 16


def test_the_plan_queries_the_last_tokens_before_the_window(tiny_tokenizer, tiny_index):
    ids = text_ids(tiny_tokenizer)[0].tolist()
    config = RalmConfig(retrieval_stride=4, query_length=8)
    plan = prepare(ids, tiny_tokenizer, config, tiny_index["retriever"], max_length=16)
    assert plan.windows == plan_windows(len(ids), 16, 4) and plan.ids == ids
    assert plan.num_words == tiny_tokenizer.decode(ids).count(" ")
    queries = plan.queries
    assert queries == window_queries(tiny_tokenizer, ids, plan.windows, 8) and queries[0] is None
    for w, q in zip(plan.windows[1:], queries[1:]):
        assert q == tiny_tokenizer.decode(ids[max(0, w.prev_end - 8) : w.prev_end])
        assert len(tiny_tokenizer(q, add_special_tokens=False)["input_ids"]) == min(8, w.prev_end)
    calls = []
    retrieve = tiny_index["retriever"].retrieve

    class Counting:
        def retrieve(self, batch, k):
            calls.append(len(batch))
            return retrieve(batch, k=k)

    plan = prepare(ids, tiny_tokenizer, config, Counting(), max_length=16)
    first, second = plan.windows[:3], plan.windows[3:]
    passages = plan.candidates(first, k=2) + plan.candidates(second, k=2)
    assert passages[0] == []
    assert passages[1:] == [retrieve([q], k=2)[0] for q in queries[1:]]
    assert plan.candidates(plan.windows, k=2) == passages and calls == [2, len(second)]  # each window once
    assert prepare(ids, tiny_tokenizer, config, None, max_length=16).candidates(plan.windows, 1) == [[]] * len(queries)


def test_evaluate_retrieval_and_retrieval_file(tiny_llama, tiny_tokenizer, tiny_index, tmp_path):
    from hf_ralm.retrieval.files import save_retrieval_file

    config = RalmConfig(**SETTINGS)
    retrieved = evaluate_retrieval(tiny_llama, tiny_tokenizer, EVAL_TEXT, tiny_index["retriever"], config,
                                   show_progress=False)
    assert retrieved.token_nlls is None
    records = retrieved.retrieval_records(tiny_tokenizer)
    assert len(records) == len(retrieved.windows)
    for w, r in zip(retrieved.windows, records):
        assert r["future"] == tiny_tokenizer.decode(retrieved.ids[w.prev_end : w.end])
    path = tmp_path / "r.json"
    save_retrieval_file(str(path), records)
    from_file = evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, None, config, retrieval_file=str(path),
                                    show_progress=False)
    live = evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, tiny_index["retriever"], config,
                               show_progress=False)
    assert from_file.passages == live.passages
    assert from_file.figures["nll_sum"] == pytest.approx(live.figures["nll_sum"], rel=1e-9)
    with pytest.raises(ValueError, match="windows but this evaluation has"):
        evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, None, RalmConfig(**{**SETTINGS,
                            "retrieval_stride": 2}), retrieval_file=str(path), show_progress=False)


def test_papers_retrieval_file_is_evaluated_like_the_reference(tiny_llama, tiny_bos_tokenizer, tmp_path):
    """A file as the paper's prepare_retrieval_data.py writes it: window 0 listed with query "" and passages (which
    eval_lm.py ignores), docs with only "text" (pyserini's '"Title"\\ntext' contents) and "score"."""
    tokenizer = tiny_bos_tokenizer
    ids = tokenizer(EVAL_TEXT, add_special_tokens=False)["input_ids"]
    windows = plan_windows(len(ids), 16, 4)
    texts = ['"Rome"\nthe emperor and the senate', '"Music"\nthe band played a song on the stage']
    records = []
    for w in windows:
        query = tokenizer.decode(ids[max(0, w.prev_end - 8) : w.prev_end])
        docs = [] if w.index % 5 == 4 else [{"text": texts[w.index % 2], "score": 10.0 - w.index % 3}]
        records.append({"begin_location": w.prev_end, "end_location": w.end, "future":
                        tokenizer.decode(ids[w.prev_end : w.end]), "query": query, "retrieved_docs": docs})
    path = tmp_path / "paper.json"
    path.write_text(json.dumps(records, indent=4) + "\n")

    result = evaluate_perplexity(tiny_llama, tokenizer, EVAL_TEXT, None, RalmConfig(**SETTINGS),
                                 retrieval_file=str(path), show_progress=False)
    assert result.passages[0]  # loaded, but window 0 is evaluated without it
    prefixes = [[]] + [tokenizer.encode(r["retrieved_docs"][0]["text"])[: SETTINGS["max_doc_tokens"]]
                       if r["retrieved_docs"] else [] for r in records[1:]]
    ref = reference_window_nlls(tiny_llama, ids, windows, prefixes)
    assert (result.token_nlls[1:] - ref[1:]).abs().max().item() < 1e-4
    with_docs = sum(1 for r in records[1:] if r["retrieved_docs"])
    assert result.figures["num_windows_with_passage"] == with_docs
    assert result.figures["num_empty_retrievals"] == len(windows) - 1 - with_docs


def test_max_eval_tokens_and_ids_input(tiny_llama, tiny_tokenizer):
    config = RalmConfig(**SETTINGS)
    cut = evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, None, config, max_eval_tokens=30,
                              show_progress=False)
    assert cut.figures["num_tokens"] == 30 and len(cut.ids) == 30
    # words are counted on the decoded cut text
    assert cut.figures["num_words"] == count_words(tiny_tokenizer.decode(cut.ids))
    by_ids = evaluate_perplexity(tiny_llama, tiny_tokenizer, cut.ids, None, config, show_progress=False)
    assert by_ids.figures["nll_sum"] == pytest.approx(cut.figures["nll_sum"], rel=1e-9)
    assert by_ids.figures["num_words"] == cut.figures["num_words"]


def test_tokenize_and_max_length(tiny_llama, tiny_tokenizer):
    with pytest.raises(ValueError, match="dataset is empty"):
        tokenize_text(tiny_tokenizer, "")
    assert tokenize_text(tiny_tokenizer, "the king", max_eval_tokens=1) == [tiny_tokenizer.convert_tokens_to_ids("the")]
    assert resolve_max_length(tiny_llama, None) == 128
    assert resolve_max_length(tiny_llama, 16) == 16
    with pytest.raises(SettingError, match="max_length 4096 exceeds the 128 positions this model has"):
        resolve_max_length(tiny_llama, 4096)  # refused, not capped: the run would not be the one asked for
    gpt2 = make_tiny_model("gpt2")
    assert resolve_max_length(gpt2, None) == 128  # n_positions


def test_evaluate_perplexity_rejects_bad_settings(tiny_llama, tiny_tokenizer):
    config = RalmConfig(**SETTINGS)
    bad = copy.copy(config)
    object.__setattr__(bad, "query_length", 0)  # bypass the config's own validation
    with pytest.raises(ValueError, match="query_length"):
        evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, None, bad, show_progress=False)
    with pytest.raises(ValueError, match="Need at least 2 tokens"):
        evaluate_perplexity(tiny_llama, tiny_tokenizer, "king", None, config, show_progress=False)


def test_wrapper_evaluate_perplexity_needs_tokenizer(tiny_llama):
    model = RetrievalAugmentedModel(RalmConfig(**SETTINGS), tiny_llama)
    with pytest.raises(ValueError, match="no tokenizer"):
        model.evaluate_perplexity("the king")
