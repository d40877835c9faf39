"""scripts/atari_curves.py: frames-to-score tables from run directories, and the runs it starts."""

import csv
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "atari_curves.py"


@pytest.fixture(scope="module")
def curves():
    spec = importlib.util.spec_from_file_location("atari_curves", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_run(
    path: Path, env: dict, rows: list[tuple[int, float | str]], overrides=(), episodes=None
) -> Path:
    """A run directory as seedq-train leaves it: Hydra's config and overrides, metrics.csv,
    and ``episodes.csv`` when ``episodes`` (returns) are given."""
    (path / ".hydra").mkdir(parents=True)
    config = {"env": env, "algorithm": {"name": "vtrace"}}
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    with open(path / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["wall_time", "env_steps", "return_mean"])
        for i, (steps, value) in enumerate(rows):
            writer.writerow([30.0 * (i + 1), steps, value])
    if episodes is not None:
        lines = [f"{100 * (i + 1)},{ret},900" for i, ret in enumerate(episodes)]
        (path / "episodes.csv").write_text("\n".join(["env_steps,return,length", *lines]) + "\n")
    return path


def test_the_table_gives_frames_to_each_score_in_the_runs_own_frame_skip(curves, tmp_path):
    pong = fake_run(
        tmp_path / "pong",
        {"id": "ALE/Pong-v5", "repeat_action_probability": 0.0},
        # A row before the first episode ends has no return yet.
        [(1_000, ""), (100_000, -20.0), (300_000, 1.0), (450_000, 18.5), (500_000, 17.9)],
    )
    breakout = fake_run(
        tmp_path / "breakout",
        {"id": "ALE/Breakout-v5", "frame_skip": 2},
        [(1_000_000, 12.0), (2_000_000, 60.0)],
    )
    runs = [curves.read_run(pong), curves.read_run(breakout)]
    assert runs[0]["frames"] == [400_000, 1_200_000, 1_800_000, 2_000_000]
    text = curves.table(runs)
    pong_row, breakout_row = text.splitlines()[2:]
    # Pong first reached 0 and 10 at 1.2 M frames and 18 at 1.8 M, never 20; it ended at 17.9.
    assert "| Pong | vtrace | 0 | 2.00 M | 17.9 |" in pong_row
    assert "0: 1.20 M, 10: 1.80 M, 18: 1.80 M, 20: -" in pong_row
    # Its best 100-episode mean and where it was logged; no episode log, so no best game.
    assert "| 17.9 | - | 18.5 at 1.80 M | - |" in pong_row
    # Breakout: sticky actions by default, frames = steps x its frame_skip of 2.
    assert "| Breakout | vtrace | 0.25 | 4.00 M | 60.0 |" in breakout_row
    assert "10: 2.00 M, 50: 4.00 M, 100: -" in breakout_row
    # Each game beside its published anchor, a game without one marked so.
    assert breakout_row.endswith(
        "| CleanRL PPO 414.66 ± 28.09 at 40 M; sticky: Dopamine IQN +102.7 at 10 M |"
    )
    other = fake_run(tmp_path / "other", {"id": "ALE/Tennis-v5"}, [(100_000, -1.0)])
    assert curves.table([curves.read_run(other)]).endswith("| 0: -, 100: -, 1000: - | - |")


def test_a_run_directorys_own_metrics_file_reads_as_the_directory(curves, tmp_path):
    """Given as ``run/metrics.csv`` (a shell glob's way), a run is still read with its config:
    not named "metrics" after the file, as two such runs would both be."""
    env = {"id": "ALE/Breakout-v5", "frame_skip": 2, "repeat_action_probability": 0.0}
    run = fake_run(tmp_path / "a", env, [(1_000_000, 12.0)], overrides=["seed=3"])

    by_file = curves.read_run(run / "metrics.csv")

    assert (by_file["dir"], by_file["game"], by_file["sticky"]) == (run, "Breakout", 0.0)
    assert (by_file["frames"], by_file["overrides"]) == ([2_000_000], ["seed=3"])


def test_two_runs_of_one_game_are_told_apart_by_the_overrides_they_do_not_share(
    curves, tmp_path, capsys
):
    """Two Breakout runs that differ in one key: each row (and each curve's label) names the
    key, not the overrides both share or where each ran; a game's single run names none."""
    env = {"id": "ALE/Breakout-v5"}
    shared = ["env=atari", "seed=0"]
    decay = fake_run(tmp_path / "a" / "Breakout", env, [(100_000, 5.0)], [*shared, "run_dir=/x/a"])
    const = fake_run(
        tmp_path / "b" / "Breakout",
        env,
        [(100_000, 6.0)],
        [*shared, "algorithm.lr_schedule=constant", "run_dir=/x/b", "resume=auto"],
    )
    pong = fake_run(tmp_path / "Pong", {"id": "ALE/Pong-v5"}, [(100_000, -20.0)], shared)
    plot = tmp_path / "curves.png"
    assert curves.main(["table", str(decay), str(const), str(pong), "--plot", str(plot)]) == 0
    rows = capsys.readouterr().out.splitlines()[2:5]
    assert rows[0].startswith("| Breakout | vtrace |")
    assert rows[1].startswith("| Breakout algorithm.lr_schedule=constant | vtrace |")
    assert rows[2].startswith("| Pong | vtrace |")
    runs = [curves.read_run(d) for d in (decay, const, pong)]
    assert curves.differences(runs) == [[], ["algorithm.lr_schedule=constant"], []]
    assert plot.stat().st_size > 0


def test_the_last_episodes_column_averages_the_episode_log(curves, tmp_path, capsys):
    with_log = fake_run(
        tmp_path / "new",
        {"id": "ALE/Pong-v5"},
        [(400_000, 12.5)],
        episodes=[-21.0, -5.0, 17.0, 19.0, 21.0],
    )
    without = fake_run(tmp_path / "old", {"id": "ALE/Pong-v5"}, [(400_000, 12.5)])

    assert curves.main(["table", str(with_log), str(without), "--last", "3"]) == 0
    new_row, old_row = capsys.readouterr().out.splitlines()[2:]
    assert "| 1.60 M | 12.5 | 19.0 |" in new_row  # (17 + 19 + 21) / 3
    assert "| 1.60 M | 12.5 | - |" in old_row  # a run from before the episode log
    assert "| 19.0 | 12.5 at 1.60 M | 21 |" in new_row  # the best game from the episode log
    assert "| - | 12.5 at 1.60 M | - |" in old_row


def test_a_run_of_another_env_family_counts_one_frame_per_step_and_no_sticky_actions(
    curves, tmp_path, capsys
):
    """getting-started's `atari_curves.py table RUN_DIR --last 20` on the default CartPole run
    gave it Atari's frame skip of 4 (0.81 M frames for 202 k steps) and sticky actions 0.25."""
    cartpole = fake_run(
        tmp_path / "cartpole",
        {"kind": "cartpole", "id": "CartPole-v1"},
        [(100_000, 200.0), (200_000, 475.0)],
        episodes=[500.0, 500.0],
    )
    minatar = fake_run(
        tmp_path / "minatar",
        {"kind": "minatar", "id": "breakout", "repeat_action_probability": 0.1},
        [(100_000, 3.0)],
    )

    plot = tmp_path / "curves.png"
    status = curves.main(["table", str(cartpole), str(minatar), "--plot", str(plot)])
    cartpole_row, minatar_row = capsys.readouterr().out.splitlines()[2:4]
    assert (status, plot.exists()) == (0, True)
    assert "| CartPole | vtrace | - | 0.20 M | 475.0 |" in cartpole_row
    assert "| breakout | vtrace | 0.1 | 0.10 M | 3.0 |" in minatar_row


def test_the_best_mean_is_the_first_time_the_highest_mean_was_logged(curves, tmp_path):
    run = fake_run(
        tmp_path / "breakout",
        {"id": "ALE/Breakout-v5"},
        [(1_000, ""), (100_000, 40.0), (200_000, 80.9), (300_000, 70.0), (400_000, 80.9)],
        episodes=[3.0, 412.0, 7.5],
    )
    assert curves.best(curves.read_run(run)) == ("80.9 at 0.80 M", "412")
    empty = fake_run(tmp_path / "empty", {"id": "ALE/Breakout-v5"}, [(1_000, "")], episodes=[])
    assert curves.best(curves.read_run(empty)) == ("-", "-")


def test_run_trains_each_game_for_its_frames_and_continues_an_interrupted_run(
    curves, tmp_path, monkeypatch, capsys
):
    commands = []

    def fake_train(cmd):
        commands.append(cmd)
        run_dir = Path(next(c for c in cmd if c.startswith("run_dir=")).split("=", 1)[1])
        fake_run(run_dir, {"id": "ALE/Breakout-v5", "frame_skip": 2}, [(500_000, 101.0)])
        return 0

    monkeypatch.setattr(curves, "launch", fake_train)
    out = tmp_path / "curves"
    code = curves.main(
        ["run", "--games", "Breakout", "--frames", "1e6", "--out", str(out), "env.frame_skip=2"]
    )
    assert code == 0
    (cmd,) = commands
    # This interpreter's seedq (a venv's), not whichever seedq-train PATH finds first.
    assert cmd[:5] == [sys.executable, "-m", "seedq.cli", "env=atari", "env.id=ALE/Breakout-v5"]
    # 1 M frames at 2 frames per step; the same command again resumes from a checkpoint.
    assert "total_env_steps=500000" in cmd and "resume=auto" in cmd and "max_minutes=0" in cmd
    assert cmd[-1] == "env.frame_skip=2"
    printed = capsys.readouterr().out
    assert "| Breakout | vtrace | 0.25 | 1.00 M | 101.0 |" in printed
    assert (out / "curves.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("status", "says"),
    [(75, "Pong: stopped with a checkpoint in"), (1, "Pong: training exited with status 1")],
)
def test_run_stops_at_a_stopped_or_failed_game_with_its_status_and_no_traceback(
    curves, tmp_path, monkeypatch, capsys, status, says
):
    commands = []
    monkeypatch.setattr(curves, "launch", lambda cmd: commands.append(cmd) or status)
    out = tmp_path / "curves"
    code = curves.main(["run", "--games", "Pong", "Breakout", "--out", str(out)])
    assert code == status
    assert len(commands) == 1  # the games after a stopped one wait for the next command
    err = capsys.readouterr().err
    assert says in err and "the same command" in err and str(out / "Pong") in err
    assert not (out / "curves.png").exists()


def test_launch_returns_the_training_runs_exit_status(curves):
    assert curves.launch([sys.executable, "-c", "raise SystemExit(75)"]) == 75
    assert curves.launch([sys.executable, "-c", "pass"]) == 0


def test_table_refuses_directories_without_metrics(curves, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert curves.main(["table", str(tmp_path / "empty")]) == 2
    assert "no metrics.csv in" in capsys.readouterr().err


def write_metrics(path: Path, rows: list[tuple[int, float | str, float | str]]) -> Path:
    """metrics.csv rows of (env_steps, return_mean, loss/entropy)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["wall_time", "env_steps", "return_mean", "loss/entropy"])
        for i, row in enumerate(rows):
            writer.writerow([10.0 * (i + 1), *row])
    return path


def test_marks_read_each_run_at_frame_marks_and_scalars_over_a_window(curves, tmp_path, capsys):
    """The return is the last logged at or before each mark; a scalar is the mean of the rows
    in (mark - window, mark]; `entropy` is -loss/entropy / entropy_cost, in nats; a run that
    ended before a mark has no value there."""
    run = fake_run(tmp_path / "run", {"id": "ALE/Pong-v5"}, [])
    config = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    config["algorithm"]["entropy_cost"] = 0.02
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    # frames = steps x 4: 40 k, 90 k, 100 k, 110 k, 200 k, 240 k
    write_metrics(
        run / "metrics.csv",
        [
            (10_000, "", -0.0358),
            (22_500, -20.5, -0.0340),
            (25_000, -20.0, -0.0320),
            (27_500, -19.0, ""),
            (50_000, -15.0, -0.0300),
            (60_000, -12.0, -0.0280),
        ],
    )
    code = curves.main(
        ["table", str(run), "--marks", "2e5", "1e5", "3e5"]
        + ["--scalar", "entropy", "--window", "7e4"]
    )
    assert code == 0
    lines = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert lines[0] == "| run | 0.1 M | 0.2 M | 0.3 M |"  # marks in order
    # 0.1 M: the row at 100 k frames (-20.0); 0.2 M: the row at 200 k; 0.3 M: past the run.
    assert lines[2] == "| Pong: return | -20.0 | -15.0 | - |"
    # 0.1 M: rows at 40 k, 90 k, 100 k are in (30 k, 100 k] -> (1.79 + 1.70 + 1.60) / 3;
    # 0.2 M: (130 k, 200 k] holds only the row at 200 k -> 1.50 (110 k has no entropy).
    assert lines[3] == "| Pong: entropy | 1.7 | 1.5 | - |"

    # A bare metrics CSV (as docs/results keeps them): its game from its name, its episodes
    # from the file beside it, the frame skip and entropy cost as given.
    kept = write_metrics(tmp_path / "vtrace_pong_x_seed0_metrics.csv", [(25_000, -20.0, -0.05)])
    (tmp_path / "vtrace_pong_x_seed0_episodes.csv").write_text(
        "env_steps,return,length\n10,-21,900\n20,-19,900\n"
    )
    plot = tmp_path / "kept.png"
    code = curves.main(
        ["table", str(kept), "--frame-skip", "2", "--entropy-cost", "0.025", "--plot", str(plot)]
        + ["--marks", "5e4", "--scalar", "entropy", "--scalar", "loss/entropy"]
    )
    assert code == 0
    table, marks = capsys.readouterr().out.removesuffix(f"wrote {plot}\n").split("\n\n")
    assert plot.stat().st_size > 0
    row = table.splitlines()[2]
    assert row.startswith("| vtrace_pong_x_seed0 | - | - | 0.05 M | -20.0 | -20.0 |")
    assert "0: -, 10: -, 18: -, 20: -" in row  # Pong's milestones, read from the name
    assert marks.splitlines()[2:] == [
        "| vtrace_pong_x_seed0: return | -20.0 |",
        "| vtrace_pong_x_seed0: entropy | 2 |",
        "| vtrace_pong_x_seed0: loss/entropy | -0.05 |",
    ]


def test_marks_refuse_a_scalar_without_marks_or_a_column_the_runs_lack(curves, tmp_path, capsys):
    kept = write_metrics(tmp_path / "a_metrics.csv", [(25_000, -20.0, -0.05)])
    with pytest.raises(SystemExit) as exit_info:
        curves.main(["table", str(kept), "--scalar", "entropy"])
    assert exit_info.value.code == 2
    assert "--scalar needs --marks" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no column 'train/nothing'"):
        curves.main(["table", str(kept), "--marks", "1e5", "--scalar", "train/nothing"])
    with pytest.raises(SystemExit) as exit_info:
        curves.main(["table", str(kept), "--marks", "1e5", "--window", "0"])
    assert exit_info.value.code == 2
    assert "--window must be > 0 frames" in capsys.readouterr().err
    # An episode log (or any other CSV) given where a metrics CSV belongs is named, not a KeyError.
    episodes = tmp_path / "a_episodes.csv"
    episodes.write_text("env_steps,return,length\n10,-21,900\n")
    with pytest.raises(SystemExit, match="a_episodes.csv: not a curve"):
        curves.main(["table", str(episodes)])


def test_midpoint_envs_place_each_game_at_its_middle_in_the_runs_frames(curves, tmp_path, capsys):
    """A game's midpoint is its end less half its length x envs x frame skip; the row averages
    the games within 125 k frames of each mark, with their count."""
    run = fake_run(tmp_path / "run", {"id": "ALE/Pong-v5"}, [(250_000, -5.0), (500_000, 10.0)])
    # (end env steps, length, return): with 10 envs and frame skip 4 the midpoints are
    # 4 x (100 k - 5 x 1,000) = 380 k, 4 x (260 k - 5 x 2,000) = 1.0 M, 4 x (280 k - 5 x 4,000)
    # = 1.04 M, and 4 x (300 k - 5 x 500) = 1.19 M.
    games = [(100_000, 1_000, -21), (260_000, 2_000, 5), (280_000, 4_000, 9), (300_000, 500, 20)]
    lines = [f"{end},{ret},{length}" for end, length, ret in games]
    (run / "episodes.csv").write_text("\n".join(["env_steps,return,length", *lines]) + "\n")
    code = curves.main(["table", str(run), "--marks", "1e6", "0.4e6", "--midpoint-envs", "10"])
    assert code == 0
    rows = capsys.readouterr().out.split("\n\n")[1].splitlines()
    assert rows[3] == "| Pong: games around (midpoint) | -21.0 (1) | +7.0 (2) |"
    # (Those two games ended at 1.04 M and 1.12 M frames: by its end each reads as later.)
    with pytest.raises(SystemExit):
        curves.main(["table", str(run), "--midpoint-envs", "10"])  # needs --marks
    assert "needs --marks" in capsys.readouterr().err


def test_another_systems_curve_reads_beside_seedqs_at_the_marks(curves, tmp_path, capsys):
    """A curve ``scripts/sf_curve.py --csv`` wrote (env_steps, frames, return_mean; no wall
    time, no episode log) is read like a bare metrics CSV, named by its file and placed in
    its own frames."""
    sf = tmp_path / "sf_pong_seed0_this_box_curve.csv"
    sf.write_text("env_steps,frames,return_mean\n125440,501760,-20.2\n250880,1003520,-18.9\n")
    seedq = write_metrics(tmp_path / "ppo_pong_seed0_metrics.csv", [(250_000, -11.5, -0.006)])
    assert curves.main(["table", str(sf), str(seedq), "--marks", "0.5e6", "1e6"]) == 0
    out = capsys.readouterr().out
    assert "| sf_pong_seed0_this_box_curve: return | - | -20.2 |" in out
    assert "| ppo_pong_seed0: return | - | -11.5 |" in out
    run = curves.read_run(sf)
    assert run["frames"] == [501_760, 1_003_520]
    assert run["game"] == "Pong" and run["episode_returns"] is None


def dopamine_json(path: Path, runs: dict[str, list[list[float]]]) -> Path:
    """A Dopamine baseline file: each agent's runs one after another, iterations from 0."""
    import json

    rows = [
        {"Iteration": i, "Value": value, "Agent": agent}
        for agent, agent_runs in runs.items()
        for run in agent_runs
        for i, value in enumerate(run)
    ]
    path.write_text(json.dumps(rows))
    return path


def test_published_reads_each_dopamine_run_at_the_iteration_ending_by_each_mark(
    curves, tmp_path, capsys
):
    """Iteration i covers frames [i, i + 1) M: a mark reads the last iteration that ended by it,
    and a score is first reached at the end of the iteration that reached it."""
    pong = dopamine_json(
        tmp_path / "pong.json",
        {
            "IQN": [[-21.0, -10.0, 5.0, 18.5], [-20.0, -12.0, 9.0, 17.0]],
            "DQN": [[-21.0, -21.0, -20.0, -19.0]],
        },
    )
    assert curves.main(["published", str(pong), "--marks", "2e6", "3.5e6", "4e6"]) == 0
    out = capsys.readouterr().out
    assert (
        "| Pong | IQN | 2 | -11.0 (-12.0 to -10.0) | +7.0 (+5.0 to +9.0) | +17.8 (+17.0 to +18.5) |"
        in out
    )
    assert "0: 2/2 (3, 3 M); 10: 2/2 (4, 4 M); 18: 1/2 (4 M); 20: 0/2 |" in out
    assert "| Pong | DQN | 1 | -21.0 (-21.0 to -21.0) | -20.0 (-20.0 to -20.0) |" in out
    runs = curves.read_dopamine(pong)
    assert [(r["agent"], r["run"]) for r in runs] == [("IQN", 0), ("IQN", 1), ("DQN", 0)]
    assert curves.dopamine_at(runs[0], 0.9e6) is None
    assert curves.dopamine_first(runs[1], 9.0) == 3_000_000


def test_published_says_when_a_run_reached_a_score_after_the_marks(curves, tmp_path, capsys):
    pong = dopamine_json(tmp_path / "pong.json", {"Rainbow": [[-20.0, 0.0, 12.0, 19.0]]})
    assert curves.main(["published", str(pong), "--marks", "2e6"]) == 0
    assert (
        "0: 1/1 (2 M); 10: 0/1; next 3 M; 18: 0/1; next 4 M; 20: 0/1 |" in capsys.readouterr().out
    )


def test_published_csv_keeps_the_first_iterations_and_reads_back_the_same(curves, tmp_path, capsys):
    breakout = dopamine_json(
        tmp_path / "breakout.json",
        {"C51": [[2.0, 11.0, 60.0, 120.0], [3.0, 9.0, 40.0, 90.0]], "IQN": [[5.0, 30.0, 101.0]]},
    )
    whole, first3 = tmp_path / "whole.csv", tmp_path / "first3.csv"
    marks = ["--marks", "1e6", "2e6", "3e6"]
    assert curves.main(["published", str(breakout), *marks, "--csv", str(whole)]) == 0
    from_json = capsys.readouterr().out.split("wrote")[0]
    assert curves.main(["published", str(whole), *marks]) == 0
    assert capsys.readouterr().out == from_json
    args = ["published", str(breakout), "--csv", str(first3), "--iterations", "3"]
    assert curves.main(args) == 0
    rows = list(csv.DictReader(open(first3)))
    assert max(int(r["iteration"]) for r in rows) == 2 and len(rows) == 3 + 3 + 3
    assert rows[0] == {
        "game": "Breakout",
        "agent": "C51",
        "run": "0",
        "iteration": "0",
        "frames": "1000000",
        "return": "2.0",
    }


@pytest.mark.parametrize(
    "content, says",
    [
        (None, "no such file"),
        ('[{"Iteration": 0, "Agent": "DQN"}]', "not a Dopamine baseline file"),
        ("[]", "no runs in"),
    ],
)
def test_published_refuses_what_is_not_a_dopamine_file(curves, tmp_path, capsys, content, says):
    path = tmp_path / "pong.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        curves.main(["published", str(path)])
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


def test_published_marks_start_at_dopamines_first_iteration(curves, tmp_path, capsys):
    pong = dopamine_json(tmp_path / "pong.json", {"DQN": [[-21.0]]})
    with pytest.raises(SystemExit):
        curves.main(["published", str(pong), "--marks", "0.5e6"])
    assert "first iteration ends at 1 M frames" in capsys.readouterr().err


def test_published_draws_the_agents_chosen_with_seedqs_runs_of_each_game(
    curves, tmp_path, capsys, monkeypatch
):
    """--agents keeps those agents (in the table and the plot); --beside draws seedq's runs
    over the published curves of their own game, up to the last mark."""
    pong = dopamine_json(
        tmp_path / "pong.json",
        {"IQN": [[-20.0, -5.0, 10.0]], "DQN": [[-21.0, -20.0, -19.0]], "C51": [[-21.0] * 3]},
    )
    seedq = write_metrics(
        tmp_path / "vtrace_pong_sticky_seed0_metrics.csv",
        [(250_000, -10.0, -0.01), (500_000, 2.0, -0.01), (900_000, 12.0, -0.01)],
    )
    drawn = {}
    monkeypatch.setattr(curves, "plot_published", lambda *a: drawn.setdefault("args", a))
    out = tmp_path / "pub.png"
    args = ["published", str(pong), "--marks", "2e6", "3e6", "--agents", "IQN", "DQN"]
    assert curves.main([*args, "--plot", str(out), "--beside", str(seedq)]) == 0
    table = capsys.readouterr().out
    assert "| Pong | IQN |" in table and "| Pong | DQN |" in table and "C51" not in table
    published, beside, path, frames = drawn["args"]
    assert {r["agent"] for r in published} == {"IQN", "DQN"}
    assert [r["game"] for r in beside] == ["Pong"] and beside[0]["frames"][-1] == 3_600_000
    assert path == out and frames == 3e6


def test_published_plot_writes_a_figure(curves, tmp_path):
    pytest.importorskip("matplotlib")
    pong = dopamine_json(tmp_path / "pong.json", {"IQN": [[-20.0, -5.0, 10.0], [-19.0, 0.0, 12.0]]})
    seedq = write_metrics(tmp_path / "pong_metrics.csv", [(250_000, -10.0, -0.01)])
    out = tmp_path / "pub.png"
    assert curves.main(["published", str(pong), "--plot", str(out), "--beside", str(seedq)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--agents", "Rainbow"], "--agents: no runs of ['Rainbow']; the files have ['IQN']"),
        (["--beside", "nowhere"], "--beside needs --plot"),
        (["--plot", "p.png", "--beside", "nowhere"], "--beside: no metrics.csv in nowhere"),
        (["--csv", "out.csv", "--iterations", "0"], "--iterations must be 1 or more, not 0"),
    ],
)
def test_published_refuses_unknown_agents_and_runs_it_cannot_draw(
    curves, tmp_path, capsys, monkeypatch, extra, says
):
    monkeypatch.chdir(tmp_path)
    pong = dopamine_json(tmp_path / "pong.json", {"IQN": [[-20.0]]})
    with pytest.raises(SystemExit):
        curves.main(["published", str(pong), *extra])
    assert says in capsys.readouterr().err


def test_rows_cut_short_or_not_numbers_are_left_out_and_counted(curves, tmp_path, capsys):
    # A value that is not a number ended the table in a ValueError traceback; a last line
    # without its newline (a writer killed, or still writing) was read as a row: "90.0,5" a
    # run at 5 env steps, "100,-2" an episode of return -2.
    run = fake_run(
        tmp_path / "pong",
        {"id": "ALE/Pong-v5"},
        [(1_000, -20.0), (2_000, "abc"), (3_000, -19.0)],
        episodes=[-21.0, -20.0],
    )
    with open(run / "metrics.csv", "a") as f:
        f.write("120.0,5")
    with open(run / "episodes.csv", "a") as f:
        f.write("300,-2")
    read = curves.read_run(run)
    assert (read["frames"], read["returns"]) == ([4_000, 12_000], [-20.0, -19.0])
    assert read["episode_returns"] == [-21.0, -20.0]
    err = capsys.readouterr().err
    assert "metrics.csv: 2 rows left out (1 not numbers, 1 cut short)" in err
    assert "episodes.csv: 1 rows left out (cut short)" in err


def test_a_folder_without_config_and_a_plot_it_cannot_write_are_one_line_exit_2(curves, tmp_path):
    # Both ended in a traceback (FileNotFoundError for the config, and for the figure after the
    # table; a suffix matplotlib does not write: ValueError), `run --plot` after its training.
    run = fake_run(tmp_path / "pong", {"id": "ALE/Pong-v5"}, [(1_000, -20.0)])
    copied = tmp_path / "copied"
    copied.mkdir()
    (copied / "metrics.csv").write_bytes((run / "metrics.csv").read_bytes())
    for args, says in (
        (["table", str(copied)], f"{copied}: no .hydra/config.yaml to read its game"),
        (["table", str(run), "--plot", str(tmp_path / "no" / "x.png")], "no folder"),
        (["table", str(run), "--plot", str(tmp_path / "x.nosuch")], "give a file ending in"),
        (["run", "--plot", str(tmp_path / "no" / "x.png")], "no folder"),
    ):
        result = subprocess.run(
            [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
        )
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert says in result.stderr.splitlines()[-1] and "Traceback" not in result.stderr


def test_a_mean_over_fewer_than_100_episodes_reaches_no_score(curves, tmp_path):
    # Rows logged before 100 episodes had finished counted: a lucky mean of 3 early games
    # was a run's "best 100-episode mean" and its frames to a score (summarize_runs.py skips
    # them).
    run = tmp_path / "pong"
    (run / ".hydra").mkdir(parents=True)
    config = {"env": {"id": "ALE/Pong-v5"}, "algorithm": {"name": "vtrace"}}
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    (run / ".hydra" / "overrides.yaml").write_text("")
    (run / "metrics.csv").write_text(
        "wall_time,env_steps,return_mean,episodes\n"
        "30,100000,19.0,3\n30,200000,-5.0,120\n90,300000,18.5,250\n"
    )
    read = curves.read_run(run)
    assert curves.first_frames(read, 18) == 1_200_000  # 300 k env steps x 4
    assert curves.best(read)[0] == "18.5 at 1.20 M"
