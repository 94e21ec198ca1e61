"""benchmarks/blocked.py on tiny sizes: both versions timed, the kept bytes counted, the table and JSON written."""
import json

from benchmarks.blocked import _inputs, _kept_bytes, main
from hmm_nmt.hmm.blocked import reference_trilinear_log_softmax, trilinear_log_softmax


def test_the_blocked_layer_keeps_less_for_backward_than_the_unblocked_one():
    inputs = _inputs("first order", 4, 6, 8, 2)
    # unblocked: the (B, I x J', d) product and the energy besides the output; blocked: the output alone
    assert _kept_bytes(trilinear_log_softmax, inputs) == 4 * 6 * 6 * 6 * 4
    assert _kept_bytes(reference_trilinear_log_softmax, inputs) > 2 * 4 * 6 * 6 * 6 * 4


def test_the_benchmark_writes_a_row_per_layer_and_length(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert main(["--lengths", "4", "6", "--max-tokens", "24", "--dim", "8", "--heads", "2", "--repeats", "1",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [(r["layer"], r["batch"], r["length"]) for r in doc["rows"]] == [
        ("first order", 6, 4), ("first order", 4, 6), ("eq6", 6, 4), ("eq6", 4, 6)]
    assert all(r[k] > 0 for r in doc["rows"] for k in ("blocked_train_ms", "unblocked_train_ms"))
    assert "| first order | 4 x 6 |" in capsys.readouterr().out


def test_the_docs_table_is_built_from_the_results_file(tmp_path):
    """scripts/alignment_tables.py renders a blocked-products results file as benchmarks/blocked.py prints it."""
    import importlib.util
    import os

    out = tmp_path / "b.json"
    main(["--lengths", "4", "--max-tokens", "8", "--dim", "4", "--heads", "2", "--repeats", "1", "--out", str(out)])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("alignment_tables", os.path.join(root, "scripts", "alignment_tables.py"))
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    from benchmarks.blocked import table

    doc = json.loads(out.read_text())
    assert tables.table(doc) == table(doc) and "| eq6 | 2 x 4 |" in table(doc)
