"""scripts/bench_vs_sample_factory.py: reading both systems' logs and writing RESULTS.md.

Pure parsing and Markdown: nothing here installs or runs Sample Factory.
"""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bench_vs_sample_factory.py"
_spec = importlib.util.spec_from_file_location("bench_vs_sample_factory", SCRIPT)
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_vs_sample_factory"] = bench  # dataclasses look their module up here
_spec.loader.exec_module(bench)

Point = bench.Point


def summary(**overrides):
    values = dict(
        env_steps=3_000_000,
        wall_s=120.0,
        steps_per_s_training=30_000.0,
        time_to_threshold_s=45.0,
        steps_to_threshold=1_100_000,
        final_return=500.0,
        stop_reason="env-step budget",
    )
    return bench.Summary(**{**values, **overrides})


def launch(returncode=0, stopped_at_cap=False):
    return bench.Launch(returncode, 100.0, 220.0, stopped_at_cap, others_cpu=0.0)


def test_a_new_results_file_gets_a_header_and_the_section_between_markers():
    text = bench.replace_section("", "cartpole", "## CartPole\n\nrows")

    begin, end = bench.section_markers("cartpole")
    assert text.startswith("# Benchmarks") and f"{begin}\n## CartPole\n\nrows\n{end}\n" in text


def test_running_again_replaces_only_that_envs_section():
    text = bench.replace_section("", "cartpole", "old cartpole")
    text = bench.replace_section(text, "pong", "pong rows")
    text = text.replace("pong rows", "pong rows\n") + "\nA note someone added.\n"

    text = bench.replace_section(text, "cartpole", "new cartpole")

    assert "old cartpole" not in text
    assert text.count("new cartpole") == 1 and text.count("pong rows") == 1
    assert text.endswith("A note someone added.\n")


def test_a_section_is_appended_after_existing_content():
    text = bench.replace_section("# Benchmarks\n\nOther results.\n", "pong", "pong rows")

    assert text.index("Other results.") < text.index(bench.section_markers("pong")[0])


def test_a_begin_marker_without_its_end_is_refused():
    begin, _ = bench.section_markers("pong")

    with pytest.raises(SystemExit, match="no matching"):
        bench.replace_section(f"# Benchmarks\n{begin}\nhalf a section\n", "pong", "rows")


def test_time_to_threshold_is_the_first_point_at_or_above_it():
    returns = [Point(30.0, 1000, 470.0), Point(10.0, 400, 200.0), Point(40.0, 1300, 475.0)]

    assert bench.first_reaching(returns, 475.0) == Point(40.0, 1300, 475.0)
    assert bench.first_reaching(returns, 500.0) is None


def test_training_rate_leaves_out_the_start_up_before_the_first_logged_point():
    progress = [Point(8.0, 1_000, math.nan), Point(18.0, 201_000, math.nan)]

    assert bench.training_rate(progress) == pytest.approx(20_000.0)
    assert bench.training_rate(progress[:1]) is None


@pytest.mark.parametrize(
    ("run", "final_steps", "reason"),
    [
        (launch(), 3_000_000, "env-step budget"),
        (
            launch(returncode=-2, stopped_at_cap=True),
            1_000,
            "wall-clock cap (SIGINT from the bench)",
        ),
        (launch(), 1_000, "wall-clock cap"),
        (launch(returncode=1), 1_000, "exit status 1"),
    ],
)
def test_the_stop_reason_names_which_limit_ended_the_run(run, final_steps, reason):
    curve = bench.Curve([], [], final_steps, stop_reason="max_minutes")

    assert bench.summarize(curve, run, 475.0, budget_steps=3_000_000).stop_reason == reason


def test_the_table_has_a_frames_column_only_with_frame_skip():
    rows = [("seedq V-trace", summary()), ("SF", summary(time_to_threshold_s=None))]

    cartpole = bench.results_table(rows, 475.0, frame_skip=1)
    pong = bench.results_table(rows, -15.0, frame_skip=4)

    assert "frames" not in cartpole and "| 0.8 min (45 s) |" in cartpole
    assert "| frames |" in pong and "| 12.0 M |" in pong and "not reached" in pong


def test_the_venv_pins_torch_first_without_its_local_label():
    requirements = bench.sf_venv_requirements("2.13.0+cpu")

    assert requirements[0] == "torch==2.13.0"
    assert f"sample-factory=={bench.SF_VERSION}" in requirements


def test_seedq_rows_move_to_the_launch_clock_and_count_from_100_episodes(tmp_path):
    launched = 1_000.0
    (tmp_path / "metrics.csv").write_text(
        "wall_time,env_steps,return_mean,steps_per_s,episodes\n"
        "2.0,5000,20.0,2500,60\n"
        "4.0,90000,150.0,42500,140\n"
    )
    writer = SummaryWriter(str(tmp_path / "tb"))
    for wall_time in (2.0, 4.0):  # training started 3 s after the launch
        writer.add_scalar("wall_time", wall_time, 0, walltime=launched + 3.0 + wall_time)
    writer.close()
    (tmp_path / "summary.json").write_text('{"env_steps": 91000, "stop_reason": "max_minutes"}')

    curve = bench.seedq_curve(tmp_path, launched)

    assert [p.t for p in curve.progress] == pytest.approx([5.0, 7.0])
    assert curve.returns == [Point(pytest.approx(7.0), 90000, 150.0)]
    assert (curve.final_steps, curve.stop_reason) == (91000, "max_minutes")


def test_sample_factory_returns_come_from_the_chosen_tag_on_the_launch_clock(tmp_path):
    launched = 1_000.0
    writer = SummaryWriter(str(tmp_path / ".summary" / "0"))
    writer.add_scalar("perf/_fps", 9000.0, 20480, walltime=launched + 6.0)
    writer.add_scalar("reward/reward", 100.0, 40960, walltime=launched + 8.0)
    writer.add_scalar("reward/reward", 480.0, 81920, walltime=launched + 10.0)
    writer.close()
    log = "[2026-11-23 14:00:43,496][06469] Collected {0: 100352}, FPS: 11813.2\n"

    curve = bench.sf_curve(tmp_path, launched, log, "reward/reward")

    assert curve.returns == [Point(8.0, 40960, 100.0), Point(10.0, 81920, 480.0)]
    assert [p.t for p in curve.progress] == [6.0, 8.0, 10.0]
    assert curve.final_steps == 100352


def test_other_processes_cpu_share_is_the_machines_busy_time_less_the_runs_own():
    # 100 s on 2 cores = 200 CPU-s; 150 busy, of which the run used 100.
    share = bench.others_cpu_share((10.0, 1_000.0), (160.0, 1_200.0), own_s=100.0)

    assert share == pytest.approx(0.25)


def test_build_sf_venv_builds_the_default_venv_and_prints_its_python(monkeypatch, capsys):
    built = []
    monkeypatch.setattr(bench, "ensure_sf_venv", lambda venv, torch: built.append(venv) or 0.0)
    assert bench.main([bench.BUILD_VENV_MODE]) == 0
    assert built == [bench.DEFAULT_VENV]
    assert capsys.readouterr().out.strip() == str(bench.venv_python(bench.DEFAULT_VENV))


def test_sticky_is_taken_out_of_sample_factorys_arguments():
    assert bench.split_sticky(["--env=atari_pong", "--sticky=0.25", "--seed=1"]) == (
        0.25,
        ["--env=atari_pong", "--seed=1"],
    )
    assert bench.split_sticky(["--env=atari_pong"]) == (0.0, ["--env=atari_pong"])


@pytest.mark.parametrize("value", ["1.0", "-0.1", "nan", "a quarter", ""])
def test_a_sticky_probability_outside_0_1_is_refused_by_name(value):
    with pytest.raises(SystemExit, match=f"--sticky={value}: the sticky-action probability"):
        bench.split_sticky([f"--sticky={value}"])
