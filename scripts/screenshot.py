"""Screenshot of MS-GPT Desktop for the README: the real app on a virtual screen (Xvfb).

Starts the app as ``msgpt-gui`` does, opens spectra (the bundled examples, or ``--files``),
runs one spectrum, waits for its candidates, selects the best one and saves a grab of the window::

    python scripts/screenshot.py                                  # bundled model + examples
    python scripts/screenshot.py --model BUNDLE --files tests/data/fixture.mgf

Without a display it starts ``Xvfb`` itself (Debian: ``apt-get install xvfb``; Qt's xcb plugin
also wants ``libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1``). Settings go to a throw-away
MSGPT_HOME, so the user's own settings are never touched. The README's picture is
``python scripts/screenshot.py --spectrum MSBNK-BGC_Munich-RP010703`` (an example that gets
candidates at B=100 from the bundled model); ``--tab bits`` and ``--tab score --score SMILES`` show
the other tabs below the spectrum. Without a bundled model, use the tiny test one
(``--model tests/data/tiny_bundle --files tests/data/fixture.mgf``).

An LC-MS/MS run is listed by precursor feature; ``--spectrum`` also takes a feature's short ID (``F0003``),
``--tab formulas`` shows its formula candidates and MS1 isotope pattern, and ``--expand`` opens the feature's
scans in the list. The README's DDA picture::

    python scripts/screenshot.py --files ../shared/data/mzml/qexactive_dda_msv000084630.mzML \
        --spectrum F0039 --tab formulas --expand --list-width 700 --out docs/screenshot_dda.png
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="model bundle folder (default: the bundled model)")
    p.add_argument("--files", nargs="+", help="spectra files (default: resources/examples/*)")
    p.add_argument("--spectrum", help="TITLE (or 1-based row) of the spectrum to run; "
                   "default: the runnable spectrum with the most peaks")
    p.add_argument("--out", default=str(ROOT / "docs" / "screenshot.png"), help="PNG to write")
    p.add_argument("--size", default="1280x800", help="window size WxH (default 1280x800, a laptop's screen)")
    p.add_argument("--suspects", nargs="+", default=[], metavar="FILE",
                   help="structure libraries to add as suspect lists (Run ▸ Libraries…) before the run")
    p.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda"))
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for the model and the run")
    p.add_argument("--tab", choices=("candidates", "formulas", "bits", "score"), default="candidates",
                   help="the tab below the spectrum: candidates (default), formula candidates, fingerprint bits, or "
                        "score a structure")
    p.add_argument("--expand", action="store_true", help="show the scans of the selected precursor feature")
    p.add_argument("--no-run", action="store_true", help="select the spectrum without running it")
    p.add_argument("--list-width", type=int, help="width of the spectra list in pixels (default: the app's)")
    p.add_argument("--select-edit", action="store_true",
                   help="select the best candidate an isomer edit made (no sample drew it) instead of the best one")
    p.add_argument("--suspects-present", type=int, metavar="PERCENT",
                   help="set Run ▸ Libraries…'s share of the suspect lists' matches that are real before the run")
    p.add_argument("--libraries-dialog", action="store_true",
                   help="also grab the Libraries dialog, into OUT with _libraries before the suffix")
    p.add_argument("--score", nargs="+", default=[], metavar="SMILES",
                   help="with --tab score: structures to score against the spectrum before the grab")
    return p.parse_args(argv)


def start_xvfb(width: int, height: int) -> subprocess.Popen | None:
    """Start Xvfb on a free display and point DISPLAY at it (None when a display exists)."""
    if os.environ.get("DISPLAY"):
        return None
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        sys.exit("No display and no Xvfb: install it (Debian: apt-get install xvfb) or run under xvfb-run.")
    for n in range(90, 140):
        if Path(f"/tmp/.X{n}-lock").exists() or Path(f"/tmp/.X11-unix/X{n}").exists():
            continue
        proc = subprocess.Popen(
            [xvfb, f":{n}", "-screen", "0", f"{width + 200}x{height + 200}x24", "-nolisten", "tcp", "-dpi", "96"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            if Path(f"/tmp/.X11-unix/X{n}").exists():
                os.environ["DISPLAY"] = f":{n}"
                return proc
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        proc.kill()
    sys.exit("Could not start Xvfb on any display :90-:139.")


def main(argv=None) -> int:
    args = parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    xvfb = start_xvfb(width, height)
    home = tempfile.mkdtemp(prefix="msgpt-screenshot-")
    os.environ["MSGPT_HOME"] = home
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb")
    try:
        return shoot(args, width, height)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if xvfb is not None:
            xvfb.terminate()
            xvfb.wait(5)


def shoot(args, width: int, height: int) -> int:
    from engine.paths import examples_dir
    from msgpt_gui.app import create_window

    files = args.files or sorted(str(p) for p in examples_dir().glob("*") if p.is_file() and p.name != "__init__.py")
    if not files:
        sys.exit(f"No example spectra in {examples_dir()}; give --files.")
    argv = ["--device", args.device, *(["--model", args.model] if args.model else []), *files]
    app, window = create_window(argv)
    from PySide6.QtCore import QEventLoop, QTimer

    def wait(condition, what: str, timeout: float = args.timeout) -> None:
        t0 = time.perf_counter()
        while not condition():
            if time.perf_counter() - t0 > timeout:
                sys.exit(f"Timed out waiting for {what}.")
            loop = QEventLoop()
            QTimer.singleShot(25, loop.quit)
            loop.exec()

    window.resize(width, height)
    window.move(0, 0)
    if args.list_width:
        window.top_splitter.setSizes([args.list_width, width - args.list_width])
    wait(lambda: not window.busy and window.loader is None, "the model and the spectra")
    libraries = window.libraries.controller
    for path in args.suspects:
        libraries.add(path)
    # the ticked libraries (the bundled ones, and --suspects) are searched by the run, as a user waits for them
    wait(lambda: all(s.state not in ("waiting", "opening") for s in libraries.sources), "the libraries")
    if window.bundle is None:
        sys.exit("No model could be loaded; give --model BUNDLE (see the docstring).")
    dialog = window.libraries.show_manager() if args.libraries_dialog or args.suspects_present else None
    if args.suspects_present:
        dialog.present.setValue(args.suspects_present)
    entries = [e for e in window.spectra.entries if e.spectrum is not None]
    if args.spectrum:
        pick = next((e for e in entries if e.id == args.spectrum or e.display_id.split(" ")[0] == args.spectrum), None)
        if pick is None and args.spectrum.isdigit():
            pick = window.spectra.entries[int(args.spectrum) - 1]
    else:
        runnable = [e for e in entries if e.spectrum.formula and e.spectrum.adduct in window.bundle.supported_adducts]
        pick = max(runnable or entries, key=lambda e: e.spectrum.n_peaks, default=None)
    if pick is None:
        sys.exit("No spectrum to run.")
    window.select_entry(pick.key)
    if args.expand:
        window.spectra_view.expand(window.spectra_view.currentIndex())
        window.spectra_view.scrollTo(window.spectra_view.currentIndex(),
                                     window.spectra_view.ScrollHint.PositionAtTop)
    settle = time.perf_counter() + 0.5  # the plot draws before Run is pressed, as for a user
    wait(lambda: time.perf_counter() > settle, "the plot")
    tabs = window.insights.tabs
    if args.tab == "formulas":  # ranked when the tab shows (before Run, which would rank them anyway)
        tabs.setCurrentWidget(window.formulas.panel)
        wait(lambda: window.formulas.panel.model.rowCount() > 0 or window.formulas.worker is None, "the formulas")
    if not args.no_run:
        finished = []
        window.run_finished.connect(finished.append)
        t0 = time.perf_counter()
        window.run_selected()
        wait(lambda: finished, "the run")
        print(f"{pick.id}: {finished[0]} in {time.perf_counter() - t0:.1f} s; first candidates on screen after "
              f"{window.first_candidates_s:.2f} s" if window.first_candidates_s else f"{pick.id}: {finished[0]}")
    if args.select_edit:
        table = window.candidates
        edited = [c for c in table.model.candidates if c.edited_from and not c.count]
        if not edited:
            sys.exit("No candidate of this run was made by an isomer edit.")
        table.select_candidate(edited[0].inchikey14)
    tabs.setCurrentWidget({"candidates": window.candidates, "formulas": window.formulas.panel,
                           "bits": window.insights.bits, "score": window.insights.score}[args.tab])
    if args.score:
        window.insights.score.input.setPlainText("\n".join(args.score))
        window.insights.score.score()
    window.statusBar().clearMessage()
    end = time.perf_counter() + 0.6  # let the plot and the depictions paint
    wait(lambda: time.perf_counter() > end, "painting")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not window.grab().save(str(out)):
        sys.exit(f"Could not write {out}.")
    print(f"Saved {out} ({window.width()}x{window.height()}).")
    if args.libraries_dialog:
        shot = out.with_name(f"{out.stem}_libraries{out.suffix}")
        if not dialog.grab().save(str(shot)):
            sys.exit(f"Could not write {shot}.")
        print(f"Saved {shot} ({dialog.width()}x{dialog.height()}).")
    if dialog is not None:
        dialog.close()
    window.popups = False  # closing asks whether to save the candidates: no (a throw-away MSGPT_HOME)
    window.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
