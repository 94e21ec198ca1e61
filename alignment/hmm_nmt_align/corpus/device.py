"""Where ``hmm-nmt-align-corpus`` trains and aligns (``--cpu``, the GPUs) and in which precision (``--precision``)."""


def _device(opts):
    import torch

    return torch.device("cuda" if torch.cuda.is_available() and not opts.cpu else "cpu")


def _align_batch(opts) -> int:
    """Pairs per alignment batch (at most; --align-max-tokens also bounds it): 64 on a GPU; 16 on a CPU, where
    the first order's (B, I, J', J) tensors of a small batch stay in the core's cache (docs/speed.md 7.4: 30%
    less time per pair than 64 on a 2-core Xeon, same links)."""
    return 64 if _device(opts).type == "cuda" else 16


def _gpus(opts) -> int:
    """CUDA devices the command may use (0 with --cpu)."""
    import torch

    return 0 if opts.cpu or not torch.cuda.is_available() else torch.cuda.device_count()


def _bf16(opts) -> bool:
    """Whether --precision means bf16 matmuls on this machine (auto: where they are native)."""
    import torch

    from hmm_nmt.hmm.precision import lexicon_dtype

    return lexicon_dtype(opts.precision, _device(opts)) == torch.bfloat16


def _bf16_training(opts) -> bool:
    """bf16 training: CPUs only (fairseq 0.12's own --bf16 is a TPU path); --precision auto trains a GPU in fp32."""
    return _bf16(opts) and _device(opts).type == "cpu"
