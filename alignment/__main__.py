"""``python -m alignment {aer,symmetrize,align,heatmap,baselines,split-agreement} ...``: the console scripts without installing."""
import sys


def main() -> int:
    commands = {"aer": ("alignment.cli", "aer_main"), "symmetrize": ("alignment.cli", "symmetrize_main"),
                "heatmap": ("alignment.heatmap", "main"),
                "align": ("alignment.extract", "main"), "baselines": ("alignment.baselines", "main"),
                "split-agreement": ("alignment.split_agreement", "main")}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.stderr.write(f"usage: python -m alignment {{{','.join(commands)}}} ARGS...\n")
        return 2
    import importlib

    module, fn = commands[sys.argv[1]]
    return getattr(importlib.import_module(module), fn)(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
