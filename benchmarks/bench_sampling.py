"""Decoder sampling speed per spectrum: Hugging Face ``generate`` vs the fast sampler.

One spectrum = M=20 fingerprint queries x N=5 samples = B=100 sequences, each query ~50 active bits,
formula C20H25N3O2, random weights. Every row generates exactly ``--tokens`` (60) new tokens: <eos> is
forbidden until then (``min_new_tokens``, in HF and ours alike), so all variants do the same work.
Sampling settings everywhere: do_sample, temperature 1, top_k=50, top_p=0.95.

Variants (per preset, same process, medians of ``--repeats`` runs after one warm-up):

- HF generate: the same ConditionalDecoder wrapped as a ``transformers.PreTrainedModel`` +
  ``GenerationMixin``; self-attention uses HF's own ``DynamicCache``. The conditioning travels as a
  per-row model kwarg, the way one wires a custom condition into ``generate``: the fingerprint and
  formula context is encoded once (like ``encoder_outputs``), but every step recomputes the
  cross-attention keys/values from it, for every row (HF's cache has no slot for them, and nothing
  shares them between the 5 rows of a query). This is the baseline of the ratios.
- HF generate, context re-encoded every step (fully naive: the fingerprint/formula encoders run inside
  ``forward``): timed over a few steps and extrapolated to ``--tokens`` (full run only).
- fast fp32 / fast bf16: ``engine.model.sampling.sample_queries`` (KV cache, context K/V once per query,
  shared by its rows). bf16 either via ``dtype=torch.bfloat16`` (autocast over the fp32 model) or on
  a model cast to bf16 once (``model.to(torch.bfloat16)``).
- ``--compile``: bf16 weights with the feed-forward modules under ``torch.compile``; the compile time
  is printed separately.

``--small-candidates`` times candidate shapes for the ``small`` preset (how it was chosen).
``--rows`` (alone) times one decoding step of the bundled decoder at 20-400 rows: what a row-step costs when the
decoder's matrix products are all that is left (issue #58).
``--attention`` times plain matmul+softmax against ``scaled_dot_product_attention`` on the decoding
shapes (``engine.model.decoder.attend`` uses the former).

The machine is shared: run it when it is quiet, and read the spread printed beside each median.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import DynamicCache, GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.model.decoder import ConditionalDecoder, DecoderConfig, attend, collate_queries  # noqa: E402
from engine.model.sampling import QueryRequest, sample_queries  # noqa: E402
from engine.model.tokenizer import SPECIAL_TOKENS, SafeTokenizer  # noqa: E402

M, N, BITS = 20, 5, 50
FORMULA = np.array([20, 25, 3, 2] + [0] * 10)  # C20H25N3O2
SAMPLING = dict(temperature=1.0, top_k=50, top_p=0.95)


class HFConditionalDecoder(PreTrainedModel, GenerationMixin):
    """ConditionalDecoder behind Hugging Face's generation API; the condition is a per-row model kwarg."""

    config_class = PretrainedConfig

    def __init__(self, decoder: ConditionalDecoder):
        cfg = decoder.config
        super().__init__(PretrainedConfig(vocab_size=cfg.vocab_size, num_hidden_layers=cfg.n_layer))
        self.decoder = decoder

    def forward(self, input_ids, past_key_values=None, use_cache=True, ctx=None, ctx_mask=None,
                fp_bits=None, fp_mask=None, formula=None, **kwargs):
        if ctx is None:  # fully naive: encode the condition inside every forward
            ctx, ctx_mask = self.decoder.encode_context(fp_bits, fp_mask, formula)
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        context = self.decoder.context_kv(ctx, ctx_mask)  # (B, nh, L, hs) per cross block, every step
        logits = self.decoder.decode(input_ids, context, past_key_values if use_cache else None)
        return CausalLMOutputWithPast(logits=logits, past_key_values=past_key_values)


def spectrum(seed: int = 0) -> list[QueryRequest]:
    rng = np.random.default_rng(seed)
    return [QueryRequest(np.sort(rng.choice(4096, BITS, replace=False)), tuple((i, j) for j in range(N)))
            for i in range(M)]


def hf_generate(hf, tok, requests, tokens, naive=False):
    rows = [r.fp_bits for r in requests for _ in r.sample_ids]
    with torch.inference_mode():
        bits, mask, formula = collate_queries(rows, FORMULA)
        cond = dict(fp_bits=bits, fp_mask=mask, formula=formula)
        if not naive:
            ctx, ctx_mask = hf.decoder.encode_context(bits, mask, formula)
            cond = dict(ctx=ctx, ctx_mask=ctx_mask)
        out = hf.generate(torch.full((len(rows), 1), tok.bos_id), **cond, do_sample=True, **SAMPLING,
                          max_new_tokens=tokens, min_new_tokens=tokens, eos_token_id=tok.eos_id,
                          pad_token_id=tok.pad_id, bos_token_id=tok.bos_id)
    return [tok.decode(o[1:]) for o in out.tolist()]


def fast(model, tok, requests, tokens, **kw):
    return list(sample_queries(model, tok, FORMULA, requests, seed=0, **SAMPLING, max_new_tokens=tokens,
                               min_new_tokens=tokens, **kw))


def timed(fn, repeats: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def check_same_model(hf, model, tok, requests):
    """Greedy decoding (top_k=1) must give the same tokens through HF generate and through our sampler."""
    reqs = requests[:2]
    kw = dict(do_sample=True, top_k=1, max_new_tokens=8, min_new_tokens=8, eos_token_id=tok.eos_id,
              pad_token_id=tok.pad_id, bos_token_id=tok.bos_id)
    rows = [r.fp_bits for r in reqs for _ in r.sample_ids]
    with torch.inference_mode():
        ctx, ctx_mask = model.encode_context(*collate_queries(rows, FORMULA))
        out = hf.generate(torch.full((len(rows), 1), tok.bos_id), ctx=ctx, ctx_mask=ctx_mask, **kw)
    ours = dict(sample_queries(model, tok, FORMULA, reqs, seed=0, top_k=1, max_new_tokens=8, min_new_tokens=8))
    assert [tok.decode(o[1:]) for o in out.tolist()] == ours[0] + ours[1], "HF wrapper and sampler disagree"


def bench_preset(name: str, args) -> None:
    cfg = DecoderConfig.preset(name, vocab_size=1882, block_size=256)
    tok = SafeTokenizer([*SPECIAL_TOKENS, *(f"[X{i}]" for i in range(cfg.vocab_size - len(SPECIAL_TOKENS)))])
    torch.manual_seed(0)
    model = ConditionalDecoder(cfg).eval()
    hf = HFConditionalDecoder(model).eval()
    requests, T = spectrum(), args.tokens
    check_same_model(hf, model, tok, requests)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"\n== preset {name!r}: {cfg.n_layer} layers x {cfg.n_embd}, {n_params / 1e6:.1f}M parameters; "
          f"B={M * N} ({M} queries x {N}), {T} new tokens per row, {torch.get_num_threads()} threads; "
          f"load average {os.getloadavg()[0]:.1f} ==")

    results: list[tuple[str, float, str]] = []

    def row(label, times, note=""):
        med = statistics.median(times)
        results.append((label, med, note))
        base = results[0][1]
        spread = f"[{min(times):.2f}-{max(times):.2f}]" if len(times) > 1 else ""
        print(f"{label:44s} {med:8.3f} s/spectrum {spread:13s} {M * N * T / med:9.0f} tok/s "
              f"{base / med:6.1f}x {note}", flush=True)

    row("HF generate (fp32, DynamicCache)", timed(lambda: hf_generate(hf, tok, requests, T), args.repeats))
    if not args.quick:
        steps = 3
        per_step = statistics.median(timed(lambda: hf_generate(hf, tok, requests, steps, naive=True), 1)) / steps
        row("HF generate, context re-encoded every step", [per_step * T], f"(extrapolated from {steps} steps)")
    row("fast fp32", timed(lambda: fast(model, tok, requests, T), args.repeats))
    row("fast bf16 (dtype=bfloat16: autocast)", timed(lambda: fast(model, tok, requests, T, dtype=torch.bfloat16), args.repeats))
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
    row("fast bf16 (model cast to bf16 once)", timed(lambda: fast(model_bf16, tok, requests, T), args.repeats))
    if args.compile:
        for module in model_bf16.modules():
            if type(module).__name__ == "MLP":
                module.compile(dynamic=True)
        t = time.perf_counter()
        fast(model_bf16, tok, requests, T)
        compile_s = time.perf_counter() - t
        row("fast bf16 + torch.compile (FFNs)", timed(lambda: fast(model_bf16, tok, requests, T), args.repeats),
            f"(+{compile_s:.0f} s compile, first call)")


SMALL_CANDIDATES = [(4, 256), (6, 256), (6, 320), (6, 384), (8, 384), (6, 512)]  # (layers, width), 64-wide heads


def bench_small_candidates(args) -> None:
    """bf16 fast-sampler time per spectrum of candidate CPU presets: how the ``small`` preset was chosen."""
    print(f"\n== candidates for the 'small' preset: fast sampler, bf16 weights, {args.tokens} tokens ==")
    for n_layer, d in SMALL_CANDIDATES:
        h = d // 64
        cfg = DecoderConfig.preset("small", n_layer=n_layer, n_embd=d, n_head=h, fp_heads=h, cross_heads=h,
                                   fp_ffn=4 * d, cross_ffn=4 * d, count_hidden=d)
        tok = SafeTokenizer([*SPECIAL_TOKENS, *(f"[X{i}]" for i in range(cfg.vocab_size - len(SPECIAL_TOKENS)))])
        model = ConditionalDecoder(cfg).eval().to(torch.bfloat16)
        times = timed(lambda: fast(model, tok, spectrum(), args.tokens), args.repeats)
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{n_layer} layers x {d:4d} ({n_params / 1e6:5.1f}M)  {statistics.median(times):6.3f} s/spectrum "
              f"[{min(times):.2f}-{max(times):.2f}]", flush=True)


def bench_attention() -> None:
    """matmul+softmax vs SDPA on one-token decoding shapes (B=100 rows, 20 contexts of 64 positions)."""
    print("\n== attention for one new token: matmul+softmax vs scaled_dot_product_attention ==")
    for dtype in (torch.float32, torch.bfloat16):
        for label, q, kv, masked in [
            ("self-attn, small (4 heads, 60 cached)", (100, 4, 1, 64), (100, 4, 64, 64), True),
            ("cross-attn, small (20 groups x 5 rows)", (20, 4, 5, 64), (20, 4, 64, 64), False),
            ("self-attn, paper (12 heads, 60 cached)", (100, 12, 1, 64), (100, 12, 64, 64), True),
            ("cross-attn, paper (20 groups x 5 rows)", (20, 12, 5, 64), (20, 12, 64, 64), False),
        ]:
            qt, k, v = torch.randn(q, dtype=dtype), torch.randn(kv, dtype=dtype), torch.randn(kv, dtype=dtype)
            mask = (torch.arange(kv[2]) < 60)[None] if masked else torch.ones(kv[0], 1, 1, kv[2], dtype=torch.bool)
            a = statistics.median(timed(lambda: [attend(qt, k, v, mask) for _ in range(100)], 5)) * 1e4  # us/call
            b = statistics.median(timed(lambda: [F.scaled_dot_product_attention(qt, k, v, attn_mask=mask)
                                                 for _ in range(100)], 5)) * 1e4
            print(f"{str(dtype):15s} {label:42s} matmul {a:6.0f} us   sdpa {b:6.0f} us")


def bench_rows(args) -> None:
    """One decoding step of the bundled decoder (bf16) at several numbers of rows: the floor of a pool's cost.

    20 queries of 40 random active bits (C20H25N3O2), ``rows`` / 20 rows each, the KV cache 40-60 tokens long; median of
    ``--repeats`` x 20 steps. Prints ms a step, us a row-step and the multiply-adds of the linear layers per second
    (the decoder's matrix products: what is left when every other cost of a step is gone).
    """
    from engine.model.bundle import load_bundle
    from engine.model.sampling import KVCache
    from engine.paths import default_model_dir

    model = load_bundle(default_model_dir(), precision="bf16").decoder
    cfg = model.config
    linear = sum(m.weight.numel() for name, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear) and name.startswith(("transformer.h.", "cross.", "lm_head"))
                 and not name.endswith(("k_proj", "v_proj")))  # the context's K/V are computed once per query
    rng = np.random.default_rng(0)
    print(f"\n== one decoding step, bundled decoder ({cfg.n_layer} x {cfg.n_embd}, bf16), {args.threads} threads ==")
    print("| rows | ms a step | us a row-step | GFLOP/s of the linear layers |")
    print("| ---: | ---: | ---: | ---: |")
    for rows in (20, 50, 100, 200, 400):
        per = max(1, rows // M)
        bits = [np.sort(rng.choice(cfg.fp_bits, 40, replace=False)) for _ in range(M)]
        with torch.inference_mode():
            context = model.context_kv(*model.encode_context(*collate_queries(bits, FORMULA)))
            context = context.for_rows(torch.arange(M).repeat_interleave(per))
            idx = torch.full((M * per, 1), 1)
            times = []
            for _ in range(args.repeats):
                cache = KVCache(cfg.n_layer, cfg.block_size, max_rows=M * per)
                for _ in range(40):
                    model.decode(idx, context, cache)
                t = time.perf_counter()
                for _ in range(20):
                    model.decode(idx, context, cache)
                times.append((time.perf_counter() - t) / 20)
        step = statistics.median(times)
        print(f"| {M * per} | {step * 1e3:.1f} | {step / (M * per) * 1e6:.0f} | "
              f"{2 * linear * M * per / step / 1e9:.0f} |")


def bench_decoding(args) -> None:
    """Formula-constrained vs free decoding with the bundled model on the bundled example spectra (same
    seeds, same run): seconds per spectrum, and the share of the constrained run spent computing masks."""
    from engine.elucidation.pipeline import QueryParams, SpectrumSession
    from engine.model import constraints
    from engine.model.bundle import load_bundle
    from engine.paths import default_model_dir
    from engine.spectra.io import read_spectra

    bundle = load_bundle(default_model_dir())
    spectra, _ = read_spectra(Path(__file__).resolve().parents[1] / "resources" / "examples" / "massbank_examples.mgf")
    mask_time = [0.0]
    allowed, advance = constraints.FormulaConstraint.allowed, constraints.FormulaConstraint.advance

    def timed_method(fn):
        def wrapper(self, *a):
            t0 = time.perf_counter()
            try:
                return fn(self, *a)
            finally:
                mask_time[0] += time.perf_counter() - t0
        return wrapper

    print(f"\n== decoding with {bundle.name} on {len(spectra)} example spectra, B=100 (M=20, N=5), "
          f"{args.repeats} repeats: median s/spectrum ==")
    rows = {}
    for mode in ("free", "formula"):
        times, yields = [], []
        for _ in range(args.repeats):
            mask_time[0] = 0.0
            constraints.FormulaConstraint.allowed = timed_method(allowed)
            constraints.FormulaConstraint.advance = timed_method(advance)
            t0 = time.perf_counter()
            ok = n = 0
            for s in spectra:
                gen = SpectrumSession(bundle, s).run(QueryParams(decoding=mode))
                while True:
                    try:
                        next(gen)
                    except StopIteration as stop:
                        ok, n = ok + stop.value.n_formula_consistent, n + stop.value.n_samples
                        break
            times.append((time.perf_counter() - t0) / len(spectra))
            yields.append(ok / max(n, 1))
            constraints.FormulaConstraint.allowed, constraints.FormulaConstraint.advance = allowed, advance
        rows[mode] = statistics.median(times)
        masks = f"masks {mask_time[0] / len(spectra):.3f} s/spectrum ({100 * mask_time[0] / len(spectra) / rows[mode]:.0f}%)"
        print(f"{mode:8s} {rows[mode]:.3f} s/spectrum [{min(times):.3f}-{max(times):.3f}]  "
              f"formula-consistent yield {100 * statistics.median(yields):.1f}%  " + (masks if mode == "formula" else ""))
    print(f"formula / free: {rows['formula'] / rows['free']:.2f}x the time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small preset, 20 tokens, 1 repeat")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--presets", default="small,paper", help="comma-separated presets (default small,paper)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs after the warm-up (default 3)")
    ap.add_argument("--tokens", type=int, default=60, help="new tokens per row (default 60)")
    ap.add_argument("--compile", action="store_true", help="also time bf16 with torch.compile'd FFNs")
    ap.add_argument("--attention", action="store_true", help="also time attention kernels on decoding shapes")
    ap.add_argument("--small-candidates", action="store_true", help="also time candidate shapes for 'small'")
    ap.add_argument("--decoding", action="store_true",
                    help="also time formula-constrained vs free decoding (bundled model, example spectra)")
    ap.add_argument("--rows", action="store_true",
                    help="only time one decoding step of the bundled decoder at 20-400 rows (the floor of a pool)")
    args = ap.parse_args()
    if args.rows:
        torch.set_num_threads(args.threads)
        return bench_rows(args)
    if args.quick:
        args.presets, args.tokens, args.repeats = "small", 20, 1
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} threads; columns: median s/spectrum, [min-max], "
          "new tokens/s, speed-up vs HF generate")
    for name in args.presets.split(","):
        bench_preset(name, args)
    if args.small_candidates:
        bench_small_candidates(args)
    if args.attention:
        bench_attention()
    if args.decoding:
        bench_decoding(args)


if __name__ == "__main__":
    main()
