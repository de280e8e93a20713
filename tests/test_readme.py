"""The README's quickstart and its transformers door run as written, with the Hub id swapped for the same model's
local folder (the Hub is out of reach here), in a fresh working folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
HUB_ID = "HuggingFaceTB/SmolLM2-135M"


def python_blocks(text: str) -> list[str]:
    """The README's fenced Python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


@pytest.mark.integration
def test_readme_quickstart_and_auto_classes_run_as_written(real_model_dir, tmp_path, monkeypatch, capsys):
    blocks = python_blocks((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    quickstart, auto_classes = blocks[0], blocks[1]
    assert HUB_ID in quickstart and "AutoModelForCausalLM.from_pretrained" in auto_classes
    local = str(real_model_dir("smollm2-135m-instruct"))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(quickstart.replace(HUB_ID, local), "README quickstart", "exec"), namespace)
    ppl, fraction = map(float, capsys.readouterr().out.splitlines()[0].split())
    assert 1 < ppl < 1000 and fraction > 0  # retrieval happened
    assert (tmp_path / "corpus-bm25" / "hf_ralm_index.json").is_file()
    exec(compile(auto_classes, "README transformers door", "exec"), namespace)
    assert type(namespace["ralm"]).__name__ == "RetrievalAugmentedModel"
    assert "The Colosseum is in" in capsys.readouterr().out
