"""The README as a newcomer reads it: its Python blocks run as written, each on its own (a fresh namespace, in the
folder where the quickstart ran; the Hub id swapped for the same model's local folder, since the Hub is out of reach
here), and it holds, verbatim, the two commands CI runs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"
HUB_ID = "HuggingFaceTB/SmolLM2-135M"


def python_blocks(text: str) -> list[str]:
    """The README's fenced Python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def ci_block(marker: str, path: Path) -> str:
    """The block .ci/run takes after ``<!-- ci: marker -->`` in ``path``, through .ci/run's own extraction."""
    script = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    function = re.search(r"^block\(\) \{.*?^\}$", script, flags=re.S | re.M).group()
    result = subprocess.run(["bash", "-c", f'{function}\nblock "$1" "$2"', "bash", marker, str(path)],
                            capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    return result.stdout


def test_ci_runs_the_readmes_two_commands():
    """The README holds the command that sets up and runs the main job and the one that runs the tests; CI takes
    them from there (and the development guide shows the same text, included from the README)."""
    main, tests = ci_block("main", README), ci_block("test", README)
    assert main.startswith("pip install torch==2.13.0 && pip install -e") and "get-models" in main
    assert main.count("hf-ralm eval-lm") == 1 and main.count("compare --dataset-path") == 2
    assert tests.startswith("pip install torch==2.13.0") and "python -m pytest" in tests
    readme = README.read_text(encoding="utf-8")
    for block in (main, tests):
        assert f"```bash\n{block}```" in readme
    guide = (REPO_ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    assert '--8<-- "README.md:main-job"' in guide and '--8<-- "README.md:tests"' in guide
    assert not {"<!-- ci: main -->", "<!-- ci: test -->"} & set(guide.splitlines())  # one home: the README
    assert ci_block("vllm", REPO_ROOT / "docs" / "development.md").startswith("pip install torch==2.13.0")


def test_the_quickstart_says_how_to_run_offline():
    readme = README.read_text(encoding="utf-8")
    offline = readme[readme.index("[end:quickstart]"):].split("\n\n")[1]
    assert "~/.cache/hf-ralm/models/smollm2-135m-instruct" in offline and "HF_HUB_OFFLINE=1" in offline


@pytest.mark.integration
def test_readme_python_blocks_run_each_on_its_own(real_model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    import evaluate

    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)  # read at import time
    quickstart, auto_classes, metric = python_blocks(README.read_text(encoding="utf-8"))
    assert HUB_ID in quickstart and "AutoModelForCausalLM.from_pretrained" in auto_classes
    local = str(real_model_dir("smollm2-135m-instruct"))
    monkeypatch.chdir(tmp_path)

    def run(block: str, name: str) -> str:
        exec(compile(block.replace(HUB_ID, local), name, "exec"), {})  # a namespace of its own
        return capsys.readouterr().out

    ppl, fraction = map(float, run(quickstart, "README quickstart").splitlines()[0].split())
    assert 1 < ppl < 1000 and fraction > 0  # retrieval happened
    assert (tmp_path / "corpus-bm25" / "hf_ralm_index.json").is_file()
    assert "The Colosseum is in" in run(auto_classes, "README transformers door")
    assert (tmp_path / "smollm2-ralm" / "config.json").is_file()
    figures = eval(run(metric, "README metric"))  # the dict compute returns, as printed
    assert 1 < figures["token_ppl"] < 1000 and len(figures["perplexities"]) == 1
