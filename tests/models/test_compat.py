"""``import hmm_nmt`` (what ``--user-dir hmm_nmt`` does) installs the patches of :mod:`hmm_nmt.compat`, each once."""
import pytest
import torch


def test_import_installs_every_patch():
    import numpy as np
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as dist_utils

    import hmm_nmt  # noqa: F401
    from hmm_nmt.compat import atomic_checkpoints, checkpoints, cpu_bf16, distributed_cpu, numpy2

    assert checkpoints._installed and numpy2._installed and atomic_checkpoints._installed
    assert hasattr(np, "compat") and checkpoint_utils.PathManager.__name__ == "AtomicCopyPathManager"
    if not torch.cuda.is_available():  # the CPU launcher, and with it --cpu --bf16 autocast
        assert distributed_cpu._installed and cpu_bf16._installed
        assert dist_utils.call_main.__module__ == "hmm_nmt.compat.distributed_cpu"


def test_install_once_runs_until_it_succeeds(monkeypatch):
    import types

    from hmm_nmt.compat import install_once

    module = types.ModuleType("patch")
    calls = []
    exec("def install():\n    calls.append(1)\n    return ready\n", module.__dict__)
    module.calls, module.ready = calls, False
    install = install_once(module.install)
    assert module._installed is False
    assert install() is False and install() is False and len(calls) == 2  # nothing to patch yet: retried
    module.ready = None  # patched (an install that returns nothing)
    assert install() is True and install() is True and len(calls) == 3 and module._installed is True
    monkeypatch.setattr(module, "_installed", False)  # what a test does to install again
    assert install() is True and len(calls) == 4


@pytest.mark.parametrize("name", ["checkpoints", "numpy2", "atomic_checkpoints", "cpu_bf16", "distributed_cpu"])
def test_every_patch_is_guarded(name):
    import importlib

    module = importlib.import_module(f"hmm_nmt.compat.{name}")
    assert module.install.__wrapped__.__module__ == module.__name__ and hasattr(module, "_installed")


def test_evaluation_batches_keep_the_tail_fairseq_drops():
    """fairseq#5036: 447 sentences in batches of <= 32, multiple 8 -> fairseq keeps 440; evaluation keeps all."""
    import numpy as np
    from fairseq.data import data_utils

    import hmm_nmt  # noqa: F401
    from hmm_nmt.compat import batch_tail

    indices = np.random.RandomState(0).permutation(447).astype(np.int64)
    batches = data_utils.batch_by_size(indices, lambda i: 10, max_sentences=32, required_batch_size_multiple=8)
    assert sorted(np.concatenate(batches).tolist()) == list(range(447))
    assert np.concatenate(batches).tolist() == indices.tolist()  # order kept: the tail is the end
    with batch_tail.training_batches():  # the training iterator: fairseq's batches, unchanged
        train = data_utils.batch_by_size(indices, lambda i: 10, max_sentences=32, required_batch_size_multiple=8)
    assert sum(len(b) for b in train) == 440
    assert all(np.array_equal(a, b) for a, b in zip(train, batches))
    gen = (int(i) for i in indices[:7])  # an iterator of indices, as fairseq also accepts
    assert [b.tolist() for b in data_utils.batch_by_size(gen, lambda i: 10, max_sentences=32,
                                                           required_batch_size_multiple=8)] == [indices[:7].tolist()]
