"""Write the frozen checkpoints of every architecture under tests/data/checkpoints/ (run once, then commit).

    python tests/make_checkpoint_fixtures.py

Each fixture (specifications in tests/checkpoint_fixtures.py) is built TINY through fairseq's own argument
parsing (``options.parse_args_and_arch`` of ``fairseq-train``, then ``convert_namespace_to_omegaconf``),
with ``utils.set_torch_seed(1)`` before ``task.build_model`` as ``fairseq-train`` does, nothing else
perturbed, and saved untrained by fairseq's own save path, ``Trainer.save_checkpoint`` (the "cfg"/"model"/
"optimizer_history"/... dict ``fairseq-train`` writes). Paths in the saved cfg are relative (the script
works inside the fixture directory); the test loads with ``arg_overrides`` pointing at the checkout.

``python tests/make_checkpoint_fixtures.py --only NAME ...`` writes only the named (new) fixtures and adds
them to ``expected.json``, leaving every other file as a past commit wrote it: the way to add a fixture for
a new architecture.

Then every checkpoint is loaded back through ``checkpoint_utils.load_model_ensemble_and_task`` (strict), its
fixed batch scored in float32 and float64 (see tests/checkpoint_fixtures.py) and everything written to
``expected.json``. Rerunning rewrites the fixtures; only do so deliberately (a checkpoint format change), as
the point of the files is that they were written by the code of one past commit.

The repository's .gitignore ignores ``checkpoints/`` and ``*.pt``: commit the files with
``git add -f tests/data/checkpoints``.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "alignment")]
sys.path.insert(0, HERE)

import checkpoint_fixtures as cf  # noqa: E402
import torch  # noqa: E402
from fairseq import options, tasks, utils  # noqa: E402
from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: E402
from fairseq.trainer import Trainer  # noqa: E402

import hmm_nmt  # noqa: E402,F401

SEED = 1


def write_data_files():
    os.makedirs(cf.FIXTURE_DIR, exist_ok=True)
    for fname, symbols in cf.DICTS.items():
        with open(os.path.join(cf.FIXTURE_DIR, fname), "w") as f:
            f.writelines(f"{s} {100 - i}\n" for i, s in enumerate(symbols))
    for fname, pairs in cf.CLUSTER_FILES.items():
        with open(os.path.join(cf.FIXTURE_DIR, fname), "w") as f:
            f.writelines(f"{w} {c}\n" for w, c in pairs)


def save_fixture(name):
    kind, arch, extra = cf.FIXTURES[name]
    task_name = "translation" if kind in ("translation", "dhmm") else None
    argv = [".", "--arch", arch, "--optimizer", "adam", "--lr", "0.001", "--cpu", "--seed", str(SEED),
            "--num-workers", "0"] + (["--task", task_name] if task_name else []) + list(extra)
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, input_args=argv)
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    utils.set_torch_seed(cfg.common.seed)
    model = task.build_model(cfg.model)
    criterion = task.build_criterion(cfg.criterion)
    trainer = Trainer(cfg, task, model, criterion)
    trainer.consolidate_optimizer()  # what checkpoint_utils.save_checkpoint does before saving
    trainer.save_checkpoint(f"{name}.pt", {"train_iterator": {"epoch": 1}, "val_loss": None})
    return kind, task


def main(only=None):
    names = list(cf.FIXTURES) if not only else list(only)
    unknown = set(names) - set(cf.FIXTURES)
    if unknown:
        raise SystemExit(f"unknown fixtures: {sorted(unknown)}")
    if not only:
        write_data_files()
    cwd = os.getcwd()
    os.chdir(cf.FIXTURE_DIR)  # relative paths ("." data, cluster files) in the saved cfg
    try:
        batches = {}
        for name in names:
            kind, task = save_fixture(name)
            batches[name] = cf.make_batch(kind, task)
    finally:
        os.chdir(cwd)
    expected = {"_doc": "written by tests/make_checkpoint_fixtures.py; checked by tests/test_checkpoint_fixtures.py",
                "fixtures": {}}
    if only:
        with open(cf.EXPECTED) as f:
            expected = json.load(f)
    for name in names:
        model, task, criterion = cf.load(name)
        scores = cf.scores_both_precisions(name, model, task, criterion, batches[name])
        expected["fixtures"][name] = {"arch": cf.FIXTURES[name][1], "batch": batches[name], **scores}
        print(f"{name}: {os.path.getsize(os.path.join(cf.FIXTURE_DIR, name + '.pt'))} bytes, "
              f"criterion loss {scores['float64']['criterion_loss']:.6f}")
    text = json.dumps(expected, indent=1)
    # one line per innermost list of numbers (floats written with repr: exact float64 round trip)
    text = re.sub(r"\[\s*([-0-9.eE+,\s]+?)\s*\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
    assert json.loads(text) == expected
    with open(cf.EXPECTED, "w") as f:
        f.write(text + "\n")
    total = sum(os.path.getsize(os.path.join(cf.FIXTURE_DIR, p)) for p in os.listdir(cf.FIXTURE_DIR))
    print(f"total {total} bytes in {cf.FIXTURE_DIR}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    argv = sys.argv[1:]
    main(argv[argv.index("--only") + 1:] if "--only" in argv else None)
