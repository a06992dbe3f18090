"""What a result means beyond its rank: novelty against the training corpus and the user's lists
(``novelty``), scoring structures the user brings (``structure_score``), and the identification level and
feature rank of an answer (``identification``).

May import: ``engine.elucidation`` and below.
"""
