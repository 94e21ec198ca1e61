"""hmm_nmt_align.base.atomic.atomic_output: the project's one atomic writer (hmm_nmt_align.io.atomic_write is built on it)."""
import os

import pytest

from hmm_nmt_align.base.atomic import atomic_output


def test_success_renames_with_usual_permissions(tmp_path):
    target = tmp_path / "out.npz"
    with atomic_output(str(target), suffix=".tmp.npz") as tmp:
        assert tmp.endswith(".tmp.npz") and os.path.dirname(tmp) == str(tmp_path) and os.path.exists(tmp)
        with open(tmp, "w") as f:
            f.write("x")
    assert target.read_text() == "x" and sorted(os.listdir(tmp_path)) == ["out.npz"]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("fixed", [False, True])
def test_failure_keeps_the_old_file_and_no_temporary(tmp_path, fixed):
    target = tmp_path / "ckpt.pt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(str(target), fixed=fixed) as tmp:
            assert (tmp == str(target) + ".tmp") == fixed
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["ckpt.pt"]
