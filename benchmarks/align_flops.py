"""The alignment stage of ``hmm-nmt-align-corpus`` against its arithmetic limit on one CPU thread.

Measures, for the first N lines of a corpus and a trained model directory: the wall time of the stage as the
command runs it (both directions, ``--threads 1``: :func:`hmm_nmt_align.corpus.align._align_chunk`, which
segments, batches, computes the posteriors and reads the links off; the outputs are not written), the
floating-point operations of its matmuls per sentence pair counted analytically by component, and the matmul
rate of this CPU on one thread, on a 2048^3 product and at the shapes the stage's matmuls have: float32, or
bf16 with ``--precision bf16``, which runs the stage under bf16 autocast as ``hmm-nmt-align-corpus --precision
bf16`` does (``--links-out`` keeps the merged links, to compare the two). It prints
the FLOP-limited time per pair (matmul FLOPs / rate: the needed ones, the executed ones with the batches'
padding, and those at their shapes' rates) and the ratio measured / limit, and writes the figures as JSON
(``--out``).

    python -m benchmarks.align_flops --model-dir DIR --src-text SRC --tgt-text TGT --lines 2000 --out F.json

The count (:func:`pair_flops`; a multiply-add is 2 FLOPs) is what the code computes for one pair of J source
and I target pieces (both with EOS): the teacher-forced posterior p(b_i = j | E, F) of
:meth:`~hmm_nmt.models.transformer_dhmm.TransformerDHMMModel.alignment_matrices`, i.e. the encoder, the
decoder's features, the separable lexicon's logits and normalisers (:func:`hmm_nmt.hmm.separable_lexicon.
separable_scores`), the alignment model and the DP (self-attention's causal I x I is computed whole, and so
counted; seeds of an ensemble each count once). A batch computes every sentence at its longest J and I, so
it executes B x the count at (max J, max I); the difference to the sum over its pairs is the padding.
tests/benchmarks/test_align_flops.py checks the count against torch's FlopCounterMode. Elementwise work
(exponentials, log-sum-exps, the DP, whose products are log-space sums) is no matmul: its operation counts
(:func:`elementwise_ops`) are estimates, reported beside the limit and not in it. Not counted: normalisers
recomputed by a log-sum-exp over V where their shifted sum underflowed (data-dependent, rare).
"""
import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import Dict, List, Tuple

Counts = Dict[str, Dict[str, int]]


@dataclass(frozen=True)
class Sizes:
    """What the count needs of one direction's model: widths (d_enc, d_dec, d_out: the lexicon's), FFN widths,
    layers, the decoder layers with the Eq. 6 block, the target vocabulary V, the alignment order and the first
    order's width."""

    d_enc: int
    ffn_enc: int
    enc_layers: int
    d_dec: int
    ffn_dec: int
    dec_layers: int
    dhmm_blocks: int
    d_out: int
    vocab: int
    order: int
    d_align: int

    @classmethod
    def of(cls, model) -> "Sizes":
        from hmm_nmt.models.dhmm_layers import DHMMDecoderLayer

        enc, dec = model.encoder, model.decoder
        if getattr(dec, "lexicon_kind", None) != "separable":
            raise SystemExit(f"align_flops: counts the separable lexicon only, the model has "
                             f"{getattr(dec, 'lexicon_kind', 'none')!r}")
        if dec.target_context != "past" or dec.project_in_dim is not None or dec.project_out_dim is not None:
            raise SystemExit("align_flops: counts --target-context past without decoder input/output projections")
        ffn_e, ffn_d = {la.fc1.out_features for la in enc.layers}, {la.fc1.out_features for la in dec.layers}
        if len(ffn_e) != 1 or len(ffn_d) != 1:
            raise SystemExit("align_flops: counts layers of one FFN width per stack")
        fo = dec.first_order
        return cls(d_enc=enc.layers[0].embed_dim, ffn_enc=ffn_e.pop(), enc_layers=len(enc.layers),
                   d_dec=dec.embed_dim, ffn_dec=ffn_d.pop(), dec_layers=len(dec.layers),
                   dhmm_blocks=sum(isinstance(la, DHMMDecoderLayer) for la in dec.layers),
                   d_out=dec.output_embed_dim, vocab=dec.output_projection.weight.size(0),
                   order=0 if fo is None else 1, d_align=0 if fo is None else fo.dim)


def pair_flops(s: Sizes, J: int, I: int) -> Counts:
    """Matmul FLOPs of one pair's posterior by component (multiply-add = 2). Attention: q, k, v and output
    projections, scores q k^T and values; Eq. 6 adds W3 s_i (its W2 h_j is the value projection) and forms
    its weighted sum after the ReLU, the same J x d per target position as the values."""
    de, dd, do, V, da = s.d_enc, s.d_dec, s.d_out, s.vocab, s.d_align
    stock = s.dec_layers - s.dhmm_blocks
    out = {
        "encoder": {"projections": s.enc_layers * 8 * J * de * de,
                    "attention": s.enc_layers * 4 * J * J * de,
                    "ffn": s.enc_layers * 4 * J * de * s.ffn_enc},
        "decoder": {"self-attention": s.dec_layers * (8 * I * dd * dd + 4 * I * I * dd),
                    "cross-attention": (stock * (4 * I * dd * dd + 4 * J * de * dd + 4 * I * J * dd)
                                        + s.dhmm_blocks * (6 * I * dd * dd + 4 * J * de * dd + 4 * I * J * dd)),
                    "ffn": s.dec_layers * 4 * I * dd * s.ffn_dec},
        # W5 h_j + b5 and W6 s_i; a = W(W5 h_j) + b over J x V, b = W(W6 s_i) over I x V; Z = exp(b) exp(a)^T
        "lexicon": {"projections": 2 * J * de * do + 2 * I * do * do,
                    "logits": 2 * (J + I) * do * V,
                    "normalisers": 2 * I * J * V},
        "alignment": {},
        "dp": {},
    }
    if s.order == 1:  # FirstOrderAlignment: k, p, r of h_j; q of s_i; q.k, start, and the trilinear (q * p_j') . r_j
        out["alignment"] = {"projections": 6 * J * de * da + 2 * I * dd * da,
                            "scores": 4 * I * J * da + 2 * I * J * J * da}
        # the scaled forward-backward (hmm_nmt.hmm.scaled): a (1 x J') by (J' x J) product per step, each way
        out["dp"] = {"products": 4 * max(I - 1, 0) * J * J}
    return out


def elementwise_ops(s: Sizes, J: int, I: int) -> Dict[str, int]:
    """Estimated elementwise operations of one pair (one per element and operation, an exponential as one):
    the lexicon's mean, max, shift and exponential over (I + J) x V; Eq. 6's add and ReLU over I x J x d; the
    first order's bias sum and log-softmax over I x J x J; the scaled DP's transitions raised, exponentiated and
    masked once over I x J x J, then per step the emission, total and scaling over J, both ways."""
    ops = {"lexicon": 4 * (J + I) * s.vocab, "eq6": 2 * s.dhmm_blocks * I * J * s.d_dec}
    if s.order == 1:
        ops["alignment"] = 4 * I * J * J
        ops["dp"] = 3 * I * J * J + 8 * I * J
    else:
        ops["dp"] = 7 * I * J
    return ops


def total(counts: Counts) -> int:
    return sum(v for part in counts.values() for v in part.values())


def add(into: Counts, counts: Counts, times: int = 1) -> Counts:
    """``into`` += ``times`` x ``counts``, component by component."""
    for comp, part in counts.items():
        dst = into.setdefault(comp, {})
        for k, v in part.items():
            dst[k] = dst.get(k, 0) + times * v
    return into


def layout_flops(s: Sizes, batches: List[Tuple[List[int], List[int]]], members: int = 1):
    """(needed, executed) counts of the recorded batches (each: J and I of its pairs): needed sums the pairs,
    executed B x the count at the batch's longest J and I."""
    needed, executed = {}, {}
    for js, is_ in batches:
        for j, i in zip(js, is_):
            add(needed, pair_flops(s, j, i), members)
        add(executed, pair_flops(s, max(js), max(is_)), members * len(js))
    return needed, executed


# ------------------------------------------------------------------------------------------------ measuring
def cpu_info() -> dict:
    """The CPU's name and the flags that decide its matmul kernels."""
    name, flags = None, None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and name is None:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and flags is None:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    name, flags = name or platform.processor() or platform.machine(), flags or set()
    return {"cpu": name, "avx512f": "avx512f" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "amx": bool({"amx_tile", "amx_bf16"} & flags), "logical_cpus": os.cpu_count()}


def matmul_rate(b: int, m: int, k: int, n: int, min_s: float = 0.3, repeats: int = 3, dtype=None) -> float:
    """FLOP/s of (b x) m x k by k x n in ``dtype`` (float32 by default) on the current torch threads: the best
    of ``repeats`` timings, each at least ``min_s`` of back-to-back products into one output buffer."""
    import torch

    dtype = dtype or torch.float32
    # one product as torch.mm, as the linear layers run it; batched as torch.bmm, as the normalisers do
    mul, lead = (torch.mm, ()) if b == 1 else (torch.bmm, (b,))
    x, y = torch.randn(*lead, m, k).to(dtype), torch.randn(*lead, k, n).to(dtype)
    out = torch.empty(*lead, m, n, dtype=dtype)
    mul(x, y, out=out)
    best = float("inf")
    for _ in range(repeats):
        reps, t0 = 0, time.perf_counter()
        while reps == 0 or time.perf_counter() - t0 < min_s:
            mul(x, y, out=out)
            reps += 1
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2.0 * b * m * k * n / best


def exp_rate(rows: int, cols: int, min_s: float = 0.3) -> float:
    """Elementwise operations per second of the lexicon's in-place shift and exponential over (rows, cols)."""
    import torch

    x = torch.randn(rows, cols)
    m = x.amax(-1, keepdim=True)
    reps, t0 = 0, time.perf_counter()
    while reps == 0 or time.perf_counter() - t0 < min_s:
        x.sub_(m).exp_()
        reps += 1
    return 2.0 * rows * cols * reps / (time.perf_counter() - t0)


def _recording(model, log: dict) -> None:
    """Record each batch's source and target lengths (pieces with EOS) as the stage hands it to the model, and
    the seconds the model spends on it (the rest of the stage: segmentation, batching, links)."""
    inner, pad = model.alignment_matrices, getattr(model, "members", [model])[0].decoder.padding_idx

    def alignment_matrices(src_tokens, src_lengths, prev_output_tokens, target=None, **kw):
        log["batches"].append((src_lengths.tolist(), target.ne(pad).sum(1).tolist()))
        t0 = time.perf_counter()
        try:
            return inner(src_tokens, src_lengths, prev_output_tokens, target, **kw)
        finally:
            log["model_s"] += time.perf_counter() - t0

    model.alignment_matrices = alignment_matrices


def time_stage(model_dir: str, src_path: str, tgt_path: str, lines: int, warmup: int = 32, precision="fp32",
               out=None):
    """(wall s, CPU s, lines, {direction: (Sizes, members, {"batches", "model_s"})}) of the stage on the first
    ``lines`` lines, after an untimed warm-up on the first ``warmup``; one torch thread, as ``--threads 1``, in
    ``precision`` as ``--precision`` runs it (``bf16``: the matmuls under bf16 autocast). ``out``: a list that
    receives the merged links of every line, for comparing precisions."""
    import torch

    from hmm_nmt.hmm.precision import autocast
    from hmm_nmt_align.base.links import parse_decision
    from hmm_nmt_align.base.segment import load_segmenter
    from hmm_nmt_align.corpus.align import ALIGN_CHUNK, _align_chunk, _aligners
    from hmm_nmt_align.corpus.inputs import read_corpus
    from hmm_nmt_align.corpus.model_dir import DEFAULT_LINKS, DEFAULT_SYMMETRIZE, ModelDir

    md = ModelDir(model_dir)
    for name in (n for pair in md.members() for n in pair):  # the final checkpoints, as the stage loads them
        if not os.path.isfile(md.checkpoint(name)):
            raise SystemExit(f"align_flops: {md.checkpoint(name)} is missing: not a trained model directory")
    src, tgt = read_corpus(src_path, tgt_path, None)
    src, tgt = src[:lines], tgt[:lines]
    # the command's defaults for -o alone (merged links): both directions, one batch layout
    opts = SimpleNamespace(threads=1, cpu=True, precision=precision, output="-", fwd=None, rev=None, scores=None,
                           symmetrize=DEFAULT_SYMMETRIZE, links=DEFAULT_LINKS, align_max_tokens=4000)
    decision, threshold = parse_decision(opts.links)
    segmenter = load_segmenter(md.file("codes"), None)
    fwd, rev = _aligners(md, opts)
    assert torch.get_num_threads() == 1 and not opts.parallel_align
    logs = {"fwd": {"batches": [], "model_s": 0.0}, "rev": {"batches": [], "model_s": 0.0}}

    def run(s, t):
        with autocast(precision, torch.device("cpu")):
            return _align_chunk(fwd, rev, opts, segmenter, decision, threshold, s, t)

    run(src[:warmup], tgt[:warmup])
    _recording(fwd[0], logs["fwd"])
    _recording(rev[0], logs["rev"])
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, len(src), ALIGN_CHUNK):
        merged = run(src[start:start + ALIGN_CHUNK], tgt[start:start + ALIGN_CHUNK])[0]["output"]
        if out is not None:
            out.extend(merged)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    dirs = {}
    for name, (model, _) in (("fwd", fwd), ("rev", rev)):
        members = getattr(model, "members", [model])
        dirs[name] = (Sizes.of(members[0]), len(members), logs[name])
    return wall, cpu, len(src), dirs


def median_batch(batches) -> Tuple[int, int, int]:
    """(B, max J, max I) of the median batch by source rows B x max J."""
    js, is_ = sorted(batches, key=lambda b: len(b[0]) * max(b[0]))[len(batches) // 2]
    return len(js), max(js), max(is_)


def shape_rates(s: Sizes, batches, dtype=None) -> Dict[str, dict]:
    """The matmul rate at the shapes of the median batch: the lexicon's logits (B J x d by d x V), its
    normalisers (B x I x V by V x J), the FFN (B J x d by d x f; the rate of the encoder and decoder), the first
    order's trilinear scores (B x I J x d by d x J), and a 2048^3 product for reference."""
    B, J, I = median_batch(batches)
    shapes = {"square": (1, 2048, 2048, 2048), "logits": (1, B * J, s.d_out, s.vocab),
              "normalisers": (B, I, s.vocab, J), "ffn": (1, B * J, s.d_enc, s.ffn_enc)}
    if s.order == 1:
        shapes["trilinear"] = (B, I * J, s.d_align, J)
    return {k: {"shape": list(v), "gflops": matmul_rate(*v, dtype=dtype) / 1e9} for k, v in shapes.items()}


# the measured shape nearest to each part; the rest (linear layers, and attention, whose small per-head products
# this flatters) at the FFN's
RATE_OF = {("lexicon", "logits"): "logits", ("lexicon", "normalisers"): "normalisers",
           ("alignment", "scores"): "trilinear"}


def shaped_seconds(counts: Counts, rates: Dict[str, dict]) -> float:
    """Seconds of ``counts`` with each part at the rate of its shape (:data:`RATE_OF`)."""
    return sum(v / (rates[RATE_OF.get((comp, k), "ffn")]["gflops"] * 1e9)
               for comp, part in counts.items() for k, v in part.items())


# ------------------------------------------------------------------------------------------------ reporting
def report(wall: float, cpu: float, lines: int, dirs, rates, exp_per_s: float, cpu_desc: dict) -> dict:
    """The figures per line (the stage's time is per line, empty and too-long lines included), both directions
    summed. Limits: the needed matmul FLOPs (no padding) at the 2048^3 rate, the executed ones at it, and the
    executed ones at each component's shape rate; the ratios are measured / limit."""
    needed, executed, elem, info = {}, {}, {}, {}
    model_s = 0.0
    for name, (s, members, log) in dirs.items():
        batches = log["batches"]
        n, e = layout_flops(s, batches, members)
        add(needed, n)
        add(executed, e)
        for js, is_ in batches:  # executed: the elementwise work runs on the padded tensors too
            for k, v in elementwise_ops(s, max(js), max(is_)).items():
                elem[k] = elem.get(k, 0) + members * len(js) * v
        model_s += log["model_s"]
        info[name] = {"pairs": sum(len(b[0]) for b in batches), "batches": len(batches),
                      "mean_J": statistics.fmean(j for b in batches for j in b[0]) if batches else 0.0,
                      "mean_I": statistics.fmean(i for b in batches for i in b[1]) if batches else 0.0,
                      "model_s": log["model_s"], "sizes": asdict(s), "members": members}
    per, peak = max(lines, 1), rates["square"]["gflops"] * 1e9
    limit = {"needed at the 2048^3 rate": total(needed) / peak / per,
             "executed at the 2048^3 rate": total(executed) / peak / per,
             "executed at the shapes' rates": shaped_seconds(executed, rates) / per}
    return {"cpu": cpu_desc, "torch": _torch_version(), "torch_threads": 1, "lines": lines, "directions": info,
            "wall_s": wall, "cpu_s": cpu, "model_s": model_s, "s_per_pair": wall / per,
            "model_s_per_pair": model_s / per,
            "flops_per_pair": {c: {k: v / per for k, v in p.items()} for c, p in needed.items()},
            "needed_flops_per_pair": total(needed) / per, "executed_flops_per_pair": total(executed) / per,
            "elementwise_ops_per_pair": {k: v / per for k, v in elem.items()},
            "matmul_rates": rates, "exp_ops_per_s": exp_per_s, "limit_s_per_pair": limit,
            "elementwise_s_per_pair": sum(elem.values()) / exp_per_s / per,
            "ratio": {k: wall / per / v for k, v in limit.items()}}


def table(doc: dict) -> str:
    """The report as Markdown tables, headed by the CPU, the model and the pairs."""
    c, dirs = doc["cpu"], doc["directions"]
    flags = ", ".join(f"{k} {'yes' if c[k] else 'no'}" for k in ("avx512f", "avx512_bf16", "amx"))
    fwd, s = dirs["fwd"], dirs["fwd"]["sizes"]
    dtype = {"fp32": "float32", "bf16": "bf16 autocast"}[doc.get("precision", "fp32")]
    out = [f"CPU: {c['cpu']} ({flags}); torch {doc['torch']}, 1 thread, {dtype}",
           f"model: order {s['order']}, separable lexicon, d = {s['d_dec']}, FFN {s['ffn_dec']}, "
           f"{s['enc_layers']} + {s['dec_layers']} layers, V = {s['vocab']} / {dirs['rev']['sizes']['vocab']}, "
           f"{fwd['members']} seed(s)",
           f"{doc['lines']} lines, {fwd['pairs']} aligned; pieces with EOS (forward): mean J = {fwd['mean_J']:.1f}, "
           f"mean I = {fwd['mean_I']:.1f}; {fwd['batches']} + {dirs['rev']['batches']} batches",
           "", "| component (both directions) | MFLOP / pair | share of executed |", "|---|---:|---:|"]
    needed, executed = doc["needed_flops_per_pair"], doc["executed_flops_per_pair"]
    for comp, part in doc["flops_per_pair"].items():
        for k, v in part.items():
            out.append(f"| {comp}: {k} | {v / 1e6:,.2f} | {v / executed:.1%} |")
    pad = executed - needed
    out += [f"| matmuls needed | {needed / 1e6:,.2f} | {needed / executed:.1%} |",
            f"| padding (each batch at its longest pair) | {pad / 1e6:,.2f} | {pad / executed:.1%} |",
            f"| **matmuls executed** | **{executed / 1e6:,.2f}** | 100% |",
            f"| elementwise ops executed, estimate, not in the limits | "
            f"{sum(doc['elementwise_ops_per_pair'].values()) / 1e6:,.2f} | |",
            "", f"| {dtype.split()[0]} matmul, 1 thread | shape (batch, m, k, n) | GFLOP/s |", "|---|---|---:|"]
    for k, r in doc["matmul_rates"].items():
        out.append(f"| {k} | {' x '.join(map(str, r['shape']))} | {r['gflops']:,.1f} |")
    out += ["", "| time per pair | ms | measured / this |", "|---|---:|---:|",
            f"| measured: the stage (wall, --threads 1) | {doc['s_per_pair'] * 1e3:.3f} | |",
            f"| measured: inside the models' alignment_matrices | {doc['model_s_per_pair'] * 1e3:.3f} | |"]
    for k, v in doc["limit_s_per_pair"].items():
        out.append(f"| limit: matmuls {k} | {v * 1e3:.3f} | {doc['ratio'][k]:.2f} |")
    out.append(f"| elementwise estimate at the exp rate ({doc['exp_ops_per_s'] / 1e9:.2f} G/s) | "
               f"{doc['elementwise_s_per_pair'] * 1e3:.3f} | |")
    if doc.get("links_against"):
        c = doc["links_against"]
        out += ["", f"lines whose links differ from {c['file']}: {c['differing']} of {c['lines']}"]
    if doc.get("gold"):
        out.append("")
        out += [f"{part}: AER {sc['AER']:.2f} (P {sc['P']:.2f}, R {sc['R']:.2f})" for part, sc in doc["gold"].items()]
    return "\n".join(out)


def differing_lines(merged, path: str) -> dict:
    """{lines, differing}: how many of the merged links' lines differ from the Pharaoh file ``path``'s."""
    with open(path, encoding="utf-8") as f:
        other = [set(x.split()) for x in f.read().splitlines()]
    if len(other) != len(merged):
        raise SystemExit(f"align_flops: --links-against {path} has {len(other)} lines, this run {len(merged)}")
    ours = [{f"{i}-{j}" for i, j in sent} for sent in merged]
    return {"lines": len(ours), "differing": sum(a != b for a, b in zip(ours, other))}


def gold_scores(gold, merged, dev_pairs: int) -> dict:
    """{dev, test: {AER, P, R} in percent} of the merged links of the corpus's first len(gold) lines."""
    from hmm_nmt_align.aer import corpus_scores

    parts = {"dev": range(0, dev_pairs), "test": range(dev_pairs, len(gold))}
    out = {}
    for part, rows in parts.items():
        if len(rows):
            s = corpus_scores([gold[k] for k in rows], [merged[k] for k in rows])
            out[part] = {k: round(100.0 * s[k], 2) for k in ("AER", "P", "R")}
    return out


def _torch_version() -> str:
    import torch

    return torch.__version__


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.align_flops", description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True, help="a finished model directory of hmm-nmt-align-corpus")
    p.add_argument("--src-text", required=True, help="source side, word-tokenised, one sentence per line")
    p.add_argument("--tgt-text", required=True, help="target side, line-parallel")
    p.add_argument("--lines", type=int, default=2000, help="align the first N lines (default 2000)")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="the stage's matmuls as --precision runs them (bf16: autocast), the limits at that dtype's "
                        "matmul rates (default fp32)")
    p.add_argument("--links-out", metavar="FILE",
                   help="write the merged links (Pharaoh, one line per line) here, to compare precisions")
    p.add_argument("--links-against", metavar="FILE",
                   help="another run's --links-out (e.g. the other precision): count the lines whose links differ")
    p.add_argument("--gold", metavar="FILE", help="gold links (Pharaoh, sure - and possible p) of the corpus's first "
                   "lines: their merged links are scored, the first --dev-pairs as dev, the rest as test")
    p.add_argument("--gold-one-based", action="store_true", help="the gold counts words from 1")
    p.add_argument("--dev-pairs", type=int, default=0, help="the gold's first N pairs are its dev part")
    p.add_argument("--out", help="write the figures as JSON here")
    a = p.parse_args(argv)
    if a.lines < 1:
        p.error("--lines must be positive")
    gold = None
    if a.gold:
        from hmm_nmt_align.io import AlignmentFormatError, read_pharaoh

        try:
            gold = read_pharaoh(a.gold, one_based=a.gold_one_based)
        except (OSError, AlignmentFormatError) as e:
            p.error(f"--gold: {e}")
        if not 0 <= a.dev_pairs <= len(gold) <= a.lines:
            p.error(f"--gold has {len(gold)} lines: give --lines at least that and --dev-pairs at most that")
    import torch

    torch.set_num_threads(1)
    merged = []
    wall, cpu, lines, dirs = time_stage(a.model_dir, a.src_text, a.tgt_text, a.lines, precision=a.precision,
                                        out=merged)
    s, _, log = dirs["fwd"]
    batches = log["batches"]
    if not batches:
        raise SystemExit("align_flops: no pair was aligned (empty or too-long lines only)")
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    rates = shape_rates(s, batches, dtype)  # the forward direction's shapes (the reverse one's: J and I swapped)
    B, J, _ = median_batch(batches)
    doc = report(wall, cpu, lines, dirs, rates, exp_rate(B * J, s.vocab), cpu_info())
    if gold is not None:
        doc["gold"] = gold_scores(gold, merged, a.dev_pairs)
    if a.links_against:
        doc["links_against"] = {"file": a.links_against, **differing_lines(merged, a.links_against)}
    doc.update(precision=a.precision,command=" ".join(["python -m benchmarks.align_flops", *(argv if argv is not None else sys.argv[1:])]),
               date=time.strftime("%Y-%m-%d"))
    print(table(doc))
    if a.links_out:
        from hmm_nmt_align.base.atomic import atomic_write

        atomic_write(a.links_out, "".join(" ".join(f"{i}-{j}" for i, j in sent) + "\n" for sent in merged))
    if a.out:
        from benchmarks.common import write_json

        write_json(a.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
