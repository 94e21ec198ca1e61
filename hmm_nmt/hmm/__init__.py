"""Pure-torch HMM mathematics (no fairseq import): forward recursions, posteriors, lexicon kernels."""
