"""seedq-plot: finds runs, groups seeds of one config, draws a PNG."""

import csv

import numpy as np
import pytest

from seedq.plot import band, find_runs, group_key, main, read_curve


def fake_run(path, overrides, returns, *, eval_returns=None):
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    columns = ["wall_time", "env_steps", "return_mean", "steps_per_s"]
    if eval_returns is not None:
        columns.append("eval/return_mean")
    with open(path / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for i, r in enumerate(returns):
            row = [60.0 * (i + 1), 1000 * (i + 1), r, 1000 / 60]
            if eval_returns is not None:
                row.append(eval_returns[i])
            writer.writerow(row)
    return path


def test_seeds_of_one_config_share_a_group_and_other_overrides_do_not(tmp_path):
    a = fake_run(tmp_path / "m" / "0", ["seed=0", "algorithm.lr=1e-3"], [1, 2])
    b = fake_run(tmp_path / "m" / "1", ["seed=1", "algorithm.lr=1e-3"], [1, 3])
    c = fake_run(tmp_path / "m" / "2", ["seed=0", "algorithm.lr=3e-4"], [1, 1])
    assert find_runs([tmp_path / "m"]) == [a, b, c]
    assert group_key(a) == group_key(b) == "algorithm.lr=1e-3" != group_key(c)


def test_a_run_named_twice_is_one_run(tmp_path):
    # `seedq-plot a a` (or a folder and a run in it) averaged the run with itself as "2 runs".
    a = fake_run(tmp_path / "m" / "0", ["seed=0"], [1, 2])
    b = fake_run(tmp_path / "m" / "1", ["seed=1"], [1, 3])
    assert find_runs([a, a]) == [a]
    assert find_runs([tmp_path / "m", b, tmp_path / "m" / ".." / "m" / "0"]) == [a, b]


def test_r2d2_runs_are_drawn_with_their_eval_return(tmp_path):
    run = fake_run(tmp_path / "r", ["algorithm=r2d2"], [5, 6], eval_returns=[50, 60])
    assert read_curve(run).returns.tolist() == [50.0, 60.0]


def test_band_is_mean_min_max_over_the_common_range(tmp_path):
    runs = [
        read_curve(fake_run(tmp_path / str(i), [f"seed={i}"], r))
        for i, r in enumerate([[0, 10, 20], [0, 20]])
    ]
    grid, mean, low, high = band(runs, "env_steps", points=3)
    np.testing.assert_allclose(grid, [1000, 1500, 2000])  # the shorter run ends at 2000
    np.testing.assert_allclose((mean[-1], low[-1], high[-1]), (15, 10, 20))


def test_cli_writes_a_png_and_refuses_a_folder_without_runs(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    fake_run(tmp_path / "runs" / "a", ["seed=0"], [1, 5, 9])
    fake_run(tmp_path / "runs" / "b", ["seed=1"], [2, 4, 8])
    out = tmp_path / "curve.png"
    assert main([str(tmp_path / "runs"), "-o", str(out)]) == 0
    png = out.read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (png[:8], width, height) == (b"\x89PNG\r\n\x1a\n", 1100, 400)  # 11 x 4 in at 100 dpi
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "no metrics.csv" in capsys.readouterr().err
    # An output without a suffix is written as .png, a folder gets returns.png: the line says
    # which file (it named the path given, which matplotlib had not written).
    assert main([str(tmp_path / "runs"), "-o", str(tmp_path / "plain")]) == 0
    assert f"wrote {tmp_path / 'plain.png'} " in capsys.readouterr().out
    assert main([str(tmp_path / "runs"), "-o", str(tmp_path / "empty")]) == 0
    assert (tmp_path / "empty" / "returns.png").is_file()


def test_rows_that_are_not_numbers_are_left_out_and_counted(tmp_path, capsys):
    run = fake_run(tmp_path / "r", ["seed=0"], [1, "abc", 3])
    with open(run / "metrics.csv", "a") as f:
        f.write("240.0,40")  # a last row torn by a killed writer
    curve = read_curve(run)
    assert (curve.env_steps.tolist(), curve.returns.tolist()) == ([1000, 3000], [1.0, 3.0])
    assert "2 rows left out (1 not numbers, 1 cut short)" in capsys.readouterr().err


def test_cli_refuses_a_file_that_is_not_a_metrics_file_or_has_no_returns_yet(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "metrics.csv").write_bytes(b"garbage,,\n\x00\x01binary\n")
    assert main([str(tmp_path / "garbage"), "-o", str(tmp_path / "g.png")]) == 2
    assert "has no wall_time, env_steps, return_mean column" in capsys.readouterr().err
    early = fake_run(tmp_path / "early", ["seed=0"], [""])  # no episode has ended yet
    assert main([str(early), "-o", str(tmp_path / "e.png")]) == 2
    assert "no returns to plot yet in early" in capsys.readouterr().err
    fake_run(tmp_path / "late", ["seed=1"], [1, 2])
    assert main([str(early), str(tmp_path / "late"), "-o", str(tmp_path / "l.png")]) == 0
    assert "no returns yet in early; left out" in capsys.readouterr().err


def test_band_covers_only_the_range_common_to_all(tmp_path):
    # A sweep's seed whose rows start after another's end: a mean there was drawn from the
    # first value held flat back to 0 (np.interp), from no data.
    late = read_curve(fake_run(tmp_path / "late", ["seed=0"], [1, 2, 3, 4, 5]))
    late.env_steps = late.env_steps + 3000  # rows at 4000-8000
    early = read_curve(fake_run(tmp_path / "early", ["seed=1"], [7, 8, 9]))  # 1000-3000
    assert band([late, early], "env_steps") is None
    mid = read_curve(fake_run(tmp_path / "mid", ["seed=2"], [1, 2, 3, 4, 5, 6]))  # 1000-6000
    grid, *_ = band([late, mid], "env_steps", points=3)
    np.testing.assert_allclose(grid, [4000, 5000, 6000])


def test_cli_names_an_output_it_cannot_write(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    fake_run(tmp_path / "runs" / "a", ["seed=0"], [1, 5, 9])
    for out in (tmp_path / "nope" / "x.png", tmp_path / "x.xyz"):
        assert main([str(tmp_path / "runs"), "-o", str(out)]) == 2
        assert f"seedq-plot: cannot write {out}" in capsys.readouterr().err


def test_cli_refuses_a_metrics_file_holding_the_rows_of_two_runs(tmp_path, capsys):
    run = fake_run(tmp_path / "r", ["seed=0"], [1, 2, 3])
    rows = (run / "metrics.csv").read_text().splitlines(keepends=True)
    with open(run / "metrics.csv", "a") as f:
        f.writelines(rows)  # a second run's file appended, header and all
    assert main([str(run), "-o", str(tmp_path / "r.png")]) == 2
    assert "env_steps goes back from 3000 to 1000" in capsys.readouterr().err
    assert not (tmp_path / "r.png").exists()


def test_a_seed_stopped_early_is_named_where_it_cuts_its_groups_mean(tmp_path, capsys):
    # A sweep's seed killed at 2,000 steps ended its group's mean curve there, the other seeds'
    # 8,000 steps undrawn without a word.
    pytest.importorskip("matplotlib")
    for seed, returns in enumerate([[1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 9], [1, 2]]):
        fake_run(tmp_path / "sweep" / str(seed), [f"seed={seed}", "algorithm=ppo"], returns)
    assert main([str(tmp_path / "sweep"), "-o", str(tmp_path / "s.png")]) == 0
    assert (
        f"seedq-plot: algorithm=ppo: its mean is drawn to 2,000 env steps, where "
        f"{tmp_path / 'sweep' / '2'} ends; the others go on to 8,000"
    ) in capsys.readouterr().err


def test_a_sweeps_job_without_metrics_is_named_as_left_out(tmp_path, capsys):
    # A refused or failed job was left out without a word: its group one seed fewer.
    fake_run(tmp_path / "sweep" / "0", ["seed=0"], [1, 2])
    (tmp_path / "sweep" / "1" / ".hydra").mkdir(parents=True)
    assert find_runs([tmp_path / "sweep"]) == [tmp_path / "sweep" / "0"]
    assert capsys.readouterr().err == (
        f"seedq-plot: {tmp_path / 'sweep' / '1'}: no metrics.csv (see its cli.log); left out\n"
    )


def test_a_run_of_one_env_step_is_drawn_as_a_point(tmp_path):
    # A short run's only row (or two rows at its last env step) was a line of no length:
    # both panels were drawn empty.
    iio = pytest.importorskip("imageio.v3")
    pytest.importorskip("matplotlib")
    run = fake_run(tmp_path / "r", ["seed=0"], [-173.8])
    assert main([str(run), "-o", str(tmp_path / "out.png")]) == 0
    image = iio.imread(tmp_path / "out.png")[..., :3].astype(int)
    top = image[: image.shape[0] // 2]  # the panels, above the legend
    blue = np.abs(top - [31, 119, 180]).sum(axis=-1) < 60  # tab10's first colour
    left, right = np.array_split(blue, 2, axis=1)
    assert (left.sum() > 20, right.sum() > 20) == (True, True)


def test_a_last_row_cut_short_is_left_out_and_counted(tmp_path, capsys):
    # A writer killed (or still writing) part way through a row leaves it without its newline:
    # "180.0,3" of "180.0,3000,9" read as a return at 3 env steps, which goes back, and the
    # run was refused as "the rows of more than one run".
    run = fake_run(tmp_path / "r", ["seed=0"], [1, 5])
    with open(run / "metrics.csv", "a") as f:
        f.write("180.0,3000,9")
    assert read_curve(run).returns.tolist() == [1.0, 5.0]
    assert "1 rows left out (cut short)" in capsys.readouterr().err


def test_a_seed_that_ends_before_the_others_begin_is_not_said_to_cut_a_mean(tmp_path, capsys):
    # No range is common to all, so each seed is drawn whole; the note said "its mean is
    # drawn to 1,000 env steps", a mean the figure does not have.
    fake_run(tmp_path / "sweep" / "0", ["seed=0"], [1])
    late = fake_run(tmp_path / "sweep" / "1", ["seed=1"], ["", "", 3, 4])  # from 3,000 steps
    assert [c.env_steps[0] for c in map(read_curve, [late])] == [3000]
    assert main([str(tmp_path / "sweep"), "-o", str(tmp_path / "s.png")]) == 0
    err = capsys.readouterr().err
    assert "its mean is drawn" not in err
    assert "no env steps common to all its runs" in err
