"""Train and evaluate one ``sequence_tagging`` model in-process, with fixed seed and budget.

A driver over the models (they never import it), used by ``scripts/bench_tagging.py`` and the tests. It goes
through the very fairseq components the CLI uses (task, dictionaries, batch iterator, model,
``tagging_cross_entropy`` criterion); only the loop is a plain Adam loop so that runs are short, deterministic
and timed (training tokens per second, tagging tokens per second). Evaluation is over the whole valid split:
tag accuracy and entity F1 (seqeval strict, micro) in the data file's tag scheme, with the criterion's
decoding (``decoding="argmax"``: the MPM, arg-max over non-special tags; ``"viterbi"``: the best sequence
the training scheme allows, :func:`hmm_nmt.criterions.tagging_cross_entropy.decode_tags`).
``train_and_evaluate(..., patience=P)`` evaluates after every epoch and stops after P epochs without a
better dev score, keeping the best epoch's parameters (early stopping on the dev metric).
"""
import copy
import time

import torch
from fairseq import options, tasks, utils

import hmm_nmt  # noqa: F401  (registration)
from benchmarks.stopping import Patience
from hmm_nmt.criterions.tagging_cross_entropy import decode_tags
from hmm_nmt.data.entity_eval import count_invalid, entity_scores


def make_args(arch, data, extra=()):
    """fairseq training args for ``--task sequence_tagging --arch ARCH`` plus ``extra`` CLI flags."""
    parser = options.get_training_parser(default_task="sequence_tagging")
    argv = [data, "--task", "sequence_tagging", "--arch", arch, "--criterion", "tagging_cross_entropy",
            "--optimizer", "adam"] + list(extra)
    return options.parse_args_and_arch(parser, input_args=argv)


def evaluate(model, task, split="valid", batch_size=64, decoding="argmax"):
    """(accuracy %, entity F1 % or None, tagging tokens/s) over a whole split."""
    res = evaluate_full(model, task, split, batch_size, decoding)
    return res["accuracy"], res["chunk_f1"], res["tag_tok_s"]


def evaluate_full(model, task, split="valid", batch_size=64, decoding="argmax"):
    """accuracy, chunk_f1 (entity F1 in the file's scheme, None for non-entity tags), invalid (predicted
    sequences breaking the training scheme), tag_tok_s over a whole split."""
    td = task.target_dictionary
    model.eval()
    gold, pred = [], []
    n_tok, elapsed = 0, 0.0
    itr = task.get_batch_iterator(task.dataset(split), max_sentences=batch_size, seed=1).next_epoch_itr(shuffle=False)
    with torch.no_grad():
        for sample in itr:
            t0 = time.perf_counter()
            out = model(**sample["net_input"])
            lprobs = model.get_normalized_probs(out, log_probs=True)
            p = decode_tags(model, sample["net_input"], lprobs, task, decoding)
            elapsed += time.perf_counter() - t0
            for g_row, p_row, n in zip(sample["target"].tolist(), p.tolist(), sample["net_input"]["src_lengths"].tolist()):
                gold.append([td[i] for i in g_row[:n]])
                pred.append([td[i] for i in p_row[:n]])
                n_tok += n
    correct = sum(g == q for gs, ps in zip(gold, pred) for g, q in zip(gs, ps))
    out = {"accuracy": 100.0 * correct / max(n_tok, 1), "chunk_f1": None, "invalid": 0,
           "tag_tok_s": n_tok / max(elapsed, 1e-9)}
    if task.bio:
        out["invalid"] = count_invalid(pred, task.train_scheme)
        file_gold = [task.to_file_scheme(g) for g in gold]
        file_pred = [task.to_file_scheme(q) for q in pred]
        out["chunk_f1"] = entity_scores(file_gold, file_pred, task.data_scheme)["f1"]
    return out


def train_and_evaluate(args, seed, epochs, lr, batch_size=32, progress=None, task=None, patience=None,
                       decoding="argmax", metric="chunk_f1", test=False):
    """Train up to ``epochs`` epochs with Adam(lr) and mini-batches of ``batch_size`` sentences; evaluate on
    valid. With ``patience`` P, evaluate ``metric`` (``chunk_f1`` or ``accuracy``) on valid after every epoch,
    stop after P epochs without improvement and restore the best epoch's parameters.

    Returns a dict: accuracy, chunk_f1, invalid, train_tok_s, tag_tok_s, params, seconds, final_loss,
    epochs_run, best_epoch; with ``test`` also test_accuracy, test_chunk_f1 and test_invalid: the kept
    (dev-best) parameters evaluated once on the task's test split, which must be loaded.
    """
    utils.set_torch_seed(seed)
    if task is None:
        task = tasks.setup_task(args)
        task.load_dataset("train")
        task.load_dataset("valid")
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=lr)
    n_tok, train_time, loss_val = 0, 0.0, float("nan")
    stopper = Patience(patience, maximize=True) if patience is not None else None
    best_state, epochs_run = None, 0
    for epoch in range(1, epochs + 1):
        model.train()
        # no cached iterator: fairseq reuses one per dataset, so a run would continue the previous run's epochs
        # and shuffle with its seed (found by the kill-and-resume test: results depended on the runs before)
        itr = task.get_batch_iterator(task.dataset("train"), max_sentences=batch_size, seed=seed, epoch=epoch,
                                      disable_iterator_cache=True).next_epoch_itr(shuffle=True)
        tot_loss, tot_n = 0.0, 0
        for sample in itr:
            t0 = time.perf_counter()
            loss, sample_size, _ = criterion(model, sample)
            opt.zero_grad()
            (loss / sample_size).backward()
            opt.step()
            train_time += time.perf_counter() - t0
            n_tok += sample_size
            tot_loss += float(loss.detach())
            tot_n += sample_size
        loss_val = tot_loss / max(tot_n, 1)
        epochs_run = epoch
        if progress is not None:
            progress(epoch, loss_val)
        if stopper is not None:
            stop = stopper.step(evaluate_full(model, task, decoding=decoding)[metric], epoch)
            if stopper.best_step == epoch:
                best_state = copy.deepcopy(model.state_dict())
            if stop:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    res = evaluate_full(model, task, decoding=decoding)
    out = {
        "accuracy": res["accuracy"], "chunk_f1": res["chunk_f1"], "invalid": res["invalid"],
        "train_tok_s": n_tok / max(train_time, 1e-9), "tag_tok_s": res["tag_tok_s"],
        "params": sum(p.numel() for p in params), "seconds": train_time, "final_loss": loss_val,
        "epochs_run": epochs_run, "best_epoch": stopper.best_step if stopper is not None else epochs_run,
    }
    if test:
        res = evaluate_full(model, task, split="test", decoding=decoding)
        out.update(test_accuracy=res["accuracy"], test_chunk_f1=res["chunk_f1"], test_invalid=res["invalid"])
    return out
