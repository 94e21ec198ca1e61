"""Command lines of the plugin that load checkpoints (``hmm-nmt-tag``): the top layer of :mod:`hmm_nmt`."""
