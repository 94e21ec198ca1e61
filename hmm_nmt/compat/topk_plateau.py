"""A validation plateau starts the next step of ``--lexicon-topk-schedule`` instead of ending training.

fairseq 0.12's ``--patience N`` stops training after N validations without improvement
(``fairseq_cli.train.should_stop_early``). With a schedule such as ``4@0,0@80%`` (pruned to 4 source positions,
then exact) the pruned phase may converge long before its step, and stopping there would leave the model pruned
to its end. So when patience would stop a model whose schedule has a step still to come, that step starts at
this update (the model's ``advance_topk_schedule``), patience's count restarts (its best value stays) and training
goes on: the exact phase starts when the pruned one has converged, or at its update, whichever is first, and
patience then judges the exact phase. Plain ``fairseq-train`` does this once ``hmm_nmt`` is its ``--user-dir``.

The updates where a step started go to every checkpoint's ``extra_state`` (``hmm_nmt_topk_switches``) and are
applied again when training resumes from it, so a resumed run trains the same phases as an uninterrupted one.
"""
import logging
import sys

from hmm_nmt.compat._once import install_once

logger = logging.getLogger(__name__)

SWITCHES_KEY = "hmm_nmt_topk_switches"
_state = {"trainer": None, "switches": []}  # the trainer of this process, and its switches (resumed ones too)


def switches():
    """The updates at which a plateau started a schedule step in this process's training (resumed ones too)."""
    return list(_state["switches"])


def _advance(trainer, updates):
    model = getattr(trainer.model, "module", trainer.model)  # unwrap DDP / legacy wrappers
    hooks = [m.advance_topk_schedule for m in model.modules() if hasattr(m, "advance_topk_schedule")]
    return any([hook(updates) for hook in hooks])  # a list: every module moves, not only the first


def _would_stop(cfg, valid_loss, counter):
    """fairseq's rule read without counting (its own call logs "early stop", which ends a run's log)."""
    patience, best = cfg.checkpoint.patience, getattr(counter, "best", None)
    if valid_loss is None or patience <= 0 or best is None:
        return False
    better = valid_loss > best if cfg.checkpoint.maximize_best_checkpoint_metric else valid_loss < best
    return not better and getattr(counter, "num_runs", 0) + 1 >= patience


@install_once
def install():
    try:
        from fairseq.trainer import Trainer
        from fairseq_cli import train as train_cli
    except ImportError:
        return False
    # ``python -m fairseq_cli.train`` runs the module as __main__, a second copy of its globals
    main = sys.modules.get("__main__")
    modules = [train_cli] + ([main] if getattr(getattr(main, "__spec__", None), "name", None) == train_cli.__name__
                             else [])
    for module in modules:
        _patch_stop(module)
    save, load = Trainer.save_checkpoint, Trainer.load_checkpoint

    def save_checkpoint(self, filename, extra_state):
        if _state["switches"] and self is _state["trainer"]:
            extra_state = dict(extra_state, **{SWITCHES_KEY: list(_state["switches"])})
        return save(self, filename, extra_state)

    def load_checkpoint(self, *args, **kwargs):
        # fairseq-train calls this once at start, checkpoint or not: it names the trainer being trained
        _state["trainer"], _state["switches"] = self, []
        extra_state = load(self, *args, **kwargs)
        for updates in (extra_state or {}).get(SWITCHES_KEY, []):
            _advance(self, updates)
            _state["switches"].append(updates)
        return extra_state

    Trainer.save_checkpoint, Trainer.load_checkpoint = save_checkpoint, load_checkpoint


def _patch_stop(module):
    stop = module.should_stop_early

    def should_stop_early(cfg, valid_loss):
        # fairseq keeps the count in attributes of whatever its module name holds: this function
        counter, trainer = module.should_stop_early, _state["trainer"]
        if trainer is not None and _would_stop(cfg, valid_loss, counter):
            updates = trainer.get_num_updates()
            if _advance(trainer, updates):
                counter.num_runs = 0
                _state["switches"].append(updates)
                logger.info(f"lexicon top-k schedule: no improvement for {cfg.checkpoint.patience} validations, "
                            f"so its next step starts at update {updates}; training goes on")
                return False
        return stop(cfg, valid_loss)

    module.should_stop_early = should_stop_early
