"""``hmm-nmt-align-corpus``: word alignments of a parallel corpus in one command, with a reusable model.

    hmm-nmt-align-corpus -s corpus.en -t corpus.fr --model-dir model/ -o corpus.align [-f fwd.align -r rev.align]
    hmm-nmt-align-corpus -i corpus.en-fr --model-dir model/ -o corpus.align          # "src ||| tgt" lines
    hmm-nmt-align-corpus -s new.en -t new.fr --model-dir model/ --align-only -o new.align
    hmm-nmt-align-corpus -s more.en -t more.fr --model-dir model/ --continue --max-update 2000 -o more.align

Input: word-tokenised, line-parallel text. Output: word-level Pharaoh links (``i-j``, source word i, target word
j, 0-based), one line per input line, in input order; a line with an empty side gives an empty line. The
stages, each recorded in ``DIR/manifest.json`` so that rerunning the same command continues where it stopped:

1. ``codes``: joint subword-nmt BPE learned on both sides (``--vocab-size``, default 4,000 symbols, the characters
   included, so about as many types in any script; or ``--merges``);
2. ``bin/``: the segmented pairs binarized with one joined dictionary (``--valid-lines`` pairs held out for
   ``--patience``);
3. ``fwd/``, ``rev/``: the first-order direct HMM (the separable lexicon; ``--max-update`` updates, by default
   passes over the corpus's words within bounds (:mod:`.budget`), or ``--time-limit``; the learning rate decaying
   linearly to 0) trained in both directions side by side, the threads (or two GPUs) split between them
   (fairseq-train resumes from ``checkpoint_last.pt``); with ``--seeds N``, N models per direction (``fwd``,
   ``fwd.2``, ...; seeds ``--seed``, ``--seed`` + 1, ...);
4. ``bin/train.align.*``: the training pairs aligned by this first pass (both directions merged as in stage 6,
   the seeds' posteriors averaged), as piece links;
5. ``fwd.guided/``, ``rev.guided/``, ...: the second pass (``--guide-updates``, default a quarter of the first
   pass's): each model trains on from its first-pass checkpoint with ``--alignment-guide-weight``
   (``--guide-weight``, default 4) times -log p(links | E, F) added to its loss, i.e. toward the links both
   directions agreed on, which the two directions alone do not see (``--guide-updates 0``: one pass, stages 4-5
   skipped);
6. the alignment: the posteriors of both directions (each the mean over the seeds) merged (``--symmetrize mean
   --links threshold:0.5``, pooled to words: the setting chosen on the Hansards trial pairs), written atomically.

Stages 4 and 6 align on a CPU in ``--threads`` worker processes, each a share of the pairs (:mod:`.pool`).

``--align-only`` aligns with a finished model directory and trains nothing; ``--continue`` trains it further
(``--max-update`` more updates) on the given text, segmented with its codes and dictionary. Errors (bad UTF-8,
different line counts, a missing ``|||``, an output that is an input) name the file and line, exit 2, and
write nothing; Ctrl-C exits 130, leaving the model directory resumable and no partial output.
"""
from .cli import main
from .inputs import Corpus, read_corpus
from .model_dir import DEFAULT_LINKS, DEFAULT_POOL, DEFAULT_SYMMETRIZE, CorpusError, ModelDir

# one module a stage: model_dir (the manifest), inputs (the corpus, streamed), prepare (1-2), train (3, 5), links (4), align (6), with
# device (where, in which precision) and budget (the defaults that follow the corpus); cli: the options and the
# stages in order
__all__ = ["main", "Corpus", "read_corpus", "CorpusError", "ModelDir", "DEFAULT_LINKS", "DEFAULT_POOL", "DEFAULT_SYMMETRIZE"]
