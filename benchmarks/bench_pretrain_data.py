"""Pretraining throughput on a device: how fast the batches are prepared, and what training then reaches.

On the lent H200 the first accelerator run trained at 3,800 records/s (226k tokens/s) with the batches
collated and corrupted by one Python thread beside the training loop: far below what the GPU computes for
a 10M-parameter decoder. This script measures, in one run on the same machine:

1. batch preparation alone (collate + simulated queries of ``training.decoder.pretrain.StepBatches``), records/s:
   inline (the baseline of the ratios), a prefetch thread, and ``--workers`` processes;
2. pretraining for ``--seconds`` each with the prefetch thread and with the largest worker count
   (``data_workers``), records/s from the run's own steps (the first 10 steps untimed).

    python benchmarks/bench_pretrain_data.py --corpus DIR --noise NOISE.npz [--init DECODER] --device cuda

``--corpus`` is a prepared corpus (``python -m training.decoder.accelerator`` materializes one from its pack with
``materialize_corpus``; ``--pack`` does that first).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.data.batching import FormulaGroupedBatchSampler  # noqa: E402
from training.data.dataset import CorpusDataset  # noqa: E402
from training.encoder.noise import FingerprintNoise  # noqa: E402
from training.decoder.pretrain import BatchStream, PretrainConfig, StepBatches, StepDone, pretrain  # noqa: E402


def prepare_rate(corpus: str, noise: str, batch: int, steps: int, prefetch: int, workers: int) -> float:
    ds = CorpusDataset(corpus)
    train_ids = __import__("numpy").arange(len(ds))
    config = PretrainConfig(corpus=corpus, out="-", batch_size=batch, grad_accum=1, noise_model=noise,
                            noise_fraction=0.5, prefetch=prefetch, data_workers=workers)
    stream = BatchStream(FormulaGroupedBatchSampler(ds.formula_keys(), batch, seed=0))
    batches = StepBatches(stream, ds, train_ids, config, FingerprintNoise.load(noise), 0, 0)
    try:
        for _ in range(5):  # workers start, queues fill
            batches.next()
        t0 = time.perf_counter()
        for _ in range(steps):
            batches.next()
        return steps * batch / (time.perf_counter() - t0)
    finally:
        batches.close()


def train_rate(corpus: str, noise: str, init: str | None, device: str, batch: int, seconds: float, prefetch: int,
               workers: int, preset: str) -> float:
    out = Path(tempfile.mkdtemp(prefix="bench-pt-"))
    shape = {"preset": preset, "dropout": 0.0}
    if init:  # the init decoder's own preset and block size
        import json

        from engine.model.decoder import DecoderConfig
        from training.decoder.accelerator import _preset_of

        dec = DecoderConfig.from_dict(json.loads((Path(init) / "decoder_config.json").read_text()))
        shape = {"preset": _preset_of(dec), "dropout": dec.dropout, "block_size": dec.block_size}
    config = PretrainConfig(corpus=corpus, out=str(out), **shape, batch_size=batch, grad_accum=1,
                            max_steps=10**9, budget_minutes=seconds / 60, lr=1e-4, min_lr=1e-5, warmup_steps=10,
                            device=device, noise_model=noise, noise_fraction=0.5, prefetch=prefetch,
                            data_workers=workers, forward_tokens=65536, eval_every=0, checkpoint_every=0,
                            checkpoint_minutes=0, init_decoder=init)
    marks = {}
    stop = threading.Event()
    for event in pretrain(config, stop):
        if isinstance(event, StepDone):
            marks[event.step] = time.perf_counter()
    shutil.rmtree(out, ignore_errors=True)
    last = max(marks)
    return (last - 10) * batch / (marks[last] - marks[10]) if last > 20 else float("nan")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus")
    p.add_argument("--pack", help="an accelerator pack: its corpus is materialized to a temporary folder first")
    p.add_argument("--noise", help="noise model (default: the pack's)")
    p.add_argument("--init", help="decoder to train from (default: the pack's)")
    p.add_argument("--preset", default="small", help="without --init / --pack")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--steps", type=int, default=40, help="steps timed per preparation variant")
    p.add_argument("--workers", type=int, nargs="+", default=[4, 8])
    p.add_argument("--seconds", type=float, default=45.0, help="of each training run (0: none)")
    args = p.parse_args()
    if args.pack:
        from training.decoder.accelerator import materialize_corpus

        args.corpus = args.corpus or tempfile.mkdtemp(prefix="bench-corpus-")
        materialize_corpus(Path(args.pack), Path(args.corpus), oversample=2)
        args.noise = args.noise or str(Path(args.pack) / "noise.npz")
        args.init = args.init or str(Path(args.pack) / "decoder")
    print(f"batch preparation, {args.batch} records per step, {args.steps} steps each:")
    base = prepare_rate(args.corpus, args.noise, args.batch, args.steps, 0, 0)
    print(f"  inline                 {base:10,.0f} records/s  1.00x")
    thread = prepare_rate(args.corpus, args.noise, args.batch, args.steps, 4, 0)
    print(f"  prefetch thread        {thread:10,.0f} records/s  {thread / base:.2f}x")
    for w in args.workers:
        r = prepare_rate(args.corpus, args.noise, args.batch, args.steps, 2 * w, w)
        print(f"  {w:2d} worker processes    {r:10,.0f} records/s  {r / base:.2f}x")
    if args.seconds:
        print(f"pretraining on {args.device}, {args.seconds:.0f} s each (first 10 steps untimed):")
        t = train_rate(args.corpus, args.noise, args.init, args.device, args.batch, args.seconds, 4, 0, args.preset)
        print(f"  prefetch thread        {t:10,.0f} records/s  1.00x")
        w = max(args.workers)
        r = train_rate(args.corpus, args.noise, args.init, args.device, args.batch, args.seconds, 2 * w, w, args.preset)
        print(f"  {w:2d} worker processes    {r:10,.0f} records/s  {r / t:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
