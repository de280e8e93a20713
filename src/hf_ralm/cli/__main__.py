"""``python -m hf_ralm.cli ...``: the ``hf-ralm`` command line."""

from . import main

main()
