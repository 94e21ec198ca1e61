"""Learning-rate schedulers of the plugin (registered with fairseq on import)."""
