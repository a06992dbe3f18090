"""Batches on a Dask cluster (``msgpt predict --cluster``): ``client`` opens the cluster (a running scheduler, or
``local:N`` worker processes on this machine), registers the model on every worker and maps a per-feature
function over the features in a bounded window of futures, handing the outcomes back in input order; ``worker``
is what runs on the workers: the plugin that loads the model bundle once per worker (by path and checksum, or
shipped with the plugin) and refuses a different bundle, device or precision, and the task wrapper that hands the
loaded model to the per-feature function.

Dask's ``distributed`` is an optional extra (``pip install -e ".[cluster]"``): nothing here imports it at module
level except ``worker`` and ``client``, which the CLI imports only for ``--cluster``.

May import: ``engine.files`` and below (it needs only ``engine.model`` and ``engine.errors``); ``engine.cli``
imports it.
"""
