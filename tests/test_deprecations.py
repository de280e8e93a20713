"""hf_ralm's calls into transformers use today's names: the conftest guard fails any test during which hf_ralm calls
something deprecated; these tests check the guard itself and the cache argument's name on both sides of its rename."""

from __future__ import annotations

import inspect
import warnings

import torch

from conftest import deprecations_from_hf_ralm
from hf_ralm.core.modeling_utils import cache_kwargs, empty_cache, last_logits


def test_the_guard_notes_a_deprecation_raised_under_hf_ralm_code_only(tiny_llama):
    """A FutureWarning raised by a dependency while hf_ralm's code is on the stack is noted; one raised from the test
    itself is not (the guard is about our calls)."""
    caught: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("always", FutureWarning)
        warnings.showwarning = deprecations_from_hf_ralm(caught, then=lambda *args: None)
        warnings.warn("from the test", FutureWarning)
        assert caught == []
        # the old keyword through hf_ralm's own helper: what a call written before the rename raises today
        forward = tiny_llama.forward
        try:
            tiny_llama.forward = lambda **kw: (warnings.warn("`past_key_values` is deprecated", FutureWarning),
                                               forward(**kw))[1]
            last_logits(tiny_llama, torch.tensor([[5, 6, 7]], device=tiny_llama.device), 1)
        finally:
            tiny_llama.forward = forward
    assert len(caught) == 1 and "past_key_values" in caught[0][0] and "modeling_utils.py" in caught[0][1]


def test_cache_goes_by_the_name_the_forward_takes(tiny_llama):
    """Recent transformers name it ``cache`` (``past_key_values`` warns from 5.24 on); older versions know only the old
    name: the forward's own signature decides."""
    cache = empty_cache(tiny_llama)
    takes_cache = "cache" in inspect.signature(tiny_llama.forward).parameters  # this install's transformers
    assert cache_kwargs(tiny_llama, cache) == {"cache" if takes_cache else "past_key_values": cache}
    assert cache_kwargs(tiny_llama, None) == {}

    class Old(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            return input_ids

    assert cache_kwargs(Old(), cache) == {"past_key_values": cache}


def test_the_kv_paths_raise_no_deprecation(tiny_llama):
    """Scoring with a passage's keys/values reused, which passes a cache to every forward, raises no FutureWarning."""
    from hf_ralm.core.scoring import score_windows
    from hf_ralm.core.windows import plan_windows

    ids = list(range(4, 44))
    windows = plan_windows(len(ids), 16, 4)
    prefixes = [[]] + [[2, 9, 10, 11]] * (len(windows) - 1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        score_windows(tiny_llama, ids, windows, prefixes, batch_size=4, show_progress=False)
    assert not [w for w in seen if issubclass(w.category, (FutureWarning, DeprecationWarning))], \
        [str(w.message) for w in seen]
