"""``msgpt predict``'s hand-off options (#60): ``--quant`` and ``--feature-table`` checked before the model loads, and the
feature table of a run written at its end (:mod:`engine.files.feature_table`; the rows a resumed run's predecessor
finished included). :mod:`engine.cli.predict` calls these; the readers are :mod:`engine.spectra.handoff`."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli.common import err
from engine.cli.predict_args import _feature_config
from engine.errors import InputFileError


def write_feature_table_of_run(args: argparse.Namespace, table, earlier: bool, journal=()) -> None:
    """--feature-table (#60): the rows collected in this run, and with ``earlier`` those an interrupted run finished
    (the inputs read again, without recalibration; status from its ``journal`` entries, answers from OUTPUT's rank-1
    rows)."""
    from engine.files.export import export_format
    from engine.files.feature_table import FeatureTableSink
    from engine.spectra.handoff import attach_quant, iter_input_features

    if not getattr(args, "feature_table", None):
        return
    table = table if table is not None else FeatureTableSink(args.feature_table, args.inputs, args.feature_table_style)
    if earlier and export_format(args.output) == "csv":
        config = _feature_config(args)

        def features():
            for position, path in enumerate(args.inputs):
                try:
                    for item in attach_quant(iter_input_features(path, config), getattr(args, "quant", None), config):
                        yield position, item
                except InputFileError:
                    continue  # said when the run read it

        table.add_earlier(args.output, features(), journal)
    err(f"{table.write()} features written to {args.feature_table}.")


def check_handoff_args(args: argparse.Namespace) -> None:
    """--feature-table's name and --quant's table, checked before the model loads (#60)."""
    from engine.files.feature_table import table_delimiter
    from engine.spectra.handoff import read_quant_table

    if getattr(args, "feature_table", None):
        table_delimiter(Path(args.feature_table))
    if getattr(args, "quant", None):
        args.quant = read_quant_table(args.quant)  # read once; its errors name the file and line
