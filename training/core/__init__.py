"""What every training command shares: the config base class, learning-rate schedule, seeding, autocast and
stopping on a signal (``loop``); safetensors + JSON checkpoints (``checkpoint``); metrics of fingerprint posteriors
and ranked candidates (``metrics``, pure numpy). Imports only ``engine``: the lowest training layer."""
