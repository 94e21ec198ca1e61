"""``python -m hmm_nmt_align {aer,symmetrize,align,heatmap,baselines,split-agreement} ...``: the console scripts without installing."""
import sys


def main() -> int:
    commands = {"aer": ("hmm_nmt_align.cli", "aer_main"), "symmetrize": ("hmm_nmt_align.cli", "symmetrize_main"),
                "heatmap": ("hmm_nmt_align.heatmap", "main"),
                "align": ("hmm_nmt_align.extract", "main"), "baselines": ("hmm_nmt_align.baselines", "main"),
                "split-agreement": ("hmm_nmt_align.split_agreement", "main")}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.stderr.write(f"usage: python -m hmm_nmt_align {{{','.join(commands)}}} ARGS...\n")
        return 2
    import importlib

    module, fn = commands[sys.argv[1]]
    return getattr(importlib.import_module(module), fn)(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
