"""Checkpoint copies that a kill cannot truncate.

fairseq 0.12 writes the first checkpoint of a save (e.g. ``checkpoint_1_400.pt``) atomically (a ``.tmp`` file,
then a rename) but makes ``checkpoint_last.pt`` and ``checkpoint_best.pt`` as plain copies of it
(``PathManager.copy`` = ``shutil.copyfile``). A SIGKILL, an OOM kill or a preempted node during that copy leaves
a truncated ``checkpoint_last.pt``, and the rerun that should resume from it dies loading it. :func:`install`
gives ``fairseq.checkpoint_utils`` a ``PathManager`` whose ``copy`` of local files goes to ``DST.tmp`` and is
renamed over ``DST`` (``os.replace``, atomic on POSIX; :func:`hmm_nmt_align.base.atomic.atomic_output`): a kill leaves either
the old or the new file.
Remote paths (iopath handlers) keep fairseq's own copy.
"""
import os
import shutil

from hmm_nmt.compat._once import install_once
from hmm_nmt_align.base.atomic import atomic_output


@install_once
def install() -> None:
    from fairseq import checkpoint_utils
    from fairseq.file_io import PathManager

    class AtomicCopyPathManager(PathManager):
        @staticmethod
        def copy(src_path: str, dst_path: str, overwrite: bool = False) -> bool:
            if PathManager.path_requires_pathmanager(src_path) or PathManager.path_requires_pathmanager(dst_path):
                return PathManager.copy(src_path, dst_path, overwrite=overwrite)
            if not overwrite and os.path.exists(dst_path):
                raise FileExistsError(dst_path)
            with atomic_output(dst_path, fixed=True) as tmp:
                shutil.copyfile(src_path, tmp)
            return True

    checkpoint_utils.PathManager = AtomicCopyPathManager
