"""Training code of MS-GPT Desktop: corpus preparation, datasets, batching, pretraining, adaptation.

Nothing here imports Qt; the engine's inference code never imports from here.
"""
