"""The bad-input corpus (tests/bad_inputs.py): every input gives its exact message, good spectra go on."""

import bad_inputs
import pytest
from bad_inputs import CASES, Case, case_file_name, case_path, render_table, run_case, unreadable

from engine.cli import main


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gives_its_exact_message_and_good_spectra_are_read(case: Case, tmp_path):
    outcomes, error = run_case(case, tmp_path)
    assert error == case.error
    if case.many_read:
        assert outcomes and set(outcomes.values()) == {case.many_read}
    else:
        assert outcomes == case.expected
    if case.error is None:  # the good records of a file with bad ones are still read (mzML: no formula to run)
        assert any(o.startswith("read") or o == bad_inputs.NO_FORMULA for o in outcomes.values())


def test_the_corpus_has_the_kinds_the_issue_asks_for():
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


def test_committed_corpus_files_match_their_generator():
    stale = [c.name for c in CASES
             if c.committed and (bad_inputs.BAD_DIR / case_file_name(c)).read_bytes() != c.content]
    assert not stale, f"run `python tests/bad_inputs.py corpus`: {stale}"


def test_docs_table_is_up_to_date(tmp_path):
    assert bad_inputs.TABLE.read_text(encoding="utf-8") == render_table(tmp_path), (
        "run `python tests/bad_inputs.py table`"
    )


def _folder(path):
    path.mkdir()
    return path


def test_predict_on_every_bad_input_at_once(tmp_path, tiny_bundle_dir, capsys):
    """One `msgpt predict` over the whole corpus: one line per bad file, the rest runs, no traceback."""
    inputs = {c.name: case_path(c, _folder(tmp_path / c.name)) for c in CASES}
    expected = [o for c in CASES for o in run_case(c, _folder(tmp_path / f"again-{c.name}"))[0].values()]
    out = tmp_path / "out.csv"
    with unreadable(inputs["unreadable"]):
        # record by record, as the corpus describes them: no formula candidates, no merged scans
        rc = main(["predict", *map(str, inputs.values()), "-o", str(out), "--model", str(tiny_bundle_dir),
                   "--groups", "1", "--band", "1.0", "1.0", "--pool-size", "1", "--formulas", "0", "--no-merge", "-q"])
    err = capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err
    for case in CASES:
        if case.error:
            assert f"error: {inputs[case.name]}: {case.error.removeprefix('file error: ')}\n" in err
    n_read = sum(o.startswith("read") for o in expected)
    n_notes = sum(o.startswith("read; note") for o in expected)
    assert f"Processed {n_read} spectra" in err
    assert f"Skipped {len(expected) - n_read} spectra:" in err
    assert f"Notes on {n_notes} processed spectra:" in err
    assert f"{sum(bool(c.error) for c in CASES)} input file(s) could not be read" in err
    assert f"  {inputs['truncated']} #1 (bad): the file ends inside the record starting at line 27" in err
    assert out.is_file() and not out.with_name("out.csv.partial").exists()
