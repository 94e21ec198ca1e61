"""Train and evaluate one ``sequence_tagging`` model in-process, with fixed seed and budget.

A driver over the models (they never import it), used by ``scripts/bench_tagging.py`` and the tests. It goes
through the very fairseq components the CLI uses (task, dictionaries, batch iterator, model,
``tagging_cross_entropy`` criterion); only the loop is a plain Adam loop so that runs are short, deterministic
and timed (training tokens per second, tagging tokens per second). Evaluation is over the whole valid split
with seqeval (chunk F1, micro) and tag accuracy, using the criterion's MPM prediction (arg-max over
non-special tags).
"""
import time

import torch
from fairseq import options, tasks, utils

import hmm_nmt  # noqa: F401  (registration)
from hmm_nmt.criterions.tagging_cross_entropy import predict_tags


def make_args(arch, data, extra=()):
    """fairseq training args for ``--task sequence_tagging --arch ARCH`` plus ``extra`` CLI flags."""
    parser = options.get_training_parser(default_task="sequence_tagging")
    argv = [data, "--task", "sequence_tagging", "--arch", arch, "--criterion", "tagging_cross_entropy",
            "--optimizer", "adam"] + list(extra)
    return options.parse_args_and_arch(parser, input_args=argv)


def evaluate(model, task, split="valid", batch_size=64):
    """(accuracy %, chunk F1 % or None, tagging tokens/s) over a whole split."""
    from seqeval.metrics import f1_score

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
            p = predict_tags(lprobs, td.nspecial)
            elapsed += time.perf_counter() - t0
            for g_row, p_row, n in zip(sample["target"].tolist(), p.tolist(), sample["net_input"]["src_lengths"].tolist()):
                gold.append([td[i] for i in g_row[:n]])
                pred.append([td[i] for i in p_row[:n]])
                n_tok += n
    correct = sum(g == q for gs, ps in zip(gold, pred) for g, q in zip(gs, ps))
    acc = 100.0 * correct / max(n_tok, 1)
    f1 = 100.0 * f1_score(gold, pred) if task.bio else None
    return acc, f1, n_tok / max(elapsed, 1e-9)


def train_and_evaluate(args, seed, epochs, lr, batch_size=32, progress=None, task=None):
    """Train ``epochs`` epochs with Adam(lr) and mini-batches of ``batch_size`` sentences; evaluate on valid.

    Returns a dict: accuracy, chunk_f1, train_tok_s, tag_tok_s, params, seconds, final_loss.
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
    for epoch in range(1, epochs + 1):
        model.train()
        itr = task.get_batch_iterator(task.dataset("train"), max_sentences=batch_size, seed=seed,
                                      epoch=epoch).next_epoch_itr(shuffle=True)
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
        if progress is not None:
            progress(epoch, loss_val)
    acc, f1, tag_speed = evaluate(model, task)
    return {
        "accuracy": acc, "chunk_f1": f1, "train_tok_s": n_tok / max(train_time, 1e-9), "tag_tok_s": tag_speed,
        "params": sum(p.numel() for p in params), "seconds": train_time, "final_loss": loss_val,
    }
