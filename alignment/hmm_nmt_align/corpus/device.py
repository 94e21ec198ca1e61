"""Where ``hmm-nmt-align-corpus`` trains and aligns (``--cpu``, the GPUs) and in which precision (``--precision``)."""


def _device(opts):
    import torch

    return torch.device("cuda" if torch.cuda.is_available() and not opts.cpu else "cpu")


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
