"""What a result means beyond its rank: novelty against the training corpus and the user's lists
(``novelty``), scoring structures the user brings (``structure_score``), and flags of implausible structures
(``plausibility``).

May import: ``engine.elucidation`` and below.
"""
