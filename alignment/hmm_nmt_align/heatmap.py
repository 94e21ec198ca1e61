"""PNG heat maps of alignment matrices (matplotlib, Agg backend).

* :func:`plot_matrix`: one sentence pair, a target-by-source matrix (alignment distribution
  p(j | e_<i, f), posterior p(b_i = j | E, F), averaged cross-attention, or a 0/1 link matrix) with
  the target tokens down the rows and the source tokens along the columns, darker = larger, as in
  the paper's Appendix C.  Optional ``links`` are outlined (e.g. gold or argmax links).
* :func:`plot_transition`: the first-order matrix p(j | j') at one target position i, predecessor
  source position j' on the rows and current position j on the columns (the paper's Figure 2).

``hmm-nmt-heatmap --npz FILE --out-dir DIR`` reads an ``.npz`` archive with the keys

``src_tokens``  1-D array of str, length J (source tokens, the columns)
``tgt_tokens``  1-D array of str, length I (target tokens, the rows)
``alignment``   (I, J) alignment distribution                      -> DIR/alignment.png
``posterior``   (I, J) alignment posterior                         -> DIR/posterior.png
``attention``   (I, J) cross-attention (already averaged over heads) -> DIR/attention.png
``transition``  (J, J) p(j | j') at one target position, or (I, J, J) for every position
                (then ``--position`` picks i, default 0)            -> DIR/transition_i<i>.png

At least one matrix key must be present.

``hmm-nmt-heatmap --path CKPT --data DATA-BIN [--subset test] --index K --out-dir DIR [--position I]``
computes the same matrices for sentence K of a binarized subset with a checkpoint (reference target, as
``hmm-nmt-align`` does; tokens are the dictionary's pieces with EOS): ``alignment`` and ``posterior`` for a
``transformer_dhmm`` (and ``transition`` for a first-order one), ``attention`` for a plain ``transformer``
(``--layers``, default the last two decoder layers). Only this mode imports fairseq.  Shapes are checked against the token lists; a bad file
gives a one-line error and exit status 2, and no PNG is written for it.
"""
import argparse
import os
import sys
import zipfile
from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

from hmm_nmt_align.base.atomic import atomic_output
from hmm_nmt_align.base.console import clobbered_input, interruptible

MATRIX_KEYS = ("alignment", "posterior", "attention")
TITLES = {"alignment": "alignment probability p(j | e_<i, f)", "posterior": "posterior p(b_i = j | E, F)",
          "attention": "cross-attention (mean over heads)"}

__all__ = ["plot_matrix", "plot_transition", "load_npz", "render", "main", "MATRIX_KEYS"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # no display; must precede the pyplot import
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> None:
    """Render to a temporary file and rename, so a failure leaves no partial PNG."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=fig.dpi, bbox_inches="tight")


def _figure(n_rows: int, n_cols: int):
    plt = _pyplot()
    # about 0.35 inch per token, within sane bounds
    w = min(max(3.0, 0.35 * n_cols + 2.0), 40.0)
    h = min(max(3.0, 0.35 * n_rows + 1.5), 40.0)
    return plt, plt.figure(figsize=(w, h), dpi=100)


def _check(matrix: np.ndarray, rows: Sequence[str], cols: Sequence[str], what: str) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=float)
    if matrix.ndim != 2 or matrix.shape != (len(rows), len(cols)):
        raise ValueError(f"{what}: matrix shape {tuple(matrix.shape)} does not match "
                         f"{len(rows)} row tokens x {len(cols)} column tokens")
    if not np.all(np.isfinite(matrix)):
        raise ValueError(f"{what}: matrix has non-finite values")
    return matrix


def plot_matrix(matrix, src_tokens: Sequence[str], tgt_tokens: Sequence[str], title: str, path: str,
                links: Optional[Iterable[Tuple[int, int]]] = None, cmap: str = "Greys",
                vmin: Optional[float] = 0.0, vmax: Optional[float] = None) -> str:
    """Heat map of a (len(tgt_tokens), len(src_tokens)) matrix; ``links`` are (src j, tgt i) pairs."""
    m = _check(matrix, tgt_tokens, src_tokens, title)
    return _heatmap(m, src_tokens, tgt_tokens, "source", "target", title, path, links, cmap, vmin, vmax)


def _heatmap(m, x_tokens, y_tokens, x_label, y_label, title, path, links=None, cmap="Greys", vmin=0.0, vmax=None):
    """One labelled heat map, source tokens along the top; ``links`` (x, y) are outlined in red."""
    plt, fig = _figure(len(y_tokens), len(x_tokens))
    try:
        ax = fig.add_subplot(1, 1, 1)
        im = ax.imshow(m, cmap=cmap, vmin=vmin, vmax=vmax if vmax is not None else max(float(m.max()), 1e-12),
                       aspect="equal", interpolation="nearest")
        ax.set_xticks(range(len(x_tokens)))
        ax.set_xticklabels(x_tokens, rotation=90)
        ax.set_yticks(range(len(y_tokens)))
        ax.set_yticklabels(y_tokens)
        ax.xaxis.tick_top()
        ax.xaxis.set_label_position("top")
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        for j, i in links or ():
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        ax.set_title(title, pad=12)
        _save(fig, path)
    finally:
        plt.close(fig)
    return path


def plot_transition(matrix, src_tokens: Sequence[str], position: int, path: str, title: Optional[str] = None,
                    tgt_token: Optional[str] = None, cmap: str = "Greys") -> str:
    """Heat map of p(j | j') (rows j' = predecessor position, columns j) at target position ``position``."""
    m = _check(matrix, src_tokens, src_tokens, "transition")
    if title is None:
        title = f"p(j | j') at target position i={position}" + (f" ({tgt_token})" if tgt_token else "")
    return _heatmap(m, src_tokens, src_tokens, "current source position j", "previous source position j'", title,
                    path, cmap=cmap)


def load_npz(path: str) -> dict:
    """The arrays of an ``.npz`` file as a dict (tokens as lists of str)."""
    with np.load(path, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    for k in ("src_tokens", "tgt_tokens"):
        if k not in data:
            raise ValueError(f"missing key {k!r}")
        if data[k].ndim != 1:
            raise ValueError(f"{k!r} must be a 1-D array of strings")
        data[k] = [str(t) for t in data[k].tolist()]
    if not any(k in data for k in MATRIX_KEYS + ("transition",)):
        raise ValueError(f"no matrix: expected at least one of {', '.join(MATRIX_KEYS + ('transition',))}")
    return data


def render(data: dict, out_dir: str, position: int = 0, prefix: str = "") -> List[str]:
    """Write every heat map ``data`` (as from :func:`load_npz`) allows; returns the PNG paths.

    All shapes are checked before the first PNG is written.
    """
    src, tgt = data["src_tokens"], data["tgt_tokens"]
    jobs = []
    for key in MATRIX_KEYS:
        if key in data:
            m = _check(data[key], tgt, src, key)
            jobs.append((plot_matrix, (m, src, tgt, TITLES[key], os.path.join(out_dir, f"{prefix}{key}.png"))))
    if "transition" in data:
        t = np.asarray(data["transition"], dtype=float)
        if t.ndim == 3:
            if t.shape[0] != len(tgt):
                raise ValueError(f"transition: {t.shape[0]} target positions but {len(tgt)} target tokens")
            if not 0 <= position < t.shape[0]:
                raise ValueError(f"--position {position} out of range 0..{t.shape[0] - 1}")
            t = t[position]
        _check(t, src, src, "transition")
        tok = tgt[position] if 0 <= position < len(tgt) else None
        jobs.append((plot_transition, (t, src, position, os.path.join(out_dir, f"{prefix}transition_i{position}.png"),
                                       None, tok)))
    return [fn(*a) for fn, a in jobs]


def matrices_from_checkpoint(path: str, data: str, subset: str, index: int, layers: Optional[str] = None,
                             cpu: bool = False) -> dict:
    """The :func:`render` dict for sentence ``index`` of ``subset``, computed by a checkpoint.

    transformer_dhmm: ``alignment`` and ``posterior`` (and ``transition`` (I, J, J) for a first-order model);
    plain transformer: ``attention`` averaged over ``layers`` (1-based, comma-separated; default the last
    two). Tokens are the dictionary pieces, EOS included (row and column). Imports fairseq.
    """
    from . import extract

    model, task = extract.load_model(path, data, cpu)
    methods = extract.available_methods(model)
    if not methods:
        raise extract.ExtractionError(extract.unavailable("alignment", extract.model_type(model), methods))
    if layers is not None and "attention" not in methods:
        raise extract.ExtractionError("--layers applies to a plain transformer's attention only")
    lay = extract.parse_layers(layers, model) if "attention" in methods else None
    first_order = extract.model_type(model) == "dhmm1"
    (item,) = list(extract.extract_matrices(model, task, subset, [index], methods, lay, first_order, batch_size=1))
    data = {"src_tokens": item.src_tokens, "tgt_tokens": item.tgt_tokens, **item.matrices}
    if item.transition is not None:
        data["transition"] = item.transition
    return data


def _save_npz(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_output(path, suffix=".tmp.npz") as tmp:  # np.savez appends .npz to any other name
        np.savez(tmp, **{k: np.asarray(v) for k, v in data.items()})


def _clobbered(args) -> Optional[str]:
    """The error for an output (a PNG this run may write, --save-npz) that is one of the inputs, else None."""
    inputs = [("--npz", args.npz), ("--path", args.path)]
    if args.data and os.path.isdir(args.data):
        inputs += [("--data's", os.path.join(args.data, n)) for n in sorted(os.listdir(args.data))]
    outs = [os.path.join(args.out_dir, f"{args.prefix}{k}.png") for k in MATRIX_KEYS]
    outs += [os.path.join(args.out_dir, f"{args.prefix}transition_i{args.position}.png")]
    outs += [args.save_npz] if args.save_npz else []
    for out in outs:
        hit = clobbered_input(out, inputs)
        if hit:
            return f"{out} (under --out-dir or --save-npz) is the same file as {hit[0]} {hit[1]}: refusing to " \
                   "overwrite an input"
    return None


@interruptible("hmm-nmt-heatmap")
def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="hmm-nmt-heatmap", description=__doc__.split("\n\n")[0],
                                epilog="npz keys: src_tokens, tgt_tokens, and any of alignment, posterior, "
                                       "attention ((I, J) each), transition ((J, J) or (I, J, J)). "
                                       "--path mode: transformer_dhmm gives alignment and posterior (and "
                                       "transition for first order), a plain transformer gives attention.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--npz", metavar="FILE", help="matrices and tokens (see module docstring)")
    src.add_argument("--path", metavar="CKPT", help="compute the matrices of one sentence pair with this checkpoint")
    p.add_argument("--out-dir", required=True, metavar="DIR")
    p.add_argument("--position", type=int, default=0, help="target position i (0-based) of the transition matrix")
    p.add_argument("--prefix", default="", help="prefix for the PNG file names")
    g = p.add_argument_group("checkpoint mode (--path)")
    g.add_argument("--data", metavar="DATA-BIN", help="fairseq-preprocess output directory")
    g.add_argument("--subset", default="test", help="subset (default: test)")
    g.add_argument("--index", type=int, metavar="K", help="sentence K of the subset (0-based line number)")
    g.add_argument("--layers", metavar="L1,L2", help="plain transformer: 1-based decoder layers to average "
                                                    "(default: the last two)")
    g.add_argument("--save-npz", metavar="FILE", help="also write the matrices as an .npz for --npz mode")
    g.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is available")
    args = p.parse_args(argv)
    clobber = _clobbered(args)
    if clobber:
        sys.stderr.write(f"{p.prog}: error: {clobber}\n")
        return 2
    if args.path is None:
        for flag in ("data", "index", "layers", "save_npz"):
            if getattr(args, flag) is not None:
                p.error(f"--{flag.replace('_', '-')} needs --path")
        try:
            data = load_npz(args.npz)
            paths = render(data, args.out_dir, args.position, args.prefix)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
            sys.stderr.write(f"{p.prog}: error: {args.npz}: {e}\n")
            return 2
    else:
        if args.data is None or args.index is None:
            p.error("--path needs --data and --index")
        from .extract import ExtractionError, setup_logging

        setup_logging()
        try:
            data = matrices_from_checkpoint(args.path, args.data, args.subset, args.index, args.layers, args.cpu)
            if "transition" in data and not 0 <= args.position < len(data["tgt_tokens"]):
                raise ValueError(f"--position {args.position} out of range: sentence {args.index} has "
                                 f"{len(data['tgt_tokens'])} target tokens with EOS (0-based)")
            paths = render(data, args.out_dir, args.position, args.prefix)
            if args.save_npz:
                _save_npz(args.save_npz, data)
        except (ExtractionError, OSError, ValueError) as e:
            sys.stderr.write(f"{p.prog}: error: {e}\n")
            return 2
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
