"""``hf-ralm generate``, run in-process on a tiny local model folder and a tiny BM25 index: the JSON it writes
matches ``RetrievalAugmentedModel.generate`` (reranked too) and ``--show-sources`` prints the numbered sources."""

from __future__ import annotations

import json

import pytest

from conftest import TEST_DEVICE_ARGS
from hf_ralm import RetrievalAugmentedModel
from hf_ralm.cli import main
from hf_ralm.generation.texts import GeneratedText

PROMPTS = ["the emperor of rome and the senate", "the sailor took the boat to the island and the"]
SETTINGS = ["--stride", "4", "--query-length", "8", "--max-length", "48", "--max-doc-tokens", "32", "--max-new-tokens",
            "10"]


def model_records(tiny_llama, tiny_tokenizer, tiny_index, **settings) -> list[dict]:
    """What ``generate`` should write for ``PROMPTS``, from ``RetrievalAugmentedModel.generate`` with ``SETTINGS``
    and the RALM ``settings``."""
    model = RetrievalAugmentedModel.from_pretrained(tiny_llama, retriever=tiny_index["retriever"],
                                                    tokenizer=tiny_tokenizer, retrieval_stride=4, query_length=8,
                                                    max_length=48, max_doc_tokens=32, **settings)
    out = model.generate(PROMPTS, max_new_tokens=10, do_sample=False, return_dict_in_generate=True, pad_token_id=0)
    width = max(len(tiny_tokenizer(p)["input_ids"]) for p in PROMPTS)
    rows = []
    for b, prompt in enumerate(PROMPTS):
        new = out.sequences[b, width:].tolist()
        if 1 in new:  # EOS: what follows is padding
            new = new[: new.index(1) + 1]
        rows.append({"prompt_ids": tiny_tokenizer(prompt)["input_ids"], "output_ids": new, "sources": out.sources[b]})
    assert any(row["sources"] for row in rows)
    return rows


@pytest.fixture(scope="module")
def expected(tiny_llama, tiny_tokenizer, tiny_index):
    return model_records(tiny_llama, tiny_tokenizer, tiny_index)


def argv(tiny_model_dir, tiny_index, *extra):
    return ["generate", "--model", str(tiny_model_dir), "--retriever", "bm25", "--index-dir", tiny_index["index_dir"],
            *TEST_DEVICE_ARGS, *SETTINGS, *extra]


def test_generate_output_json_and_sources(tmp_path, tiny_model_dir, tiny_index, tiny_tokenizer, expected, capsys):
    out_json = tmp_path / "out" / "generated.json"
    main(argv(tiny_model_dir, tiny_index, "--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--show-sources",
              "--output-json", str(out_json)))
    printed = capsys.readouterr().out
    records = json.loads(out_json.read_text())
    assert len(records) == len(PROMPTS)
    for record, prompt, want in zip(records, PROMPTS, expected):
        assert record["prompt"] == prompt
        assert record["prompt_ids"] == want["prompt_ids"]
        assert record["output_ids"] == want["output_ids"]
        assert record["sources"] == want["sources"]
        assert record["text"] == tiny_tokenizer.decode(record["output_ids"], skip_special_tokens=True)
        for source in record["sources"]:
            assert set(source) == {"start", "end", "id", "title", "text", "score"}
            assert 0 <= source["start"] < source["end"] <= len(record["output_ids"])
    assert not list(out_json.parent.glob(".tmp-*"))  # written atomically

    # what was printed: per prompt, the text with [n] marks and the numbered sources with their spans
    blocks = printed.strip().split("\n\n")
    assert len(blocks) == len(PROMPTS)
    for block, record in zip(blocks, records):
        assert block == GeneratedText(**record).format(tiny_tokenizer, show_sources=True)
        assert block.startswith(f"Prompt: {record['prompt']}\nOutput: ")
        if record["sources"]:
            first = record["sources"][0]
            assert "[1]" in block.splitlines()[1]
            assert "Sources:" in block
            assert f"  [1] {first['title']} — {' '.join(first['text'].split()[:12])} …" in block
            assert f"tokens {first['start']}–" in block
        titles = {s["title"] for s in record["sources"]}
        assert sum(line.startswith("  [") for line in block.splitlines()) == len(titles)


def test_generate_prompts_file_plain_output(tmp_path, tiny_model_dir, tiny_index, expected, capsys):
    prompts_file = tmp_path / "prompts.txt"
    prompts_file.write_text(PROMPTS[0] + "\n\n" + PROMPTS[1] + "\n")
    out_json = tmp_path / "generated.json"
    main(argv(tiny_model_dir, tiny_index, "--prompts-file", str(prompts_file), "--batch-size", "1",
              "--output-json", str(out_json)))
    printed = capsys.readouterr().out
    records = json.loads(out_json.read_text())
    # one prompt per batch: the same tokens as the batch of two (each row retrieves and decodes for itself)
    assert [r["output_ids"] for r in records] == [w["output_ids"] for w in expected]
    assert [r["sources"] for r in records] == [w["sources"] for w in expected]
    assert printed.strip().split("\n\n") == [f"Prompt: {r['prompt']}\nOutput: {r['text']}" for r in records]
    assert "Sources" not in printed


def test_generate_reranks(tmp_path, tiny_llama, tiny_tokenizer, tiny_model_dir, tiny_index, capsys):
    """``--rerank lm``: the reader chooses among the retrieved candidates (or no passage); the sources carry the
    chosen passage's rank, as ``RetrievalAugmentedModel.generate`` gives them."""
    out_json = tmp_path / "reranked.json"
    main(argv(tiny_model_dir, tiny_index, "--prompt", PROMPTS[0], "--prompt", PROMPTS[1], "--rerank", "lm",
              "--rerank-candidates", "3", "--rerank-tokens", "6", "--rerank-allow-no-passage", "--output-json",
              str(out_json)))
    capsys.readouterr()
    records = json.loads(out_json.read_text())
    want = model_records(tiny_llama, tiny_tokenizer, tiny_index, rerank="lm", rerank_candidates=3, rerank_tokens=6,
                         rerank_allow_no_passage=True)
    assert [r["output_ids"] for r in records] == [w["output_ids"] for w in want]
    assert [r["sources"] for r in records] == [w["sources"] for w in want]
    ranks = [source["rank"] for record in records for source in record["sources"]]
    assert ranks and all(0 <= rank < 3 for rank in ranks) and any(rank > 0 for rank in ranks)


def test_format_generation_spans(tiny_tokenizer):
    ids = tiny_tokenizer("the king and the queen of the realm in the castle", add_special_tokens=False)["input_ids"]
    rome = {"id": "0", "title": "Rome", "text": "rome was the city of the empire", "score": 2.5}
    song = {"id": "2", "title": "", "text": "the band played a song", "score": 1.0}
    record = {"prompt": "p", "prompt_ids": [], "output_ids": ids,
              "text": tiny_tokenizer.decode(ids, skip_special_tokens=True),
              "sources": [{**rome, "start": 0, "end": 4}, {**rome, "start": 4, "end": 8},
                          {**song, "start": 8, "end": 9}]}
    assert GeneratedText(**record).format(tiny_tokenizer, show_sources=True) == (
        "Prompt: p\n"
        "Output: the king and the queen of the realm [1] in [2] the castle\n"
        "Sources:\n"
        "  [1] Rome — rome was the city of the empire (id 0, score 2.50)\n"
        '      tokens 0–8: "the king and the queen of the realm"\n'
        "  [2] (untitled) — the band played a song (id 2, score 1.00)\n"
        '      tokens 8–9: "in"'
    )
    assert GeneratedText(**{**record, "sources": []}).format(tiny_tokenizer, show_sources=True).endswith(
        "Sources: none (no passage was retrieved)")


def fail(capsys, args) -> str:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip() and "Traceback" not in err
    return err


def test_generate_errors(tmp_path, tiny_model_dir, tiny_index, capsys):
    assert "give a prompt" in fail(capsys, argv(tiny_model_dir, tiny_index))
    assert "prompts file not found" in fail(capsys, argv(tiny_model_dir, tiny_index, "--prompts-file",
                                                         str(tmp_path / "missing.txt")))
    err = fail(capsys, argv(tiny_model_dir, tiny_index, "--prompt", "x", "--retrieval-file", "r.json"))
    assert "unrecognized arguments: --retrieval-file" in err  # eval-lm's flag: generate does not take it
    err = fail(capsys, argv(tiny_model_dir, tiny_index, "--prompt", "x", "--stride", "0"))
    assert err.splitlines()[-1] == "hf-ralm: error: --stride must be at least 1, got 0."
    err = fail(capsys, argv(tiny_model_dir, tiny_index, "--prompt", "x", "--rerank", "oracle"))
    assert err.splitlines()[-1].startswith("hf-ralm: error: --rerank='oracle' ranks the candidates on the very tokens")
    assert "--max-new-tokens must be at least 1" in fail(
        capsys, argv(tiny_model_dir, tiny_index, "--prompt", "x", "--max-new-tokens", "0"))
    with pytest.raises(SystemExit):  # argparse: --prompt and --prompts-file exclude each other
        main(argv(tiny_model_dir, tiny_index, "--prompt", "x", "--prompts-file", "p.txt"))
    capsys.readouterr()
