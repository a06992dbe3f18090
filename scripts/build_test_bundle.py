"""Build the tiny model bundle the tests run on, and check that it memorised its structures.

Writes ``tests/data/tiny_bundle/`` (config.json, decoder/encoder safetensors, tokenizer.json,
calibration.json; about 1 MB), which is committed: the tests load it in fp32 and train nothing::

    python scripts/build_test_bundle.py            # rebuild (about a minute on one core), then check
    python scripts/build_test_bundle.py --check    # only check the committed bundle

Rebuild it when ``tests/data/fixture.mgf`` or the bundle format changes (``tests/test_tiny_bundle.py``
fails then). Training is in ``tests/tiny_bundle.py``: fp32, fixed seeds, one thread. Another CPU may
round differently and write other bits; that does not matter, as long as the check below passes.

The check, on the written bundle loaded in fp32: for every fixture structure, the smallest probability
the decoder gives a reference token under its true fingerprint, random and empty fingerprints and the
encoder's queries of the default κ band must exceed ``--min-token-p`` (0.99), so that sampling with
top-p 0.95 can draw nothing else. It also runs the pipeline with default settings on each spectrum
and reports where the reference ranked (a warning, not a failure: that is the sampler's and the
ranking's business, which the tests check).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import tiny_bundle as tb  # noqa: E402
import torch  # noqa: E402


def check(path: Path, min_token_p: float) -> bool:
    from engine.elucidation.pipeline import QueryParams, SpectrumSession, compute_posterior
    from engine.model.bundle import load_bundle
    from engine.model.querying import band_thresholds, build_queries

    bundle = load_bundle(path, device="cpu", precision="fp32")
    spectra = tb.fixture_spectra()
    params = QueryParams()
    thresholds = band_thresholds(bundle.calibration, params.kappa_min, params.kappa_max, params.groups)
    band = [[q.bits for q in build_queries(compute_posterior(bundle, s), thresholds)] for s in spectra]
    margins = tb.reference_margins(bundle.decoder, bundle.tokenizer, [s.smiles for s in spectra], band)
    ok = bundle.tokenizer.fingerprint() == tb.fixture_tokenizer().fingerprint()
    ranked = True
    print(f"tokenizer matches tests/data/fixture.mgf: {ok}")
    for s, p in zip(spectra, margins):
        gen = SpectrumSession(bundle, s).run(params)
        while True:
            try:
                next(gen)
            except StopIteration as stop:
                r = stop.value
                break
        share = r.candidates[0].count / r.n_samples if r.candidates else 0.0
        good = p > min_token_p
        ok &= good
        ranked &= r.reference_status == "exact"
        print(f"{'ok  ' if good else 'FAIL'} {s.id:40s} min reference-token p {p:.5f}  pipeline: reference "
              f"{r.reference_status or '-':6s} top candidate {share:.0%} of {r.n_samples} samples")
    size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    print(f"{path}: {size / 1024:.0f} KiB in {len(list(path.iterdir()))} files")
    if ok and not ranked:
        print(f"WARNING: the decoder gives every reference token p > {min_token_p} under every query, yet the "
              "pipeline did not rank every reference first (QueryParams defaults): look at the sampler or the ranking.")
    return ok


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=tb.BUNDLE_DIR, help="bundle folder (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=tb.STEPS, help="training steps (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="only check the bundle in --out")
    ap.add_argument("--min-token-p", type=float, default=0.99)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if not args.check:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=args.out.parent) as tmp:
            built = tb.build_tiny_bundle(Path(tmp) / "bundle", steps=args.steps)
            shutil.rmtree(args.out, ignore_errors=True)
            built.rename(args.out)
        print(f"trained {args.steps} steps and wrote {args.out} in {time.perf_counter() - t0:.0f} s")
    ok = check(args.out, args.min_token_p)
    print("check passed" if ok else "check FAILED: train longer (--steps) or look at what changed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
