"""Word alignment from Python: a fairseq hub interface with ``align`` and ``translate(..., alignment=True)``.

::

    from alignment.hub import from_pretrained           # any transformer_dhmm or plain transformer checkpoint
    hub = from_pretrained("checkpoints", checkpoint_file="checkpoint_best.pt", data_name_or_path="data-bin",
                          bpe="subword_nmt", bpe_codes="codes")
    hub.align(["das haus ist klein"], ["the house is small"])          # method: posterior (dhmm), attention

The hub lives in the model layer, :mod:`hmm_nmt.aligner.hub` (documented there), so that
``TransformerDHMMModel.from_pretrained`` can return it without importing this package; these are its names.
"""
from hmm_nmt.aligner.hub import AlignmentHubInterface, WordAlignment, from_pretrained

__all__ = ["WordAlignment", "AlignmentHubInterface", "from_pretrained"]
