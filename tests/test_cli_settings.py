"""The RALM settings' flags are generated from one source (``config.settings.SETTING_FLAGS`` and ``RalmConfig``'s
fields), and what the command line used to compute itself is a library function Python users can call."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch

from conftest import ARTICLES, EVAL_TEXT, write_jsonl
from hf_ralm.cli import FLAGS, build_parser
from hf_ralm.cli.settings import RALM_GROUPS, add_ralm_arguments, dest, ralm_settings, setting_help
from hf_ralm.config.configuration_ralm import RalmConfig
from hf_ralm.config.settings import RALM_FIELDS, SETTING_FLAGS
from hf_ralm.errors import SettingError
from hf_ralm.selection.strategies import reader_inputs_per_window

NOT_FLAGS = {"base_model_name_or_path", "passage_template"}  # --model names the first; the template is Python's


def parser_of(command: str) -> argparse.ArgumentParser:
    return build_parser()._subparsers._group_actions[0].choices[command]


def defaults(parser: argparse.ArgumentParser) -> dict:
    return {action.dest: action.default for action in parser._actions}


def test_every_setting_the_command_line_takes_is_a_generated_flag_with_help():
    assert set(SETTING_FLAGS) == set(RALM_FIELDS) - NOT_FLAGS
    for name, flag in SETTING_FLAGS.items():
        assert FLAGS[name] == flag.flag and flag.group in RALM_GROUPS
        shown = setting_help(name)
        assert shown and "⟦" not in shown and "{strategies}" not in shown, name  # every setting named as its flag
    assert "--rerank-candidates retrieved ones: none (" in setting_help("rerank")  # the registry's strategies


@pytest.mark.parametrize("command", ["eval-lm", "retrieve", "generate"])
def test_a_flag_defaults_to_the_ralm_config_default(command):
    """No flag given: every setting is RalmConfig's default (``--query-length``: the retriever's, resolved when
    parsed), in each command that takes the RALM settings."""
    parser = parser_of(command)
    shown = defaults(parser)
    config = RalmConfig()
    for name in SETTING_FLAGS:
        assert shown[dest(name)] == getattr(config, name), name
    args = build_parser().parse_args([command])
    assert {**ralm_settings(args), "query_length": None} == {name: getattr(config, name) for name in SETTING_FLAGS}


def test_rerank_data_takes_the_candidates_with_its_own_help():
    parser = parser_of("rerank-data")
    actions = {action.dest: action for action in parser._actions}
    assert actions["rerank_candidates"].default == RalmConfig().rerank_candidates
    assert actions["rerank_tokens"].help.startswith("s': recorded with the data for the reranker's card")
    assert "rerank" not in actions  # only the two settings it records


def test_a_script_takes_some_groups_with_its_own_defaults():
    parser = argparse.ArgumentParser()
    add_ralm_arguments(parser, ["RALM settings", "reranking"], defaults={"max_length": 512})
    args = parser.parse_args(["--stride", "8", "--rerank", "lm", "--rerank-allow-no-passage"])
    assert ralm_settings(args) == {**{name: getattr(RalmConfig(), name) for name in SETTING_FLAGS
                                      if SETTING_FLAGS[name].group in ("RALM settings", "reranking")},
                                   "retrieval_stride": 8, "max_length": 512, "rerank": "lm",
                                   "rerank_allow_no_passage": True}
    assert [group.title for group in parser._action_groups[2:]] == ["RALM settings", "reranking"]
    assert not hasattr(args, "ensemble")  # the groups not asked for are not there
    with pytest.raises(SettingError, match="retrieval_stride must be at least 1"):
        ralm_settings(parser.parse_args(["--stride", "0"]))  # checked by RalmConfig, named by its Python name
    with pytest.raises(ValueError, match="no RALM settings group or setting 'windows'"):
        add_ralm_arguments(argparse.ArgumentParser(), ["windows"])


def test_a_script_default_is_the_one_its_help_states():
    """A default of the script's own replaces the help's default clause (RalmConfig's, which would be wrong there)
    wherever it stands, or is added; a help that shows ``%(default)s`` already, or given in ``helps``, is kept."""
    own = {"max_length": 512, "query_length": 32, "retrieval_stride": 8, "reranker_model": "ranker",
           "bos_every_window": True}
    parser = argparse.ArgumentParser()
    add_ralm_arguments(parser, settings=[*own, "max_doc_tokens", "rerank_tokens"], defaults=own,
                       helps={"query_length": "ℓ (%(default)s tokens)"})
    shown = {action.dest: action.help % {"default": action.default} for action in parser._actions}
    assert shown["max_length"] == "window length L (default 512)"
    assert shown["query_length"] == "ℓ (32 tokens)"
    assert shown["stride"] == "retrieval stride s: retrieve every s tokens (default 8)"
    assert shown["reranker_model"].startswith("the LM that ranks for --rerank lm (default ranker), or the trained")
    assert shown["bos_every_window"].endswith("BOS-sensitive models) (default True)")
    assert shown["max_doc_tokens"] == setting_help("max_doc_tokens") % {"default": 256}  # no own default: as is
    assert "(default: the model's maximum)" in setting_help("max_length")  # the command line's own help unchanged


def test_a_sweep_takes_one_or_more_values_of_a_setting():
    parser = argparse.ArgumentParser()
    add_ralm_arguments(parser, settings=["rerank", "ensemble_temperature", "rerank_candidates"],
                       defaults={"ensemble_temperature": [1.0, 16.0]}, sweeps=["ensemble_temperature", "rerank"])
    assert vars(parser.parse_args([])) == {"rerank": ["none"], "rerank_candidates": 16,
                                           "ensemble_temperature": [1.0, 16.0]}
    args = parser.parse_args(["--ensemble-temperature", "2", "inf", "--rerank", "lm", "oracle"])
    assert (args.ensemble_temperature, args.rerank) == ([2.0, float("inf")], ["lm", "oracle"])
    with pytest.raises(SystemExit):  # still the registered strategies only
        parser.parse_args(["--rerank", "lm", "bogus"])
    with pytest.raises(ValueError, match="cannot sweep 'bos_every_window': sweeps must name settings added here "
                                         "that take a value"):
        add_ralm_arguments(argparse.ArgumentParser(), ["passages in context"], sweeps=["bos_every_window"])
    with pytest.raises(ValueError, match="cannot sweep 'rerank'"):
        add_ralm_arguments(argparse.ArgumentParser(), ["RALM settings"], sweeps=["rerank"])
    with pytest.raises(ValueError, match="no RALM settings group or setting 'max_lenght'"):  # a misspelt default
        add_ralm_arguments(argparse.ArgumentParser(), ["RALM settings"], defaults={"max_lenght": 512})


# ----------------------------------------------------------------------------------------------------------------
# The library functions the command line calls
# ----------------------------------------------------------------------------------------------------------------


def test_the_run_estimate_is_callable_from_python(tiny_llama, tiny_tokenizer, monkeypatch):
    from hf_ralm.evaluation import run_cost
    from hf_ralm.evaluation.run_cost import RunEstimate, check_run_length, describe_run, estimate_run

    config = RalmConfig(max_length=16, max_doc_tokens=8, rerank="lm", rerank_candidates=3)
    estimate = estimate_run(tiny_llama, tiny_tokenizer, EVAL_TEXT, config, max_eval_tokens=40)
    assert isinstance(estimate, RunEstimate)
    assert (estimate.num_tokens, estimate.max_length, estimate.retrieval_stride) == (40, 16, 4)
    assert estimate.num_retrievals == estimate.num_windows - 1  # the first window has nothing to query with
    assert estimate.reader_inputs == reader_inputs_per_window(config) == 3  # the strategy's: its k candidates
    assert (estimate.device, estimate.dtype) == ("cpu", "float32") and estimate.window_seconds > 0
    later = estimate.num_retrievals
    assert estimate.seconds == estimate.window_seconds * (estimate.num_windows - later + later * 3)
    assert describe_run(estimate).startswith(f"40 tokens in {estimate.num_windows} windows of L=16 every 4 tokens, "
                                             f"{later} retrievals, 3 reader input(s) per window with a passage")
    closed = estimate_run(tiny_llama, tiny_tokenizer, EVAL_TEXT, config, max_eval_tokens=40, retrieving=False,
                          reader_inputs=7)
    assert (closed.num_retrievals, closed.reader_inputs, closed.num_windows) == (0, 7, estimate.num_windows)
    check_run_length(estimate)  # seconds, not hours
    monkeypatch.setattr(run_cost, "LONG_RUN_S", 0.0)
    with pytest.raises(SettingError, match="give allow_long_run to start it anyway"):
        check_run_length(estimate)
    check_run_length(estimate, allow_long_run=True)
    check_run_length(dataclasses.replace(estimate, device="cuda"))  # only a CPU run is refused


def test_build_index_is_what_the_index_command_runs(tmp_path):
    from hf_ralm.retrieval import IndexSummary, build_index

    corpus = str(write_jsonl(tmp_path / "corpus.jsonl", ARTICLES))
    built = build_index("bm25", corpus, str(tmp_path / "index"))
    assert built == IndexSummary(str(tmp_path / "index"), len(ARTICLES))
    with pytest.raises(SettingError, match="a hybrid index is built by one process"):
        build_index("hybrid", corpus, str(tmp_path / "hybrid"), num_shards=2, shard_id=0)


def test_training_titles_join_the_excluded_and_the_forbidden(tmp_path):
    from hf_ralm.runs.fingerprints import titles_fingerprint
    from hf_ralm.reranker_training import TrainingTitles, articles_source

    (tmp_path / "a.txt").write_text("Rome\n")
    (tmp_path / "b.txt").write_text("Music\nRome\n")
    (tmp_path / "f.txt").write_text("Kingdom\n")
    titles = TrainingTitles.from_files([tmp_path / "a.txt", tmp_path / "b.txt"], str(tmp_path / "f.txt"))
    assert titles == TrainingTitles(frozenset({"Rome", "Music"}), ["Kingdom", "Music", "Rome"])
    assert TrainingTitles.from_files() == TrainingTitles(frozenset(), [])
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)
    source = articles_source(corpus, 3, titles.excluded)
    assert source["num_articles"] == 3 and source["exclude_titles"] == titles_fingerprint(["Music", "Rome"])
    assert source != articles_source(corpus, 3)  # other titles left out: another collection


def test_qa_run_settings_name_what_a_resumed_run_must_share():
    from hf_ralm.evaluation.qa import qa_run_settings

    settings = qa_run_settings(model="m", dtype=torch.bfloat16, num_docs=1, retriever="bm25", corpus=["c.jsonl"])
    assert settings == {"model": "m", "tokenizer": None, "gguf_file": None, "retriever": "bm25", "corpus": ["c.jsonl"],
                        "index_dir": None, "forbidden_titles": None, "dtype": "bfloat16"}


def test_generating_in_batches_is_generating_all_at_once(tiny_llama, tiny_tokenizer, tiny_index):
    from hf_ralm.generation.texts import generate_texts, generate_texts_in_batches

    config = RalmConfig(max_length=24, max_doc_tokens=8)
    prompts = ["the emperor of rome", "the sailor took the", "the band played"]
    args = (tiny_llama, tiny_tokenizer, tiny_index["retriever"], config)
    batched = generate_texts_in_batches(*args, prompts, batch_size=2, show_progress=False, max_new_tokens=5)
    one_by_one = [generate_texts(*args, [prompt], max_new_tokens=5)[0] for prompt in prompts]
    assert [text.output_ids for text in batched] == [text.output_ids for text in one_by_one]
    assert [text.prompt for text in batched] == prompts
