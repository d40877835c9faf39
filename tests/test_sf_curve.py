"""scripts/sf_curve.py: a Sample Factory run's curve from its TensorBoard scalars or console."""

import csv
import importlib.util
import sys
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.fixture(scope="module")
def sf_curve():
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("sf_curve", SCRIPTS / "sf_curve.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


# Sample Factory's console, colour codes and all: the reward lines follow the frame counts.
CONSOLE = """\
\x1b[36m[2026-11-27 10:34:16,794][19032] Fps is (10 sec: 204.8). Total num frames: 10240.\x1b[0m
\x1b[36m[2026-11-27 10:34:16,795][19032] Avg episode reward: [(0, '-20.500')]\x1b[0m
\x1b[36m[2026-11-27 10:34:21,795][19032] Avg episode reward: [(0, '-20.500')]\x1b[0m
[2026-11-27 10:34:26,794][19032] Fps is (10 sec: 102.4). Total num frames: 250000.
[2026-11-27 10:34:26,795][19032] Avg episode reward: [(0, '-9.250')]
[2026-11-27 10:34:31,794][19032] Fps is (10 sec: 102.4). Total num frames: 500000.
[2026-11-27 10:34:31,795][19032] Saving new best policy, reward=18.500!
[2026-11-27 10:34:31,796][19032] Avg episode reward: [(0, '18.500')]
"""


def test_the_console_curve_pairs_each_mean_with_the_frame_count_before_it(sf_curve) -> None:
    points = sf_curve.curve_from_log(CONSOLE)
    assert points == [(10240, -20.5), (250000, -9.25), (500000, 18.5)]
    text = sf_curve.report(points, 4, [0.4e6, 1.0e6, 2.0e6, 3.0e6])
    # Marks past the last point are left out rather than carried forward.
    assert text.splitlines()[0] == "0.4 M: -20.5 | 1.0 M: -9.2 | 2.0 M: +18.5"
    assert "first >= 0: 2.00 M frames" in text and "first >= 18: 2.00 M frames" in text


def test_the_tensorboard_curve_is_written_as_a_csv_in_frames(sf_curve, tmp_path, capsys) -> None:
    experiment = tmp_path / "sf"
    with SummaryWriter(str(experiment / ".summary" / "0")) as writer:
        for steps, value in [(100_000, -19.0), (300_000, 4.0), (450_000, 18.2)]:
            writer.add_scalar(sf_curve.RETURN_TAG, value, steps)
            writer.add_scalar("train/entropy", 1.5, steps)
    out = tmp_path / "curve.csv"
    assert sf_curve.main([str(experiment), "--csv", str(out)]) == 0
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert [(r["env_steps"], r["frames"]) for r in rows] == [
        ("100000", "400000"),
        ("300000", "1200000"),
        ("450000", "1800000"),
    ]
    assert [float(r["return_mean"]) for r in rows] == pytest.approx([-19.0, 4.0, 18.2])
    assert "first >= 18: 1.80 M frames" in capsys.readouterr().out


def test_a_directory_without_summaries_is_refused_by_name(sf_curve, tmp_path) -> None:
    with pytest.raises(SystemExit, match="no Sample Factory summaries"):
        sf_curve.curve(tmp_path)


def test_a_scalar_is_printed_as_its_mean_between_marks(sf_curve, tmp_path, capsys) -> None:
    experiment = tmp_path / "sf"
    with SummaryWriter(str(experiment / ".summary" / "0")) as writer:
        for steps, entropy in [(20_000, 1.7), (40_000, 1.5), (90_000, 1.2), (140_000, 1.0)]:
            writer.add_scalar(sf_curve.RETURN_TAG, -20.0, steps)
            writer.add_scalar("train/entropy", entropy, steps)
    # Frames (x4): 80 k, 160 k | 360 k | 560 k; the window (0.4 M, 0.5 M] has none.
    argv = [str(experiment), "--marks", "2e5", "4e5", "5e5", "6e5", "--scalar", "train/entropy"]
    assert sf_curve.main(argv) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == "train/entropy: 0.2 M: 1.6 | 0.4 M: 1.2 | 0.5 M: - | 0.6 M: 1"
    with pytest.raises(SystemExit, match="no scalar 'train/kl'.*train/entropy"):
        sf_curve.main([str(experiment), "--scalar", "train/kl"])


def test_a_score_reached_at_the_first_frame_is_reached(sf_curve) -> None:
    # `if first` read 0 frames as "not reached".
    text = sf_curve.report([(0, 1.0), (1000, -3.0)], 4, [0.4e6])
    assert "first >= 0: 0.00 M frames" in text.splitlines()


def test_a_log_it_cannot_read_or_without_a_curve_and_a_csv_folder_missing_are_refused(
    sf_curve, tmp_path, capsys
) -> None:
    # A missing --log or --csv folder ended in a FileNotFoundError traceback (the csv after the
    # curve was read); a log without reward lines printed "not reached" for every score, exit 0.
    log = tmp_path / "sf.log"
    log.write_text(CONSOLE)
    (tmp_path / "other.log").write_text("nothing of Sample Factory's\n")
    for argv, says in (
        (["x", "--log", str(tmp_path / "none.log")], "none.log: No such file or directory"),
        (["x", "--log", str(tmp_path / "other.log")], "no 'Avg episode reward'"),
        (["x", "--log", str(log), "--csv", str(tmp_path / "no" / "c.csv")], "no folder"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            sf_curve.main(argv)
        assert exit_info.value.code == 2 and says in capsys.readouterr().err
