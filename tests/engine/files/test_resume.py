"""Long batches that survive interruptions: `msgpt predict --resume`, the journal, and full disks.

The reference is always an uninterrupted run with the same options; sampling is deterministic per
seed and spectrum, so an interrupted-then-resumed run must write exactly the same rows.
"""

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rdkit import Chem
from tiny_bundle import FIXTURE

from engine.cli import main
from engine.files import export
from engine.files.journal import JournalWriter, parse_journal

ROOT = Path(__file__).resolve().parents[3]
# fp32 as in-process runs (tests/conftest.py), so that a subprocess and a resume in the test agree on every CPU
FAST = ["--groups", "2", "--pool-size", "4", "--threads", "1", "--precision", "fp32", "-q"]


def repeated_fixture(path: Path, times: int) -> Path:
    """The fixture's 12 real records, ``times`` times over, each TITLE made unique."""
    text = FIXTURE.read_text()
    path.write_text("".join(re.sub(r"^TITLE=(.*)$", lambda m: f"TITLE={m.group(1)}-{k}", text, flags=re.M)
                            for k in range(times)))
    return path


def body(path: Path) -> list[str]:
    """An output without the time it was made (CSV: a header line; SDF: each record's msgpt_created)."""
    lines = path.read_text().splitlines()
    drop = {i + 1 for i, line in enumerate(lines) if line.startswith(">  <msgpt_created>")}
    return [line for i, line in enumerate(lines)
            if i not in drop and not line.startswith(("# created:", ">  <msgpt_created>"))]


def predict(inputs, out, bundle, *extra) -> int:
    return main(["predict", *map(str, inputs), "-o", str(out), "--model", str(bundle), *FAST, *extra])


@pytest.fixture(scope="module")
def batch(tmp_path_factory, tiny_bundle_dir):
    """24 records (20 run, 4 negative-mode ones skipped) and their uninterrupted CSV and SDF outputs."""
    folder = tmp_path_factory.mktemp("batch")
    mgf = repeated_fixture(folder / "batch.mgf", 2)
    for name in ("reference.csv", "reference.sdf"):
        assert predict([mgf], folder / name, tiny_bundle_dir) == 0
    return mgf, folder / "reference.csv", folder / "reference.sdf"


def interrupt_after(monkeypatch, n: int) -> None:
    """Ctrl+C after ``n`` spectra have been written (as the user would press it)."""
    real = export.CandidateWriter.write
    calls = {"n": 0}

    def write(self, result, **kwargs):
        calls["n"] += 1
        if calls["n"] > n:
            raise KeyboardInterrupt
        return real(self, result, **kwargs)

    monkeypatch.setattr(export.CandidateWriter, "write", write)


def interrupted_run(monkeypatch, capsys, mgf, out, bundle) -> None:
    """A run stopped by Ctrl+C after 2 spectra; the interruption and its output are cleared afterwards."""
    interrupt_after(monkeypatch, 2)
    assert predict([mgf], out, bundle) == 130
    monkeypatch.undo()
    capsys.readouterr()


def test_kill_9_then_resume_gives_the_uninterrupted_output(tmp_path, tiny_bundle_dir):
    """A real subprocess killed with SIGKILL mid-run, restarted with --resume: nothing lost, nothing doubled."""
    mgf = repeated_fixture(tmp_path / "long.mgf", 5)  # 60 records
    reference = tmp_path / "reference.csv"
    assert predict([mgf], reference, tiny_bundle_dir) == 0
    out = tmp_path / "out.csv"
    journal = tmp_path / "out.csv.journal"
    cmd = [sys.executable, "-m", "engine.cli", "predict", str(mgf), "-o", str(out), "--model", str(tiny_bundle_dir),
           *FAST]
    child = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while not (journal.is_file() and journal.read_bytes().count(b"\n") > 6):  # header + 6 spectra
            assert child.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert not out.exists() and (tmp_path / "out.csv.partial").is_file()  # killed before the end
    finished = len(parse_journal(journal.read_bytes()).entries)
    assert 6 <= finished < 60

    assert predict([mgf], out, tiny_bundle_dir, "--resume") == 0
    assert body(out) == body(reference)
    assert not journal.exists() and not (tmp_path / "out.csv.partial").exists()


def test_ctrl_c_keeps_finished_spectra_and_resume_completes_the_sdf(tmp_path, batch, tiny_bundle_dir, monkeypatch,
                                                                    capsys):
    mgf, _, reference = batch
    out = tmp_path / "out.sdf"
    interrupt_after(monkeypatch, 5)
    assert predict([mgf], out, tiny_bundle_dir) == 130
    err = capsys.readouterr().err
    assert f"Interrupted: 5 finished spectra are kept in {out}.partial. Run the same command with --resume" in err
    assert not out.exists()
    monkeypatch.undo()
    assert predict([mgf], out, tiny_bundle_dir, "--resume") == 0
    err = capsys.readouterr().err
    assert "--resume: going on after 5 spectra processed, 0 skipped in the interrupted run." in err
    assert "Processed 15 spectra" in err and "(and 5 in the interrupted run)" in err and "Skipped 4 spectra" in err
    assert body(out) == body(reference)
    assert len(list(Chem.SDMolSupplier(str(out)))) == len(list(Chem.SDMolSupplier(str(reference))))


def test_resume_drops_a_half_written_spectrum_and_a_torn_journal_line(tmp_path, batch, tiny_bundle_dir, monkeypatch):
    mgf, reference, _ = batch
    out = tmp_path / "out.csv"
    interrupt_after(monkeypatch, 3)
    assert predict([mgf], out, tiny_bundle_dir) == 130
    monkeypatch.undo()
    partial, journal = tmp_path / "out.csv.partial", tmp_path / "out.csv.journal"
    with open(partial, "a") as fh:  # what a kill in the middle of a spectrum leaves
        fh.write("MSBNK-half-written,1,CCO,LFQSCWFLJHTTHZ-UHFF")
    with open(journal, "ab") as fh:
        fh.write(b'{"input":0,"index":9,"id":"x","status":"do')
    assert predict([mgf], out, tiny_bundle_dir, "--resume") == 0
    assert body(out) == body(reference)


def test_an_interrupted_run_is_not_overwritten_without_resume(tmp_path, batch, tiny_bundle_dir, monkeypatch, capsys):
    mgf, _, _ = batch
    out = tmp_path / "out.csv"
    interrupted_run(monkeypatch, capsys, mgf, out, tiny_bundle_dir)
    assert predict([mgf], out, tiny_bundle_dir) == 2
    assert ("error: out.csv has an interrupted run (2 spectra processed, 0 skipped, kept in out.csv.partial and "
            "out.csv.journal). Add --resume to go on where it stopped, or delete out.csv.partial and "
            "out.csv.journal to start over.") in capsys.readouterr().err
    assert (tmp_path / "out.csv.partial").is_file()  # untouched


def test_resume_with_other_settings_is_refused(tmp_path, batch, tiny_bundle_dir, monkeypatch, capsys):
    mgf, _, _ = batch
    out = tmp_path / "out.csv"
    interrupted_run(monkeypatch, capsys, mgf, out, tiny_bundle_dir)
    assert predict([mgf], out, tiny_bundle_dir, "--resume", "--seed", "7") == 2
    err = capsys.readouterr().err
    assert "--resume: the interrupted run was made with other settings (parameters: " in err
    assert re.search(r"'kappa=[^']*seed=0 [^']*' → 'kappa=[^']*seed=7 [^']*'\)", err), err  # old → new settings
    assert "Give the same options, inputs and model, or delete out.csv.partial and out.csv.journal" in err


def test_resume_refuses_a_partial_output_shorter_than_its_journal(tmp_path, batch, tiny_bundle_dir, monkeypatch,
                                                                   capsys):
    mgf, _, _ = batch
    out = tmp_path / "out.csv"
    interrupt_after(monkeypatch, 3)
    assert predict([mgf], out, tiny_bundle_dir) == 130
    monkeypatch.undo()
    partial = tmp_path / "out.csv.partial"
    partial.write_bytes(partial.read_bytes()[:100])
    capsys.readouterr()
    assert predict([mgf], out, tiny_bundle_dir, "--resume") == 2
    assert re.search(r"out.csv.partial has 100 bytes, but out.csv.journal records \d+ bytes of finished spectra; "
                     r"the output was changed after the interruption. Delete", capsys.readouterr().err)


def test_resume_finishes_a_run_that_was_killed_before_its_rename(tmp_path, batch, tiny_bundle_dir, monkeypatch):
    mgf, reference, _ = batch
    out = tmp_path / "out.csv"
    real_replace = os.replace

    def killed_at_rename(src, dst):  # the last journal line ("complete") is written; the rename never happens
        if str(src).endswith(".partial"):
            raise KeyboardInterrupt
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_at_rename)
    with pytest.raises(KeyboardInterrupt):
        predict([mgf], out, tiny_bundle_dir)
    monkeypatch.undo()
    assert not out.exists() and parse_journal((tmp_path / "out.csv.journal").read_bytes()).complete
    assert predict([mgf], out, tiny_bundle_dir, "--resume") == 0
    assert body(out) == body(reference)
    assert not (tmp_path / "out.csv.journal").exists() and not (tmp_path / "out.csv.partial").exists()


def test_a_second_run_on_the_same_output_is_refused_while_the_first_holds_it(tmp_path, batch, tiny_bundle_dir,
                                                                              capsys):
    mgf, _, _ = batch
    out = tmp_path / "out.csv"
    holder = JournalWriter(tmp_path / "out.csv.journal")
    try:
        assert predict([mgf], out, tiny_bundle_dir) == 2
    finally:
        holder.close()
    assert "is locked: another msgpt predict is writing this output now" in capsys.readouterr().err


def test_journal_reading_stops_at_the_first_line_it_cannot_trust():
    header = {"journal": "msgpt-predict", "version": 1, "settings": {}, "info": {}, "offset": 10}
    done = {"input": 0, "index": 0, "id": "a", "status": "done", "rows": 2, "offset": 50}
    skipped = {"input": 0, "index": 1, "id": "b", "status": "skipped", "reason": "no peaks", "offset": 50}
    lines = [json.dumps(d).encode() + b"\n" for d in (header, done, skipped)]
    state = parse_journal(b"".join(lines) + b'{"input": 0, "ind')  # a torn last line
    assert (state.header, state.entries, state.offset) == (header, [done, skipped], 50)
    assert state.good_bytes == sum(map(len, lines)) and state.keys() == {(0, 0), (0, 1)}
    assert state.counts() == "1 spectrum processed, 1 skipped"
    odd = dict(done, rows="2")  # not what msgpt writes: everything from here on is ignored
    state = parse_journal(b"".join([lines[0], json.dumps(odd).encode() + b"\n", lines[2]]))
    assert state.entries == [] and state.offset == 10
    assert parse_journal(b"not json\n").header is None


def _limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_full_disk_mid_run_keeps_finished_spectra_and_the_earlier_output(tmp_path, batch, tiny_bundle_dir):
    """Files can grow to 2,500 bytes only (RLIMIT_FSIZE: the disk is 'full'); then --resume completes the run."""
    mgf, reference, _ = batch
    out = tmp_path / "out.csv"
    out.write_text("an earlier output\n")
    cmd = [sys.executable, "-m", "engine.cli", "predict", str(mgf), "-o", str(out), "--model", str(tiny_bundle_dir),
           *FAST]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=_limit_file_size(2500))
    assert p.returncode == 2, p.stderr
    # the partial output or the journal, whichever grows past the limit first
    assert re.search(rf"error: Cannot write {re.escape(str(out))}(\.journal)?: File too large\. Free some space, or "
                     rf"choose another folder\.( An earlier file of that name, if any, is unchanged\.)? The \d+ "
                     rf"finished spectra are kept in {re.escape(str(out))}\.partial; run the same command with "
                     rf"--resume to go on\.\n", p.stderr), p.stderr
    assert "Traceback" not in p.stderr
    assert out.read_text() == "an earlier output\n"
    assert predict([mgf], out, tiny_bundle_dir, "--resume") == 0
    assert body(out) == body(reference)


def test_export_disk_full_or_no_permission_keeps_the_earlier_file(tmp_path, monkeypatch):
    from engine.errors import OutputError

    target = tmp_path / "c.csv"
    target.write_text("earlier\n")

    def no_space(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export.os, "fsync", no_space)
    with pytest.raises(OutputError, match=r"^Cannot write .*c\.csv: No space left on device\. Free some space, or "
                                          r"choose another folder\. An earlier file of that name, if any, is "
                                          r"unchanged\.$"):
        export.export_results(target, [], {"model": "tiny"})
    monkeypatch.undo()

    def denied(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(export.os, "replace", denied)
    with pytest.raises(OutputError, match=r"Permission denied\. Choose a folder you may write to\. An earlier file"):
        export.export_results(target, [], {"model": "tiny"})
    assert target.read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv"]  # no temporary file left behind
