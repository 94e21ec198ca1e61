"""fairseq 0.12 distributed training on CPU (gloo), without forking fairseq.

fairseq 0.12's launcher assumes CUDA in four places, so on a machine without a GPU
``fairseq-train --cpu --distributed-world-size 2 --distributed-backend gloo`` does not start:

* ``_infer_single_node_init`` asserts ``world_size <= torch.cuda.device_count()`` (0), and with an explicit
  ``--distributed-port`` no process group is set up at all ("Default process group has not been
  initialized" later);
* ``call_main`` and ``infer_init_method`` spawn ``min(torch.cuda.device_count(), world_size)`` = 0 processes;
* under ``torchrun`` ``_infer_torch_distributed_launch_init`` computes ``rank % torch.cuda.device_count()``
  (ZeroDivisionError), and without ``--distributed-world-size`` the default world size (the number of GPUs,
  at least 1) makes every process train its own copy;
* the ``c10d``/``pytorch_ddp`` backend wraps the model in ``DistributedDataParallel(device_ids=[id])``, which
  torch refuses for a CPU module (``device_ids`` must be None there).

:func:`install` replaces exactly those functions of ``fairseq.distributed.utils`` and the
``DistributedDataParallel`` name used by ``fairseq.models.distributed_fairseq_model``, with versions that
count processes instead of GPUs and pass no device ids. It does nothing when CUDA is available, so the GPU
(nccl) path stays stock fairseq. Everything else (gradient all-reduce, ``--update-freq`` accumulation,
the all-reduce of the criterion's logging outputs, checkpointing on rank 0) is fairseq's own code.
The same launcher hook turns ``--cpu --bf16`` (TPU-only in fairseq 0.12) into CPU autocast
(:mod:`hmm_nmt.compat.cpu_bf16`).

Criterion statistics: every criterion of the plugin returns scalar sums and says
``logging_outputs_can_be_summed() -> True``, so fairseq reduces them by one all-reduce
(``_fast_stat_sync_sum``); fairseq's other path, ``all_gather_list``, allocates CUDA and pinned buffers
and cannot run on a CPU-only machine.
"""
import logging
import os

import torch

from hmm_nmt.compat import cpu_bf16
from hmm_nmt.compat._once import install_once

logger = logging.getLogger(__name__)


def _cpu_only() -> bool:
    return not torch.cuda.is_available()


@install_once
def install() -> bool:
    """Patch fairseq's launcher for CPU processes (once). Returns whether the patch is active."""
    if not _cpu_only():
        return False
    try:
        from fairseq.distributed import utils as dist_utils
        from fairseq.models import distributed_fairseq_model as dfm
    except ImportError:  # no fairseq: nothing to patch
        return False

    def _infer_torch_distributed_launch_init(cfg):
        # torchrun / torch.distributed.launch: one CPU process per rank, no device to pick
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.device_id = 0  # a CUDA device index; fairseq would torch.cuda.set_device() any other value
        cfg.distributed_no_spawn = True

    def _infer_single_node_init(cfg):
        # the original asserts world_size <= number of GPUs; on CPU every rank is a process on this host
        if cfg.distributed_port <= 0:
            # a port the OS reports free rather than a random one: trainings (or test workers) may start at once
            import socket

            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("localhost", 0))
                cfg.distributed_port = s.getsockname()[1]
        cfg.distributed_init_method = f"tcp://localhost:{cfg.distributed_port}"

    original_infer = dist_utils.infer_init_method

    def infer_init_method(cfg, force_distributed=False):
        launched = all(k in os.environ for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"))
        if launched and cfg.distributed_world_size == 1 and int(os.environ["WORLD_SIZE"]) > 1:
            # fairseq's default world size is the number of GPUs (1 here): without this, every process
            # torchrun starts would train its own unsynchronised copy into the same --save-dir
            cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        if cfg.distributed_init_method is None and cfg.distributed_world_size > 1 and not cfg.tpu \
                and not any(k in os.environ for k in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST")) \
                and not launched:
            # one node, spawned here: with --distributed-port given, fairseq 0.12 would skip the init
            # method entirely and train one unsynchronised process
            force_distributed = True
        original_infer(cfg, force_distributed=force_distributed)
        if cfg.distributed_init_method is not None and not cfg.distributed_no_spawn:
            from omegaconf import open_dict

            with open_dict(cfg):
                cfg.distributed_num_procs = cfg.distributed_world_size

    original_call_main = dist_utils.call_main

    def call_main(cfg, main, **kwargs):
        cpu_bf16.enable_from_cfg(cfg)  # --cpu --bf16: autocast, not fairseq's TPU path
        dt = cfg.distributed_training
        if dt.distributed_init_method is None:
            infer_init_method(dt)
        if dt.distributed_init_method is None or dt.distributed_no_spawn or cfg.common.tpu:
            return original_call_main(cfg, main, **kwargs)
        # as fairseq's spawn branch, with one process per rank instead of one per GPU
        kwargs["start_rank"] = dt.distributed_rank
        dt.distributed_rank = None
        torch.multiprocessing.spawn(fn=dist_utils.distributed_main, args=(main, cfg, kwargs),
                                    nprocs=dt.distributed_world_size, join=True)

    class CPUDistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
        """torch's DDP with the device ids dropped: they are only valid for single-GPU modules."""

        def __init__(self, module, device_ids=None, output_device=None, **kwargs):
            super().__init__(module, device_ids=None, output_device=None, **kwargs)

    dist_utils._infer_torch_distributed_launch_init = _infer_torch_distributed_launch_init
    dist_utils._infer_single_node_init = _infer_single_node_init
    dist_utils.infer_init_method = infer_init_method
    dist_utils.call_main = call_main
    cpu_bf16.install()
    dfm.DistributedDataParallel = CPUDistributedDataParallel
    return True
