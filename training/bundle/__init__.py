"""What ships beside the weights: ``build_bundle`` (a model bundle and its model card from the stages'
outputs), ``bit_legend``, ``known_structures`` (the novelty flag's set), ``structure_library`` and
``spectral_library`` (the bundled libraries of resources/). Imports ``engine`` and the training layers ``core`` to
``decoder``."""
