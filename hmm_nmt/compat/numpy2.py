"""fairseq 0.12 on numpy >= 2: ``np.compat`` was removed, but fairseq's TokenBlockDataset (``--sample-break-mode
eos``, the sentence mode of ``--task language_modeling``) and LanguagePairDataset bucketing still read
``np.compat.long``. Installed on import of the plugin, only where numpy lacks it."""
import types

import numpy as np

from hmm_nmt.compat._once import install_once


@install_once
def install():
    if not hasattr(np, "compat"):
        np.compat = types.SimpleNamespace(long=np.int64)
