"""Corpus scores of detokenisation-free hypotheses: sacrebleu BLEU / TER / chrF and the length ratio."""
from benchmarks.common import BenchmarkError


def score(hyps, refs):
    """sacrebleu BLEU / TER / chrF with ``-tok none -lc`` (text is already tokenised and lowercased)."""
    from sacrebleu.metrics import BLEU, CHRF, TER

    if len(hyps) != len(refs):
        raise BenchmarkError(f"{len(hyps)} hypotheses for {len(refs)} references")
    bleu_m = BLEU(tokenize="none", lowercase=True, force=True)  # force: tokenised input is intended here
    ter_m = TER(case_sensitive=False)
    chrf_m = CHRF(lowercase=True)
    bleu = bleu_m.corpus_score(hyps, [refs])
    ter = ter_m.corpus_score(hyps, [refs])
    chrf = chrf_m.corpus_score(hyps, [refs])
    return {
        "bleu": bleu.score,
        "ter": ter.score,
        "chrf": chrf.score,
        "length_ratio": bleu.sys_len / bleu.ref_len if bleu.ref_len else float("nan"),
        "hyp_len": bleu.sys_len,
        "ref_len": bleu.ref_len,
        "signatures": {
            "bleu": str(bleu_m.get_signature()),
            "ter": str(ter_m.get_signature()),
            "chrf": str(chrf_m.get_signature()),
        },
    }
