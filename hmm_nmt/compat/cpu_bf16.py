"""``fairseq-train --cpu --bf16``: bfloat16 autocast on CPU.

fairseq 0.12 treats ``--bf16`` as TPU-only (``parse_args_and_arch`` sets ``--tpu``, the trainer then asks
torch_xla for a device), so on a CPU machine the flag fails before training starts. With ``--cpu --bf16``
on a machine without CUDA, :func:`install` (called from the plugin's CPU launcher, see
:mod:`hmm_nmt.compat.distributed_cpu`) turns that into CPU autocast instead: parameters, gradients and optimizer
state stay float32, and ``Trainer.train_step`` / ``valid_step`` run under
``torch.autocast("cpu", dtype=torch.bfloat16)``, so matmuls and linear layers compute in bf16 while the
plugin's HMM code keeps its dynamic programmes, log-sum-exps and accumulations in float32 (the alignment
log-softmax, the lexicon normalisers and the DP all cast to float32 explicitly; tested). The switch travels
to spawned and torchrun workers in the environment variable ``HMM_NMT_CPU_AUTOCAST``.
"""
import contextlib
import functools
import logging
import os

import torch

from hmm_nmt.compat._once import install_once

logger = logging.getLogger(__name__)
ENV = "HMM_NMT_CPU_AUTOCAST"


def enable_from_cfg(cfg) -> None:
    """Called with fairseq's config before training: ``--cpu --bf16`` -> CPU autocast instead of TPU."""
    common = cfg.common
    if common.bf16 and not torch.cuda.is_available():
        from omegaconf import open_dict

        if common.memory_efficient_bf16:
            raise ValueError("--memory-efficient-bf16 is TPU-only in fairseq 0.12; on CPU use --bf16 "
                             "(autocast, float32 parameters)")
        with open_dict(cfg):
            common.bf16 = False
            common.tpu = False
            cfg.distributed_training.tpu = False
        os.environ[ENV] = "bf16"
        logger.info("--bf16 on CPU: bfloat16 autocast, float32 parameters and optimizer (hmm_nmt.compat.cpu_bf16)")
    else:  # a later fairseq entry point in the same process (in-process tests, notebooks) starts clean
        os.environ.pop(ENV, None)


def autocast():
    if os.environ.get(ENV) == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@install_once
def install() -> None:
    from fairseq.trainer import Trainer

    for name in ("train_step", "valid_step"):
        original = getattr(Trainer, name)

        @functools.wraps(original)
        def step(self, *args, __original=original, **kwargs):
            with autocast():
                return __original(self, *args, **kwargs)

        setattr(Trainer, name, step)
