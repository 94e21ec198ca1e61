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


def test_a_symbolic_link_is_written_through(tmp_path):
    """Like a shell's ``> link``: the link stays, its target (in another folder) gets the new content, renamed
    into place in the target's folder; no temporary file left in either folder."""
    (tmp_path / "data").mkdir()
    (tmp_path / "out").mkdir()
    target = tmp_path / "data" / "result.txt"
    target.write_text("old")
    link = tmp_path / "out" / "result.txt"
    os.symlink(os.path.join("..", "data", "result.txt"), link)  # a relative link
    with atomic_output(str(link)) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path / "data")
        with open(tmp, "w") as f:
            f.write("new")
    assert os.path.islink(link) and os.readlink(link) == os.path.join("..", "data", "result.txt")
    assert target.read_text() == "new" and link.read_text() == "new"
    assert sorted(os.listdir(tmp_path / "data")) == ["result.txt"] and sorted(os.listdir(tmp_path / "out")) == [
        "result.txt"]


@pytest.mark.parametrize("fixed", [False, True])
def test_a_dangling_link_creates_its_target_and_a_chain_is_followed(tmp_path, fixed):
    final = tmp_path / "final.txt"
    os.symlink(final, tmp_path / "middle")
    os.symlink(tmp_path / "middle", tmp_path / "first")
    with atomic_output(str(tmp_path / "first"), fixed=fixed) as tmp:
        assert tmp.startswith(str(tmp_path / ("final.txt" if fixed else ".final.txt.")))
        with open(tmp, "w") as f:
            f.write("x")
    assert final.read_text() == "x" and os.path.islink(tmp_path / "first") and os.path.islink(tmp_path / "middle")
    assert sorted(os.listdir(tmp_path)) == ["final.txt", "first", "middle"]


def test_a_failure_through_a_link_keeps_the_target_and_the_link(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text("old")
    os.symlink(target, tmp_path / "link")
    with pytest.raises(RuntimeError):
        with atomic_output(str(tmp_path / "link")) as tmp:
            with open(tmp, "w") as f:
                f.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old" and os.path.islink(tmp_path / "link")
    assert sorted(os.listdir(tmp_path)) == ["link", "t.txt"]
