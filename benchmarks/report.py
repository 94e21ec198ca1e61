"""The translation benchmark's outputs: results.json, results.md (one table per direction) and PNG plots."""
import contextlib
import os
import platform

from benchmarks.common import atomic_write, write_json
from hmm_nmt_align.base.atomic import atomic_output


def hardware(software, threads):
    """The machine, as results.json records it; ``software`` is the registry preflight's answer."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    sw = software or {}
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "threads": threads or None,
            "gpu": sw.get("gpu"), "device": "cuda" if sw.get("cuda") else "cpu",
            "python": platform.python_version(), "torch": sw.get("torch"), "fairseq": sw.get("fairseq"),
            "platform": platform.platform()}


def write_outputs(doc, out_dir, plots=True):
    """results.json, results.md and (with ``plots``) the PNG plots of the document ``doc`` in ``out_dir``."""
    write_json(os.path.join(out_dir, "results.json"), doc)
    atomic_write(os.path.join(out_dir, "results.md"), markdown_report(doc))
    if plots:
        plot(doc, out_dir)


def _mib(x):
    return f"{x / 2**20:,.0f}" if x else "n/a"


def markdown_table(rows):
    """The results table of one direction; one row per model, every cell filled."""
    on_gpu = any(r.get("peak_train_cuda_bytes") for r in rows)
    mem = "GPU max alloc" if on_gpu else "RSS"
    head = ["model", "arch", "params", "updates", "BLEU", "TER", "chrF", "len ratio", "best valid nll",
            "train tok/s", "decode sent/s", "decode tok/s", f"peak train {mem} MiB", f"peak decode {mem} MiB",
            "train min", "lenpen"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"]
    for r in rows:
        tr_mem = r["peak_train_cuda_bytes"] if on_gpu else r["peak_train_rss_bytes"]
        de_mem = r["peak_decode_cuda_bytes"] if on_gpu else r["peak_decode_rss_bytes"]
        cells = [r["label"], f"`{r['arch']}`", f"{r['parameters']:,}", f"{r['updates']:,}",
                 f"{r['bleu']:.2f}", f"{r['ter']:.2f}", f"{r['chrf']:.2f}", f"{r['length_ratio']:.3f}",
                 f"{r['best_valid_nll_loss']:.3f}",
                 f"{r['train_tokens_per_second']:,.0f}" if r["train_tokens_per_second"] else "n/a",
                 f"{r['decode_sentences_per_second']:.2f}", f"{r['decode_tokens_per_second']:,.1f}",
                 _mib(tr_mem), _mib(de_mem), f"{r['train_wall_seconds'] / 60:.1f}", f"{r.get('lenpen', 1.0):g}"
                 + (f" (EOS penalty {r['eos_penalty']:g})" if r.get("eos_penalty") else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _min(seconds):
    return "" if seconds is None else f"{seconds / 60:.1f}"


def convergence_table(rows):
    """Per model: where and why training stopped, its best validation, wall clock, CPU, time to quality."""
    ttq = next((r["time_to_quality"] for r in rows if r.get("time_to_quality")), None)
    ttq_head = (f"min to {ttq['reference']}'s best {ttq['metric']} ({ttq['target']:.3f})" if ttq
                else "min to the transformer's best")
    head = ["model", "stopped at update", "epoch", "why", "best valid nll", "at update", "best dev BLEU",
            "at update", "train wall min", "train CPU min", ttq_head]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * 2 + "---|" + "---:|" * (len(head) - 4)]
    for r in rows:
        t = r.get("time_to_quality") or {}
        bleu = r.get("best_dev_bleu")
        why = (r.get("stop_reason") or "") + "".join(f"; next top-k step at {u:,} (plateau)"
                                                     for u in r.get("topk_switches") or [])
        cells = [r["label"], f"{r['updates']:,}", str(r.get("epochs", "")), why,
                 f"{r['best_valid_nll_loss']:.3f}", f"{r['best_valid_updates']:,}",
                 "" if bleu is None else f"{bleu:.2f}",
                 "" if bleu is None else f"{r['best_dev_bleu_updates']:,}",
                 _min(r.get("train_wall_seconds")), _min(r.get("train_cpu_seconds")),
                 "" if t.get("train_wall_seconds") is None else
                 f"{t['train_wall_seconds'] / 60:.1f} (update {t['updates']:,})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def length_choice_table(rows):
    """Per model two rows, the stock search and the candidate chosen on half the dev set, with the decision."""
    lines = ["| model | search | EOS penalty | lenpen | choose-half BLEU | held-out BLEU | held-out TER | "
             "test BLEU | test TER | test chrF | test len ratio | used |",
             "|---|---|" + "---:|" * 9 + "---|"]
    for r in rows:
        d = r.get("length_choice")
        if not d:
            continue
        for name in ("stock", "candidate"):
            p, t = d[name], d["test"][name]
            lines.append(f"| {r['label']} | {name} | {p['eos_penalty']:g} | {p['lenpen']:g} | "
                         f"{p['choose']['bleu']:.2f} | {p['confirm']['bleu']:.2f} | {p['confirm']['ter']:.2f} | "
                         f"{t['bleu']:.2f} | {t['ter']:.2f} | {t['chrf']:.2f} | {t['length_ratio']:.3f} | "
                         f"{'**yes**' if d['used'] == name else 'no'} |")
    return "\n".join(lines) + "\n"


def describe_machine(hw):
    device = f"GPU {hw['gpu']}" if hw["device"] == "cuda" else f"CPU {hw['cpu']}, {hw['logical_cpus']} logical cores"
    if hw.get("threads"):
        device += f", {hw['threads']} thread(s) per process"
    return device


def training_machines(doc):
    """The hardware that trained the rows when it differs from this report's (``--train-only`` on a GPU, then
    decoding on another machine); empty when every row was trained on the report's own hardware."""
    here = describe_machine(doc["hardware"])
    seen = []
    for rows in doc["results"].values():
        for r in rows:
            hw = r.get("train_hardware")
            name = describe_machine(hw) if hw else None
            if name and name not in seen:
                seen.append(name)
    return [] if seen in ([], [here]) else seen


def _decoder(doc, row):
    """The machine that decoded a row: a merged report's rows keep their own report's (``decode_hardware``)."""
    return describe_machine(row.get("decode_hardware") or doc["hardware"])


def decoding_machines(doc):
    """The machines that decoded the rows, in order, so a merged report's decode speeds may come from several."""
    seen = []
    for rows in doc["results"].values():
        seen += [n for n in (_decoder(doc, r) for r in rows) if n not in seen]
    return seen or [describe_machine(doc["hardware"])]


def machines_text(trained, decoded):
    """"CPU X" when one machine did everything, else which trained and which decoded."""
    if not trained and len(decoded) == 1:
        return decoded[0]
    return (f"trained on {' and '.join(trained)}, " if trained else "") + f"decoded on {' and '.join(decoded)}"


def decoded_apart(doc):
    """A line naming each row's decoding machine when the rows were decoded on more than one: their decode
    speeds are not comparable with each other."""
    if len(decoding_machines(doc)) < 2:
        return []
    parts = "; ".join(f"{direction} {r['slot']} on {_decoder(doc, r)}"
                      for direction, rows in doc["results"].items() for r in rows)
    return [f"- decoded on different machines ({parts}): decode sent/s and tok/s compare rows of one machine only"]


def merged_from(doc):
    """Lines naming the reports a merged document joined (``scripts/merge_translation_results.py``)."""
    sources = doc.get("sources") or []
    if not sources:
        return []
    out = [f"- merged from {len(sources)} reports of the same protocol, nothing retrained or re-decoded:"]
    bound = doc["settings"].get("max_update")
    for s in sources:
        raised = ""
        if s.get("own_bound"):
            raised = (f"; bound {s['max_update']}, kept by {', '.join(s['own_bound'])}, which would have trained "
                      f"differently under {bound}")
        elif s.get("max_update") and s["max_update"] != bound:
            raised = (f"; bound {s['max_update']}, but patience stopped every row by update {bound} on a schedule "
                      f"that ignores the bound: as if bounded at {bound}")
        out.append(f"  - `{s['path']}` ({', '.join(s['slots'])}; decoded on {s['machine']}, {s['created']}{raised}): "
                   f"`{s['command']}`")
    return out


def markdown_report(doc):
    hw = doc["hardware"]
    device = machines_text(training_machines(doc), decoding_machines(doc))
    out = [f"# Translation benchmark{'' if doc['complete'] else ' (partial: still running)'}", "",
           f"- command: `{doc['command']}`",
           f"- data: {doc['data']['config']} ({doc['data']['sentences']['train']:,} training pairs, "
           f"test {doc['data']['sentences']['test']:,} sentences)",
           f"- budget per model: {doc['budget']}; {device}; torch {hw['torch']}, fairseq {hw['fairseq']}",
           "- BLEU/TER/chrF: sacrebleu on tokenised lowercased text (`-tok none -lc`), BPE removed; "
           "len ratio = hypothesis/reference length; valid nll in bits per target token (fairseq, base 2)",
           "- train tok/s: target tokens per second of optimisation steps; decode: fairseq-generate's timer, "
           f"beam {doc['settings']['beam']}", *decoded_apart(doc), *merged_from(doc), ""]
    for direction, rows in doc["results"].items():
        if not rows:
            continue
        out += [f"## {direction}", "", markdown_table(rows)]
        sig = rows[0]["signatures"]
        out += [f"sacrebleu: `{sig['bleu']}`, `{sig['ter']}`, `{sig['chrf']}`", ""]
        out += [f"### {direction}: training ({doc['budget']})", "",
                "Stopped at: the last update; why: `patience` (fairseq's --patience on the validation loss), "
                "`max_update` / `max_epoch` / `time budget` (the bound). Train wall: all training processes, "
                "start-up, validations and work redone after an interruption included; CPU: their process CPU "
                "seconds. Time to quality: training wall clock without the validations at the first validation "
                "that reaches the reference's best dev score (empty: never reached).", "",
                convergence_table(rows)]
        if any(r.get("length_choice") for r in rows):
            out += [f"### {direction}: length choice (lenpen / EOS penalty chosen on the even dev lines, kept only "
                    "if the odd lines confirm it: higher BLEU, TER not worse, than the stock search)", "",
                    length_choice_table(rows)]
    return "\n".join(out)


def plot(doc, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for direction, rows in doc["results"].items():
        if not rows:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for r in rows:
            ups = [p["updates"] for p in r["valid_curve"]]
            axes[0].plot(ups, [p["loss"] for p in r["valid_curve"]], marker="o", ms=3, label=r["label"])
            axes[1].plot(ups, [p["nll_loss"] for p in r["valid_curve"]], marker="o", ms=3, label=r["label"])
        axes[0].set_title("validation loss (training criterion)")
        axes[1].set_title("validation NLL (bits per target token)")
        for ax in axes:
            ax.set_xlabel("updates")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.suptitle(f"{direction}: validation curves")
        fig.tight_layout()
        _save(fig, os.path.join(out_dir, f"valid_loss.{direction}.png"))
        plt.close(fig)

        labels = [r["label"] for r in rows]
        fig, axes = plt.subplots(1, 3, figsize=(13, 4))
        for ax, key, title in zip(axes, ("train_tokens_per_second", "decode_sentences_per_second",
                                         "decode_tokens_per_second"),
                                  ("training target tokens/s", "decoding sentences/s", "decoding tokens/s")):
            vals = [r[key] or 0.0 for r in rows]
            bars = ax.bar(range(len(rows)), vals, color=[f"C{i}" for i in range(len(rows))])
            ax.bar_label(bars, fmt="%.1f")
            ax.margins(y=0.15)  # room for the labels
            ax.set_xticks(range(len(rows)), labels, rotation=15, ha="right")
            ax.set_title(title)
        fig.suptitle(f"{direction}: throughput ({doc['hardware']['device']})")
        fig.tight_layout()
        _save(fig, os.path.join(out_dir, f"throughput.{direction}.png"))
        plt.close(fig)


def _save(fig, path):
    with atomic_output(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
