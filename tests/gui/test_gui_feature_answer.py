"""The app shows each feature's answer (issue #54): its table is the feature's ranking, exactly ``msgpt predict``'s
``feature_rank``, with the libraries on and after a suspect list is added to a spectrum that ran already (the
libraries' formula runs are worked out again, the samples kept); the evidence cells read at a glance."""

from __future__ import annotations

import csv
import io

import pytest
from PySide6.QtCore import Qt

from engine.cli import main as cli_main
from msgpt_gui.candidates_model import CandidatesModel
from msgpt_gui.logic import evidence
from msgpt_gui.models import SpectraModel

NICOTINE = "MSBNK-NaToxAq-NA003084"
SITAGLIPTIN = "MSBNK-Eawag-EA290310"
REFERENCES = {SITAGLIPTIN, NICOTINE}
# a suspect of another formula within the precursor's tolerance (C7H15FN2O [M+H]+, 7 ppm from nicotine's): Run
# never takes it among its best formula candidates (k = 1), so only the suspect list's mass track brings it in
SUSPECT = "2-amino-3-fluoro-N-methyl-N-propylpropanamide"
SUSPECTS_CSV = f"name,smiles\n{SUSPECT},NC(CF)C(=O)N(C)CCC\nNicotine,CN1CCCC1C1=CN=CC=C1\n"
FAST = ("--groups", "2", "--pool-size", "4", "--formulas", "1", "-q", "--no-bundled-libraries")


def csv_rows(path):
    text = "\n".join(line for line in path.read_text().splitlines() if not line.startswith("#"))
    return list(csv.DictReader(io.StringIO(text)))


def predict_rank1(tmp_path, bundle_dir, run, *libraries) -> dict[str, tuple[str, str]]:
    """``msgpt predict``'s feature_rank 1 of each spectrum: (InChIKey first block, formula)."""
    out = tmp_path / f"predict{len(libraries)}.csv"
    args = ["predict", str(run), "-o", str(out), "--model", str(bundle_dir), *FAST]
    for kind, path in libraries:
        args += [f"--{kind}-library", str(path)]
    assert cli_main(args) == 0
    return {r["spectrum_id"]: (r["InChIkey2D"], r["formula"]) for r in csv_rows(out) if r["feature_rank"] == "1"}


def app_rank1(window) -> dict[str, tuple[str, str]]:
    """The app's rank 1 of each listed spectrum, as its table shows it (selected in turn)."""
    out = {}
    for e in window.spectra.entries:
        window.select_entry(e.key)
        model = window.candidates.model
        first = model.candidate(window.candidates.proxy.mapToSource(window.candidates.proxy.index(0, 0)).row())
        assert first.rank == 1
        out[e.id] = (first.inchikey14, first.formula)
        # the summary and the spectra list describe the same candidate
        assert first.formula in window.candidates.summary.text()
        level = window.spectra.index_of(e.key, SpectraModel.LEVEL).data()
        assert level and level.split()[0] in window.candidates.summary.text()
    return out


def run_and_wait(qtbot, window, start):
    with qtbot.waitSignal(window.run_finished, timeout=180_000) as blocker:
        assert start() is not False
    assert blocker.args == ["done"]


@pytest.fixture
def suspects(tmp_path):
    path = tmp_path / "pesticide suspects.csv"
    path.write_text(SUSPECTS_CSV)
    return path


def test_the_app_shows_msgpt_predicts_feature_rank_also_after_a_suspect_list_is_added(
        qtbot, make_window, write_mgf, suspects, gui_bundle_dir, tmp_path):
    from test_gui_libraries import add_and_wait

    run = write_mgf("run.mgf", titles=REFERENCES, drop_keys=("FORMULA", "ADDUCT", "SMILES", "INCHIKEY"))
    references = write_mgf("refs.mgf", titles=REFERENCES)
    window = make_window()
    window.params_panel.groups.setValue(2)
    window.params_panel.pool.setValue(4)
    window.formulas.panel.k.setValue(1)
    add_and_wait(qtbot, window.libraries.controller, references)  # libraries on: a spectral library
    with qtbot.waitSignal(window.file_loaded, timeout=30_000):
        window.files.open_files([run])
    run_and_wait(qtbot, window, window.run_menu.run_all)
    before = app_rank1(window)
    assert before == predict_rank1(tmp_path, gui_bundle_dir, run, ("spectral", references))
    nicotine = next(e for e in window.spectra.entries if e.id == NICOTINE)
    assert [r.spectrum.formula for r in nicotine.formula_runs] == ["C10H14N2"]  # the best formula only (k = 1)
    kept = {r.key: r.result for r in nicotine.formula_runs}

    # a suspect list added after the first Run: only what it changes runs again, the samples stay
    with qtbot.waitSignal(window.run_finished, timeout=180_000):
        add_and_wait(qtbot, window.libraries.controller, suspects)
    formulas = [r.spectrum.formula for r in nicotine.formula_runs]
    assert formulas == ["C10H14N2", "C7H15FN2O"]  # the suspect's mass-track formula ran
    first = nicotine.formula_runs[0]
    assert first.key in kept and first.result is not kept[first.key] and first.result.new_samples == 0
    assert "Libraries changed" in window.statusBar().currentMessage() and "C7H15FN2O" in window.statusBar().currentMessage()
    after = app_rank1(window)
    assert after == predict_rank1(tmp_path, gui_bundle_dir, run, ("spectral", references), ("structure", suspects))

    # the suspect's row: named, its list's own name in the Origin cell; the feature's ranking holds both formulas
    window.select_entry(nicotine.key)
    model = window.candidates.model
    rows = [model.candidate(i) for i in range(model.rowCount())]
    assert {c.formula for c in rows} == {"C10H14N2", "C7H15FN2O"}
    row = next(i for i, c in enumerate(rows) if c.formula == "C7H15FN2O")
    assert model.index(row, CandidatesModel.NAME).data() == SUSPECT
    assert "◆ pesticide sus…" in model.index(row, CandidatesModel.ORIGIN).data()
    assert "Suspect list: pesticide suspects" in model.index(row, CandidatesModel.ORIGIN).data(
        Qt.ItemDataRole.ToolTipRole)
    assert evidence.inchikey(rows[row]).startswith(rows[row].inchikey14)  # InChIKey always filled

    # unticking the list takes its mass-track run out again
    source = next(s for s in window.libraries.controller.sources if s.path.endswith("suspects.csv"))
    with qtbot.waitSignal(window.run_finished, timeout=180_000):
        window.libraries.controller.set_enabled(source, False)
    assert [r.spectrum.formula for r in nicotine.formula_runs] == ["C10H14N2"]
    assert "dropped 1 formula run" in window.statusBar().currentMessage()


def test_origin_tags_are_short_and_say_each_source():
    from engine.elucidation.ranking import Candidate, SpectralEvidence

    def cand(**kw):
        base = dict(rank=1, smiles="CCO", inchikey="", inchikey14="LFQSCWFLJHTTHZ", formula="C2H6O", count=0,
                    frequency=0.0, posterior_similarity=0.0, bits=None)
        return Candidate(**{**base, **kw})

    hit = SpectralEvidence(0.91, 12, "MSBNK-X", "refs.mgf", identified=True, reference_name="ethanol")
    weak = SpectralEvidence(0.04, 2, "MSBNK-Y", "refs.mgf", identified=False)
    assert evidence.origin_text(cand(count=3)) == "de novo"
    assert evidence.origin_text(cand(origin="de_novo;structure_library;spectral_library", count=3, spectral=hit,
                                     library="MS-GPT bundled structures;my pesticide list", suspect=True)) == \
        "✔ 2a · ◆ my pesticide… · de novo"
    assert evidence.origin_text(cand(origin="structure_library", library="MS-GPT bundled structures")) == "library"
    # a weak hit the engine left out of the origin: not a tag, but in the tooltip
    c = cand(origin="de_novo", count=2, spectral=weak)
    assert evidence.origin_text(c) == "de novo" and "not counted" in evidence.origin_tooltip(c)
    assert evidence.reference_text(cand(spectral=hit)) == "MSBNK-X"
    assert evidence.name_text(cand(spectral=hit)) == "ethanol"
    assert evidence.inchikey(cand()) == "LFQSCWFLJHTTHZ-UHFFFAOYSA-N"
    longest = cand(origin="de_novo;structure_library;spectral_library", count=3, spectral=hit,
                   library="MS-GPT bundled structures;a very long suspect list name", suspect=True)
    assert evidence.origin_cell(longest).splitlines() == evidence.origin_tags(longest)
    assert len(evidence.ORIGIN_SAMPLE) == max(len(line) for line in evidence.origin_tags(longest))
