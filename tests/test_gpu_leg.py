"""docs/multi30k/cpu-conv/gpu-leg.sh: the jobs a device call returns (64 MiB a call) are packed whole, the rest
named with the call that fetches them, and `merge` puts each call's jobs back byte for byte, keeping the state
they replace and appending the device logs."""
import os
import shutil
import subprocess

from conftest import ROOT

SCRIPT = os.path.join(ROOT, "docs", "multi30k", "cpu-conv", "gpu-leg.sh")


def _job(root, slot, seed, size):
    ck = root / "runs" / "m30k-cpuconv" / f"seed-{seed}" / "de-en" / slot / "checkpoints"
    ck.mkdir(parents=True)
    (ck / "checkpoint_last.pt").write_bytes(os.urandom(size))
    (ck.parent / "train.log").write_text(f"{slot} {seed} device\n")
    (root / "runs" / "m30k-cpuconv" / f"{slot}.s{seed}.gpu.log").write_text(f"{slot} leg 2\n")


def _gpu_leg(root, *args, **env):
    return subprocess.run(["bash", "docs/multi30k/cpu-conv/gpu-leg.sh", *args], cwd=root, text=True,
                          capture_output=True, env={**os.environ, **env}, check=True).stdout


def test_pack_returns_what_fits_and_merge_restores_every_job(tmp_path):
    (tmp_path / "docs" / "multi30k" / "cpu-conv").mkdir(parents=True)
    shutil.copy(SCRIPT, tmp_path / "docs" / "multi30k" / "cpu-conv")
    _job(tmp_path, "dhmm1_fast", 1, 40_000)
    _job(tmp_path, "hnmc", 2, 40_000)
    _job(tmp_path, "iohmm", 1, 40_000)
    # a cap that holds two jobs (each counted with 1 MB of headroom, du -sb counts folders too) but not three
    cap = str(2 * 1_000_000 + 2 * 60_000)
    out1 = _gpu_leg(tmp_path, "pack", "dhmm1_fast:1 hnmc:2 iohmm:1", OUT=str(tmp_path / "o1"), GPULEG_CAP=cap)
    assert "packed: dhmm1_fast:1 hnmc:2" in out1
    assert 'gpu-leg.sh pack "iohmm:1"' in out1
    out2 = _gpu_leg(tmp_path, "pack", "iohmm:1", OUT=str(tmp_path / "o2"), GPULEG_CAP=cap)
    assert "packed: iohmm:1" in out2 and "NOT PACKED" not in out2

    device = tmp_path / "runs" / "device"
    (tmp_path / "runs" / "m30k-cpuconv").rename(device)
    # the CPU side: an older state of one job and an earlier leg's log
    here = tmp_path / "runs" / "m30k-cpuconv" / "seed-1" / "de-en" / "dhmm1_fast"
    here.mkdir(parents=True)
    (here / "train.log").write_text("cpu state\n")
    (tmp_path / "runs" / "m30k-cpuconv" / "dhmm1_fast.s1.gpu.log").write_text("dhmm1_fast leg 1\n")
    _gpu_leg(tmp_path, "merge", str(tmp_path / "o1"))
    _gpu_leg(tmp_path, "merge", str(tmp_path / "o2"))

    for rel in ("seed-1/de-en/dhmm1_fast", "seed-2/de-en/hnmc", "seed-1/de-en/iohmm"):
        for f in ("checkpoints/checkpoint_last.pt", "train.log"):
            a = tmp_path / "runs" / "m30k-cpuconv" / rel / f
            assert a.read_bytes() == (device / rel / f).read_bytes(), (rel, f)
    log = (tmp_path / "runs" / "m30k-cpuconv" / "dhmm1_fast.s1.gpu.log").read_text()
    assert log == "dhmm1_fast leg 1\ndhmm1_fast leg 2\n"
    kept = list((tmp_path / "runs" / "gpuleg-before").glob("*/m30k-cpuconv/seed-1/de-en/dhmm1_fast/train.log"))
    assert len(kept) == 1 and kept[0].read_text() == "cpu state\n"
