"""``hf_ralm.reranking``: the earlier name of :mod:`hf_ralm.reranker_training` (the predictive reranker's training
data and training), kept so that code written against it runs unchanged: the same public names, and its submodules
(``hf_ralm.reranking.collect``, ``.data``, ``.training``) are the new package's own modules, not copies.

Example:
    >>> import hf_ralm.reranker_training.training
    >>> import hf_ralm.reranking.training
    >>> hf_ralm.reranking.training is hf_ralm.reranker_training.training
    True
"""

import sys

from .. import reranker_training
from ..reranker_training import *  # noqa: F401,F403  (the same public names)
from ..reranker_training import collect, data, training

for _module in (collect, data, training):  # `import hf_ralm.reranking.training` finds the module, never a second copy
    sys.modules[f"{__name__}.{_module.__name__.rsplit('.', 1)[1]}"] = _module
del _module

__all__ = reranker_training.__all__
