"""What every layer of hf-ralm may use, and which uses nothing of hf-ralm but its errors: atomic, fsynced writes
(:mod:`.atomic`), how a run is reproduced (:mod:`.provenance`) and the checks of counts (:mod:`.checks`)."""
