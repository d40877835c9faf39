"""scripts/summarize_runs.py over a sweep: its jobs named by their overrides, a failed job left
out by name, never the reason for no table."""

import csv

from test_script_usage import script


def fake_job(path, overrides, rows):
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    with open(path / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["wall_time", "env_steps", "return_mean", "episodes"])
        writer.writerows(rows)


def test_a_sweep_with_a_refused_job_is_summarised_by_its_other_jobs(tmp_path):
    # The refused job's folder (no metrics.csv), or the sweep's own folder or its
    # multirun.yaml, ended the script with "no metrics.csv" and no table at all; the jobs
    # were named 0, 1, 2, whatever they trained.
    sweep = tmp_path / "sweep"
    fake_job(sweep / "0", ["algorithm=vtrace", "seed=0"], [[60, 1000, 480, 120]])
    (sweep / "1" / ".hydra").mkdir(parents=True)
    (sweep / "1" / "cli.log").write_text("algorithm=sac needs continuous (Box) actions\n")
    fake_job(sweep / "2", ["algorithm=ppo", "seed=0", "hydra.job.chdir=false"], [[60, 1000, 9, 50]])
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    by_folder = script("summarize_runs.py", str(sweep), "--target", "475")
    by_glob = script("summarize_runs.py", *sorted(map(str, sweep.iterdir())), "--target", "475")
    for result in (by_folder, by_glob):
        assert result.returncode == 0, result.stderr
        assert "| 0: algorithm=vtrace seed=0 | 17 | 1.0 | 1,000 | 480.0 |" in result.stdout
        assert "| 2: algorithm=ppo seed=0 | 17 | not reached |" in result.stdout
        assert f"{sweep / '1'}: no metrics.csv (see its cli.log); left out" in result.stderr


def test_a_torn_metrics_row_is_left_out_and_counted(tmp_path):
    # A row a killed writer left half written ended the script in a ValueError traceback.
    fake_job(tmp_path / "run", [], [[60, 1000, 20, 10], [120, "20", "abc", ""]])
    result = script("summarize_runs.py", str(tmp_path / "run"), "--target", "10")
    assert result.returncode == 0, result.stderr
    assert "| run | 17 | not reached | - | 20.0 |" in result.stdout
    assert "1 rows left out (not numbers)" in result.stderr


def test_paths_that_hold_no_run_are_one_line_exit_2(tmp_path):
    result = script("summarize_runs.py", str(tmp_path))
    assert (result.returncode, result.stderr.splitlines()[-1]) == (
        2,
        "no seedq run (metrics.csv) in the paths given",
    )


def test_a_last_row_cut_short_is_left_out_and_counted(tmp_path):
    # The last line of a run being written (or of a killed writer) without its newline,
    # "180,3", was read as the run's last row: 3 env steps in 180 s and a final return of nan.
    fake_job(tmp_path / "run", [], [[60, 1000, 20, 100], [120, 2000, 30, 200]])
    with open(tmp_path / "run" / "metrics.csv", "a") as f:
        f.write("180,3")
    result = script("summarize_runs.py", str(tmp_path / "run"), "--target", "10")
    assert result.returncode == 0, result.stderr
    assert "| run | 17 | 1.0 | 1,000 | 30.0 |" in result.stdout
    assert "1 rows left out (cut short)" in result.stderr


def test_runs_of_two_envs_under_one_target_are_refused_naming_them(tmp_path):
    # CartPole's 475 was read against an Acrobot run as well: "not reached" beside it.
    for name, env in (("cartpole", "CartPole-v1"), ("acrobot", "Acrobot-v1")):
        fake_job(tmp_path / name, [], [[60, 1000, 20, 100]])
        (tmp_path / name / ".hydra" / "config.yaml").write_text(f"env:\n  id: {env}\n")
    result = script("summarize_runs.py", str(tmp_path / "cartpole"), str(tmp_path / "acrobot"))
    assert (result.returncode, result.stdout, result.stderr.splitlines()) == (
        2,
        "",
        [
            "runs of Acrobot-v1, CartPole-v1 share one --target (475): summarise each env's "
            "runs apart, each with its own target"
        ],
    )
