"""Reader engines: what runs the reader. The registry (`registry`: `Engine`, `register_engine`, `get_engine`), the
protocol of a reader an engine runs (`reader`: `Reader`, `engine_reader`) and one module per engine, each ending with
its register line, imported here: `transformers` (the default: a model in this process) and those of the engines
hf-ralm ships. An engine from outside hf-ralm is its class and its register line alone.

Examples:
    ```python
    from hf_ralm.core.engines.registry import engine_names

    engine_names()   # ('transformers', ...): the default first, then the engines hf-ralm ships
    ```
"""

from . import transformers, vllm  # noqa: F401  (each registers its engine; neither imports torch)
