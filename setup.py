"""hmm_nmt: hidden Markov models for neural machine translation, as a fairseq plugin."""
from setuptools import find_packages, setup

setup(
    name="hmm_nmt",
    version="0.1.0",
    description="Transformer-based direct HMM and other HMM sequence cores for fairseq",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    packages=find_packages(include=["hmm_nmt", "hmm_nmt.*", "alignment", "alignment.*", "wordalign", "wordalign.*",
                                    "benchmarks", "benchmarks.*"]),
    install_requires=[
        "torch>=2.0",
        # the fairseq 0.12.2 release does not import on Python 3.11; ve-fairseq ships the same package
        'fairseq>=0.12.2; python_version < "3.11"',
        've-fairseq>=0.12.3; python_version >= "3.11"',
        "sacrebleu>=2",
        "sentencepiece",
        "subword-nmt",
        "sacremoses",
        "numpy",
        "matplotlib",
        "seqeval",
        "tqdm",
    ],
    extras_require={
        # nltk: the 5-gram oracle of test_bench_lm; brown-clustering: the LM recipes run for real in the tests
        "test": ["pytest>=7", "torch-struct", "nltk>=3.8", "brown-clustering>=0.1.6"],
        "baselines": ["eflomal>=2.0", "systran-align>=3.5"],
        # examples/wsj_lm (Brown clusters) and scripts/bench_lm.py (Kneser-Ney 5-gram)
        "lm": ["brown-clustering>=0.1.6", "nltk>=3.8"],
    },
    entry_points={
        "console_scripts": [
            "hmm-nmt-aer=alignment.cli:aer_main",
            "hmm-nmt-symmetrize=alignment.cli:symmetrize_main",
            "hmm-nmt-align=alignment.extract:main",
            "hmm-nmt-heatmap=alignment.heatmap:main",
        ]
    },
)
