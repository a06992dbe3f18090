"""What a result means beyond its rank: novelty against the training corpus and the user's lists
(``novelty``), and scoring structures the user brings (``structure_score``).

May import: ``engine.elucidation`` and below.
"""
