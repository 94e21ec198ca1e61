"""fairseq reads checkpoints through the project's safe loader.

fairseq 0.12's ``checkpoint_utils.load_checkpoint_to_cpu`` (behind ``fairseq-generate --path``, ``--restore-file``
and resume in ``fairseq-train``, ``load_model_ensemble_and_task`` and so every tool of the project) calls
``torch.load`` without ``weights_only``: safe by default on torch >= 2.6 only, unsafe again under
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, and a missing, empty or text file ends in a traceback. :func:`install`
replaces it, for local files, by :func:`hmm_nmt_align.safe_checkpoint.load_checkpoint_state` followed by what
fairseq does after its ``torch.load`` (arg overrides, the cfg made an OmegaConf object, the state upgraded):
a checkpoint that would run code is refused in one line naming the file, nothing of it run. Remote paths
(iopath handlers) keep fairseq's own loader.
"""
from hmm_nmt.compat._once import install_once
from hmm_nmt_align.safe_checkpoint import load_checkpoint_state


def _as_fairseq_does(checkpoint_utils, state, arg_overrides):
    """The part of fairseq 0.12.3's ``load_checkpoint_to_cpu`` after ``torch.load``."""
    from omegaconf import OmegaConf, _utils
    from omegaconf import __version__ as oc_version

    if "args" in state and state["args"] is not None and arg_overrides is not None:
        for arg_name, arg_val in arg_overrides.items():
            setattr(state["args"], arg_name, arg_val)
    if "cfg" in state and state["cfg"] is not None:
        if oc_version < "2.2":  # fairseq's hack to hold a Namespace in a DictConfig
            old_primitive = _utils.is_primitive_type
            _utils.is_primitive_type = lambda _: True
            try:
                state["cfg"] = OmegaConf.create(state["cfg"])
            finally:
                _utils.is_primitive_type = old_primitive
            OmegaConf.set_struct(state["cfg"], True)
        else:
            state["cfg"] = OmegaConf.create(state["cfg"], flags={"allow_objects": True})
        if arg_overrides is not None:
            checkpoint_utils.overwrite_args_by_name(state["cfg"], arg_overrides)
    return checkpoint_utils._upgrade_state_dict(state)


@install_once
def install():
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    fairseq_loader = checkpoint_utils.load_checkpoint_to_cpu

    def load_checkpoint_to_cpu(path, arg_overrides=None, load_on_all_ranks=False):
        if PathManager.path_requires_pathmanager(path):
            return fairseq_loader(path, arg_overrides, load_on_all_ranks)
        return _as_fairseq_does(checkpoint_utils, load_checkpoint_state(path), arg_overrides)

    load_checkpoint_to_cpu.__doc__ = fairseq_loader.__doc__
    checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
