"""The app on what it ships (issue #61, item 1): the default model, the bundled structure and spectral libraries and
the example spectra, as a user's first start gets them; one example is run through them.

Every other GUI test hides the default model and the bundled libraries (conftest.py) and runs on the tiny bundle;
this one asks for :func:`bundled_libraries` and builds its window without ``make_window``. It asserts what holds
for any sound model (valid molecules of the example's formula, the libraries searched), never what this model
happened to learn. The first opening indexes the bundled libraries into a fresh MSGPT_HOME: most of its time.
"""

from __future__ import annotations

from rdkit import Chem
from rdkit.Chem.rdMolDescriptors import CalcMolFormula

from engine.paths import default_model_dir

SOTALOL = "MSBNK-Env_Anal_Chem_U_Tuebingen-TUE00653"  # an [M+H]+ example, C12H20N2O3S


def test_the_app_starts_on_the_shipped_model_and_libraries_and_runs_an_example(qtbot, home, bundled_libraries):
    from msgpt_gui.main_window import MainWindow

    window = MainWindow(device="cpu", popups=False)  # no model given: the default one; first start: the examples
    qtbot.addWidget(window)
    window.show()
    try:
        qtbot.waitUntil(lambda: window.bundle is not None and not window.busy and window.loader is None,
                        timeout=120_000)
        assert window.bundle.path.resolve() == default_model_dir().resolve()
        entries = window.spectra.entries
        assert len(entries) == 12 and any(e.spectrum.id == SOTALOL for e in entries)  # the examples, opened
        sources = window.libraries.controller.sources
        assert sorted(s.bundled for s in sources) == [True, True]  # the bundled structure and spectral libraries
        qtbot.waitUntil(lambda: all(s.state not in ("waiting", "opening") for s in sources), timeout=120_000)
        assert [s.state for s in sources] == ["open", "open"], [(s.name, s.error) for s in sources]

        entry = next(e for e in entries if e.spectrum.id == SOTALOL)
        window.select_entry(entry.key)
        with qtbot.waitSignal(window.run_finished, timeout=120_000) as blocker:
            window.run_selected()
        assert blocker.args == ["done"]
        result = entry.result
        assert result is not None and result.n_samples > 0 and result.candidates
        for c in result.candidates:  # valid molecules, all of the example's formula (checked here with RDKit)
            mol = Chem.MolFromSmiles(c.smiles)
            assert mol is not None and CalcMolFormula(mol) == c.formula == "C12H20N2O3S", c.smiles
        kinds = sorted(ref.kind for ref in entry.library_refs)  # the run searched both bundled libraries
        assert len(kinds) == 2 and kinds[0] != kinds[1]
        assert window.candidates.model.rowCount() > 0  # and the candidates are on screen
    finally:
        window.shutdown()
