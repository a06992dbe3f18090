"""Issue 17 in the app: novelty column and filter, the fingerprint-bits tab with the bit legend, scoring a
structure of your own (typed or pasted from a sketcher), File ▸ Export Posteriors. Offscreen, tiny bundle."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QMimeData
from PySide6.QtGui import QGuiApplication
from rdkit import Chem

from engine.chem import molecules as chem
from engine.elucidation.pipeline import compute_posterior
from engine.files.posteriors import read_posteriors
from engine.insight.structure_score import SCORE_COLUMNS
from engine.model.bitlegend import FILE_NAME as LEGEND_FILE
from engine.model.known import FILE_NAME as KNOWN_FILE
from engine.model.known import KnownStructures
from msgpt_gui.novelty_view import FILTERS, NoveltyCandidatesModel
from training.bundle.bit_legend import build_legend

SITAGLIPTIN = "MSBNK-Eawag-EA290310"
NICOTINE = "MSBNK-NaToxAq-NA003084"
NICOTINE_SMILES = "CN1CCCC1c1cccnc1"


def run_gen(gen):
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return stop.value


@pytest.fixture(scope="module")
def insight_bundle(tmp_path_factory, tiny_bundle_dir):
    """The tiny bundle with a bit legend (from the fixture's structures) and a training-corpus set holding
    nicotine only."""
    from tiny_bundle import fixture_spectra

    folder = Path(shutil.copytree(tiny_bundle_dir, tmp_path_factory.mktemp("insights") / "bundle"))
    run_gen(build_legend([s.smiles for s in fixture_spectra()], source="fixture structures")).save(folder / LEGEND_FILE)
    KnownStructures.from_keys([chem.inchikey14(NICOTINE_SMILES)], "tiny corpus").save(folder / KNOWN_FILE)
    return folder


def load(qtbot, window, path):
    with qtbot.waitSignal(window.file_loaded, timeout=20_000):
        window.files.open_files([path])


def run(qtbot, window, entries):
    with qtbot.waitSignal(window.run_finished, timeout=60_000) as blocker:
        assert window.run_menu.run_entries(entries)
    assert blocker.args == ["done"]


def entry(window, title):
    return next(e for e in window.spectra.entries if e.id == title)


def novelty_column(window) -> list[str]:
    proxy = window.candidates.proxy
    return [proxy.index(r, NoveltyCandidatesModel.NOVELTY).data() for r in range(proxy.rowCount())]


def test_candidates_are_marked_and_filtered_by_novelty_and_exported_with_it(qtbot, make_window, write_mgf,
                                                                             insight_bundle, tmp_path):
    window = make_window(model=insight_bundle)
    assert window.bundle.known_structures is not None
    mine = tmp_path / "mine.csv"
    mine.write_text(f"name,smiles\nsitagliptin,{entry_smiles(SITAGLIPTIN)}\n")
    with qtbot.waitSignal(window.insights.novelty.list_loaded, timeout=20_000) as blocker:
        window.insights.novelty.load_list(mine)
    assert blocker.args == [str(mine)] and window.insights.act_forget_list.isEnabled()
    assert window.settings.get("novelty/known_list", "", str) == str(mine)  # remembered for the next start

    load(qtbot, window, write_mgf("two.mgf", titles={SITAGLIPTIN, NICOTINE}))
    run(qtbot, window, list(window.spectra.entries))
    window.select_entry(entry(window, NICOTINE).key)
    assert novelty_column(window)[0] == "training corpus"
    window.select_entry(entry(window, SITAGLIPTIN).key)
    assert novelty_column(window)[0] == "user list"

    combo = window.candidates.novelty_filter
    combo.setCurrentIndex([label for label, _ in FILTERS].index("New only"))
    assert all(label == "new" for label in novelty_column(window))
    assert window.candidates.proxy.rowCount() < window.candidates.model.rowCount()  # the reference is hidden
    combo.setCurrentIndex(0)
    assert window.candidates.proxy.rowCount() == window.candidates.model.rowCount()

    path = tmp_path / "c.csv"
    with qtbot.waitSignal(window.export_finished, timeout=30_000):
        window.files.export(path, "all")
    lines = path.read_text().splitlines()
    assert any(line.startswith("# novelty: training corpus: tiny corpus; user list: mine.csv") for line in lines)
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    refs = {r["spectrum_id"]: r["novelty"] for r in rows if r["is_reference"] == "yes"}
    assert refs == {NICOTINE: "training corpus", SITAGLIPTIN: "user list"}

    window.insights.novelty.clear_list()
    assert novelty_column(window)[0] == "new" and not window.insights.act_forget_list.isEnabled()


def entry_smiles(title):
    from tiny_bundle import fixture_spectra

    return next(s.smiles for s in fixture_spectra() if s.id == title)


def test_a_bad_known_list_is_refused_with_a_message(qtbot, make_window, tmp_path):
    window = make_window()
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing\n")
    with qtbot.waitSignal(window.insights.novelty.list_loaded, timeout=20_000) as blocker:
        window.insights.novelty.load_list(bad)
    assert blocker.args == [""] and "no structure found" in window.messages[-1][1]


def test_bits_tab_lists_the_top_bits_with_their_fragments(qtbot, make_window, write_mgf, insight_bundle):
    window = make_window(model=insight_bundle)
    load(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    e = entry(window, NICOTINE)
    window.select_entry(e.key)
    bits = window.insights.bits
    assert bits.rows == []  # nothing is computed while the tab is hidden
    window.insights.tabs.setCurrentWidget(bits)
    assert len(bits.rows) == 25 and bits.table.rowCount() == 25
    posterior = compute_posterior(window.bundle, e.spectrum)
    assert [r.bit for r in bits.rows] == np.argsort(-posterior, kind="stable")[:25].tolist()
    assert "legend: " in bits.summary.text()
    legend = window.bundle.bit_legend
    for r, row in enumerate(bits.rows):
        if row.bit in legend:
            assert bits.table.item(r, 5).text().startswith(legend.environments(row.bit)[0].smiles)
    bits.order.setCurrentIndex(1)  # most specific: π against the bit's frequency among the legend's molecules
    f = np.array([max(legend.frequency(b), 1 / (legend.n_molecules + 1)) for b in range(4096)])
    specific = posterior.astype(np.float64) * np.log(np.maximum(posterior, 1e-12) / f)
    assert [r.bit for r in bits.rows] == np.argsort(-specific, kind="stable")[:25].tolist()
    assert "most specific" in bits.summary.text()
    bits.order.setCurrentIndex(0)
    bits.count.setValue(10)
    assert bits.table.rowCount() == 10

    run(qtbot, window, [e])  # with a candidate selected, the Candidate column says which bits it has
    candidate = window.candidates.detail.candidate
    assert candidate is not None
    have = set(candidate.bits.tolist())
    assert [bits.table.item(r, 3).text() for r in range(10)] == ["✓" if row.bit in have else "✗" for row in bits.rows]


def test_bits_tab_without_a_legend_or_formula_says_why(qtbot, make_window, write_mgf):
    window = make_window()
    load(qtbot, window, write_mgf("bare.mgf", titles={NICOTINE}, drop_keys=("FORMULA",)))
    window.select_entry(window.spectra.entries[0].key)
    window.insights.tabs.setCurrentWidget(window.insights.bits)
    assert window.insights.bits.rows == [] and "No posterior" in window.insights.bits.summary.text()
    load(qtbot, window, write_mgf("one.mgf", titles={SITAGLIPTIN}))
    window.select_entry(entry(window, SITAGLIPTIN).key)
    assert len(window.insights.bits.rows) == 25
    assert "ships no bit legend" in window.insights.bits.summary.text()


def test_score_a_typed_and_a_pasted_structure_and_export_them(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    load(qtbot, window, write_mgf("one.mgf", titles={NICOTINE}))
    e = entry(window, NICOTINE)
    window.select_entry(e.key)
    run(qtbot, window, [e])
    panel = window.insights.score
    window.insights.tabs.setCurrentWidget(panel)
    panel.input.setPlainText(f"{NICOTINE_SMILES}\nCCO")
    with qtbot.waitSignal(panel.scored, timeout=30_000) as blocker:
        panel.score_button.click()
    nicotine, ethanol = blocker.args[0]
    assert nicotine.formula_match and nicotine.candidate_rank == 1 and nicotine.fingerprint_rank == 1
    assert nicotine.decoder_logp > ethanol.decoder_logp and not ethanol.formula_match
    assert panel.table.rowCount() == 2 and panel.table.item(0, 2).text().startswith("✗")  # newest first

    # paste from a sketcher: a molfile flavour on the clipboard
    mime = QMimeData()
    mime.setData("chemical/x-mdl-molfile", Chem.MolToMolBlock(Chem.MolFromSmiles(NICOTINE_SMILES)).encode())
    QGuiApplication.clipboard().setMimeData(mime)
    panel.paste()
    assert "M  END" in panel.input.toPlainText()
    rows = panel.score()
    assert len(rows) == 1 and rows[0].smiles == nicotine.smiles and rows[0].decoder_logp == pytest.approx(
        nicotine.decoder_logp)

    panel.input.clear()
    panel.input.paste()  # Ctrl+V in the box takes the molfile flavour as well
    assert "M  END" in panel.input.toPlainText()

    QGuiApplication.clipboard().setText("not a structure")
    panel.paste()
    panel.score()
    assert "not a structure RDKit can read" in panel.table.item(0, 9).text()

    out = tmp_path / "scores.csv"
    assert panel.export(str(out))
    lines = out.read_text().splitlines()
    data = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert list(data[0]) == list(SCORE_COLUMNS) and len(data) == 4 and data[0]["smiles"] == nicotine.smiles

    window.select_entry(e.key)
    panel.clear()
    assert panel.table.rowCount() == 0 and not panel.export_button.isEnabled()


def test_scoring_waits_for_a_model_and_a_spectrum(qtbot, make_window):
    window = make_window()
    panel = window.insights.score
    assert not panel.score_button.isEnabled() and "Select a spectrum" in panel.score_button.toolTip()
    panel.input.setPlainText("CCO")
    assert panel.score() == []


def test_export_posteriors_of_selected_spectra(qtbot, make_window, write_mgf, tmp_path):
    window = make_window()
    load(qtbot, window, write_mgf("two.mgf", titles={SITAGLIPTIN, NICOTINE}))
    first = entry(window, SITAGLIPTIN)
    run(qtbot, window, [first])  # one ran, the other is computed for the export
    window.spectra_view.selectAll()
    path = tmp_path / "p.npz"
    with qtbot.waitSignal(window.insights.posteriors_exported, timeout=30_000) as blocker:
        assert window.insights.export_posteriors(path)
    assert blocker.args == [str(path), 2]
    z = read_posteriors(path)
    assert sorted(z.ids.tolist()) == sorted([SITAGLIPTIN, NICOTINE])
    for s, title in enumerate(z.ids):
        assert np.allclose(z.posteriors[s], compute_posterior(window.bundle, entry(window, str(title)).spectrum),
                           atol=1e-6)
    assert z.n_thresholds == window.query_params.groups
    assert window.insights.act_export_posteriors.text().startswith("Export &Posteriors")
