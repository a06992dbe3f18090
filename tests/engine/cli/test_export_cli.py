"""CSV/SDF export (atomic) and the `msgpt` command line, on the tiny bundle."""

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from rdkit import Chem
from tiny_bundle import FIXTURE, fixture_spectra

from engine.cli import main
from engine.elucidation.pipeline import QueryParams, SpectrumSession
from engine.errors import ConfigError
from engine.files.export import CSV_COLUMNS, CandidateWriter, export_results


def read_csv(path):
    lines = Path(path).read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    rows = list(csv.DictReader(io.StringIO("\n".join(line for line in lines if not line.startswith("#")))))
    return header, rows


@pytest.fixture(scope="module")
def results(tiny_bundle):
    out = []
    for s in fixture_spectra()[:3]:
        gen = SpectrumSession(tiny_bundle, s).run(QueryParams())
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                out.append(stop.value)
                break
    return out


def test_csv_round_trip(tmp_path, results):
    info = {"model": "tiny", "model_checksum": "abc", "parameters": QueryParams().describe(), "seed": "0"}
    n = export_results(tmp_path / "c.csv", results, info)
    header, rows = read_csv(tmp_path / "c.csv")
    assert "# model_checksum: abc" in header and any("seed=0" in h for h in header)
    assert list(rows[0]) == list(CSV_COLUMNS) and len(rows) == n == sum(len(r.candidates) for r in results)
    first = results[0]
    mine = [r for r in rows if r["spectrum_id"] == first.spectrum.id]
    assert [int(r["rank"]) for r in mine] == list(range(1, len(first.candidates) + 1))
    assert mine[0]["smiles"] == first.candidates[0].smiles and mine[0]["InChIkey2D"] == first.candidates[0].inchikey14
    assert mine[0]["is_reference"] in ("yes", "no")


def test_sdf_round_trip_with_2d_coordinates_and_properties(tmp_path, results):
    export_results(tmp_path / "c.sdf", results, {"model": "tiny", "seed": "0"}, top=2)
    mols = [m for m in Chem.SDMolSupplier(str(tmp_path / "c.sdf"))]
    assert len(mols) == sum(min(2, len(r.candidates)) for r in results)
    m = mols[0]
    assert m.GetNumConformers() == 1 and not m.GetConformer().Is3D()
    assert m.GetProp("InChIKey1") == results[0].candidates[0].inchikey14
    assert m.GetProp("MolecularFormula") == results[0].spectrum.formula
    assert m.GetProp("msgpt_model") == "tiny" and m.GetProp("rank") == "1"


def test_failed_export_keeps_the_earlier_file(tmp_path, results):
    target = tmp_path / "c.csv"
    target.write_text("earlier\n")
    with pytest.raises(RuntimeError):
        with CandidateWriter(target, {}) as w:
            w.write(results[0])
            raise RuntimeError("disk on fire")
    assert target.read_text() == "earlier\n"
    assert list(tmp_path.iterdir()) == [target]  # no temporary file left behind


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
@pytest.mark.parametrize("suffix", [".csv", ".sdf"])
@pytest.mark.parametrize("named_partial", [False, True])
def test_exports_get_the_permissions_of_an_ordinary_new_file(tmp_path, results, umask, mode, suffix, named_partial):
    import os
    import stat

    target = tmp_path / f"c{suffix}"
    old = os.umask(umask)
    try:
        partial = tmp_path / f"c{suffix}.partial" if named_partial else None
        with CandidateWriter(target, {"model": "tiny"}, partial=partial) as w:
            w.write(results[0])
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == mode


def test_export_rejects_unknown_extension(tmp_path):
    with pytest.raises(ConfigError, match="use a .csv or .sdf"):
        CandidateWriter(tmp_path / "c.xlsx", {})


def test_cli_predict_csv(tmp_path, tiny_bundle_dir, capsys):
    """--device is obeyed, or the fallback said: where there is no GPU, cuda falls back to the CPU saying so;
    where there is one, cpu runs on the CPU."""
    has_cuda = __import__("torch").cuda.is_available()
    out = tmp_path / "out.csv"
    rc = main(["predict", str(FIXTURE), "-o", str(out), "--model", str(tiny_bundle_dir), "--top", "3", "-q",
               "--device", "cpu" if has_cuda else "cuda"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "Processed 10 spectra" in err and "Skipped 2 spectra" in err
    assert "adduct [M-H]- is not supported" in err
    if has_cuda:
        assert "Running on CPU (" in err and "CUDA was requested" not in err
    else:
        assert "CUDA was requested but is not available here; running on CPU." in err
        assert "Running on CPU (" not in err
    header, rows = read_csv(out)
    assert {r["spectrum_id"] for r in rows} <= {s.id for s in fixture_spectra()}
    assert max(int(r["rank"]) for r in rows) <= 3
    assert any(h.startswith("# model: tiny-test-bundle") for h in header)


def test_cli_forced_formula_and_pool_size(tmp_path, tiny_bundle_dir, capsys):
    mgf = tmp_path / "one.mgf"
    text = FIXTURE.read_text().split("END IONS")[1] + "END IONS\n"  # second record, N-acetylphenylalanine
    mgf.write_text(text.replace("FORMULA=C11H13NO3\n", ""))
    out = tmp_path / "one.sdf"
    rc = main(["predict", str(mgf), "-o", str(out), "--model", str(tiny_bundle_dir), "--formula", "C11H13NO3",
               "--pool-size", "40", "--groups", "4", "--suspects-present", "0.9", "-q"])
    assert rc == 0, capsys.readouterr().err
    mols = list(Chem.SDMolSupplier(str(out)))
    assert mols and all(m.GetProp("MolecularFormula") == "C11H13NO3" for m in mols)
    assert "B=40" in mols[0].GetProp("msgpt_parameters")
    assert "suspects_present=0.9" in mols[0].GetProp("msgpt_parameters")  # what the suspect confidence assumed
    assert "adapter=off" in mols[0].GetProp("msgpt_parameters")  # the tiny bundle has none: say what ran


def test_cli_nothing_processed_exits_nonzero_and_writes_nothing(tmp_path, tiny_bundle_dir, capsys):
    out = tmp_path / "out.csv"
    rc = main(["predict", str(FIXTURE), "-o", str(out), "--model", str(tiny_bundle_dir), "--adduct", "[M-H]-", "-q"])
    assert rc == 1 and not out.exists()
    assert "Processed 0 spectra" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--pool-size", "150"], "use 140 or 160"),
        (["--band", "1.5", "1.0"], "must not exceed"),
        (["--groups", "1"], "point query at a single κ"),
        (["--suspects-present", "1"], "between 0 and 1"),
    ],
)
def test_cli_bad_parameters_give_one_line(tmp_path, tiny_bundle_dir, capsys, args, message):
    rc = main(["predict", str(FIXTURE), "-o", str(tmp_path / "o.csv"), "--model", str(tiny_bundle_dir), *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err


def test_cli_bad_input_file_and_bad_model(tmp_path, tiny_bundle_dir, capsys):
    bad = tmp_path / "garbage.mgf"
    bad.write_bytes(b"\x00\x01\x02garbage")
    rc = main(["predict", str(bad), str(FIXTURE), "-o", str(tmp_path / "o.csv"), "--model", str(tiny_bundle_dir), "-q"])
    err = capsys.readouterr().err
    assert rc == 0 and "garbage.mgf" in err and "could not be read" in err
    rc = main(["predict", str(FIXTURE), "-o", str(tmp_path / "o.csv"), "--model", str(tmp_path / "none")])
    assert rc == 2 and "does not exist" in capsys.readouterr().err


def test_cli_info(tiny_bundle_dir, capsys):
    assert main(["info", "--model", str(tiny_bundle_dir)]) == 0
    out = capsys.readouterr().out
    assert "D_enc=" in out and "decoder total" in out
    assert "fragment score (forward model): none" in out  # the tiny bundle ships no forward model
    assert "confidence of a suspect-list rank 1: none" in out


def test_console_entry_point_runs(tmp_path, tiny_bundle_dir):
    out = tmp_path / "o.csv"
    p = subprocess.run([sys.executable, "-m", "engine.cli", "predict", str(FIXTURE), "-o", str(out),
                        "--model", str(tiny_bundle_dir), "--pool-size", "20", "--groups", "2", "--top", "1",
                        "--precision", "fp32"],  # as in-process runs (tests/conftest.py): the same arithmetic on every CPU
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "spectra" in p.stderr and out.is_file()  # tqdm progress and the summary go to stderr
