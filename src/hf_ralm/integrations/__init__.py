"""hf-ralm inside other tools' front doors: :mod:`hf_ralm.integrations.lm_eval` is lm-evaluation-harness's ``ralm``
model (``pip install "hf-ralm[lm-eval]"``). Each module imports its tool, so import the one you use."""
