"""The decoder: ``warmstart`` (a local SAFE-GPT checkpoint as its start), ``pretrain`` (conditional
pretraining, noise-aware), ``adapt`` (posterior-aligned LoRA adaptation), ``accelerator`` (one prepared run on a lent
GPU: pack here, train there, evaluate here). Imports ``engine`` and the training layers ``core`` to
``calibration``."""
