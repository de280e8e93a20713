"""What every layer of hf-ralm may use, and which uses nothing of hf-ralm but its errors: atomic, fsynced writes
([`atomic`][hf_ralm.utils.atomic]), how a run is reproduced ([`reproduction`][hf_ralm.utils.reproduction]), the checks
of counts ([`checks`][hf_ralm.utils.checks]), the optional packages ([`extras`][hf_ralm.utils.extras]: one that is
missing is refused with the command that installs it), what the CPUs offer ([`cpus`][hf_ralm.utils.cpus]: how many this
process may use, whether they compute bfloat16 in hardware), bfloat16 linear layers computed in float32 for the CPUs
that do not ([`widened_linear`][hf_ralm.utils.widened_linear]) and worker processes that never import the caller's
script ([`worker_processes`][hf_ralm.utils.worker_processes]).

The names below are the public ones, for scripts that write results as hf-ralm does (the benchmarks among them).

Examples:
    >>> import os, tempfile
    >>> from hf_ralm.utils import provenance, write_json_atomic
    >>> path = os.path.join(tempfile.mkdtemp(), "results.json")
    >>> write_json_atomic(path, {"token_ppl": 23.2, "command": provenance(["bench.py"])["command"]})
    >>> open(path).read()
    '{\\n  "token_ppl": 23.2,\\n  "command": "bench.py"\\n}\\n'
"""

from .atomic import write_json_atomic, write_text_atomic
from .cpus import bfloat16_instructions
from .extras import require
from .lazy import lazy_exports
from .reproduction import provenance

# imported when first used: it imports torch, which nothing else here needs (``hf-ralm --help`` imports this package)
__getattr__, __dir__ = lazy_exports(__name__, {"widened_linear": ("widen_bfloat16_matmuls",)})

__all__ = ["bfloat16_instructions", "provenance", "require", "widen_bfloat16_matmuls", "write_json_atomic",
           "write_text_atomic"]
