"""seedq-eval (and seedq-train's resume) refuse in one line, exit 2, what a user can get wrong:
a videos folder that cannot be written (before any episode is played), weights that do not
fit the model, a checkpoint without the keys every checkpoint holds (skipped for an older one
like a damaged file), and an env value training refuses."""

import pytest
import torch
from cli_helpers import run_cli

from seedq.evaluate import main
from seedq.learner.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_newest,
    read_checkpoint,
    save_checkpoint,
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The checkpoint file of a short CartPole run."""
    run_dir = tmp_path_factory.mktemp("run")
    result = run_cli("total_env_steps=3000", "actor.num_actors=1", f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stdout
    (path,) = (run_dir / "checkpoints").glob("ckpt-*.pt")
    return path


def copy_run(trained, run_dir, change=None):
    """A run dir holding ``trained``'s checkpoint, changed by ``change(state)``; its path."""
    state = torch.load(trained, weights_only=True)
    if change is not None:
        change(state)
    path = run_dir / "checkpoints" / trained.name
    path.parent.mkdir(parents=True)
    torch.save(state, path)
    return path


def test_eval_refuses_an_unwritable_videos_folder_before_playing(trained, tmp_path, capsys):
    copy_run(trained, tmp_path)
    (tmp_path / "videos").write_text("a file where the videos folder would be")
    code = main([f"checkpoint={tmp_path}", "episodes=1", "video=true"])
    err = capsys.readouterr().err
    assert (code, err.count("\n")) == (2, 1), err
    assert f"video=true: cannot write videos into {tmp_path / 'videos'}" in err
    assert (tmp_path / "videos").read_text() == "a file where the videos folder would be"


def first_weight(state):
    return next(iter(state["model"]))


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s["model"].__setitem__(first_weight(s), torch.zeros(3, 3)),
        lambda s: s["model"].pop(first_weight(s)),
    ],
    ids=["wrong shape", "missing key"],
)
def test_eval_refuses_weights_that_do_not_fit_naming_the_file(trained, tmp_path, capsys, change):
    path = copy_run(trained, tmp_path, change)
    assert main([f"checkpoint={path}", "episodes=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seedq-eval: {path}: its weights do not fit") and err.count("\n") == 1


@pytest.mark.parametrize(
    "keys, missing",
    # Counters alone passed the check and seedq-eval, resume= then said KeyError 'config'.
    [(("config",), "config"), (("config", "model"), "config, model")],
    ids=["no-config", "counters-alone"],
)
def test_a_checkpoint_without_its_config_is_not_a_seedq_checkpoint(
    trained, tmp_path, capsys, keys, missing
):
    path = copy_run(trained, tmp_path, lambda s: [s.pop(key) for key in keys])
    with pytest.raises(
        CheckpointError, match=rf"is not a seedq checkpoint \(it has no {missing}\)"
    ):
        load_checkpoint(path)
    assert main([f"checkpoint={path}", "episodes=1"]) == 2
    assert f"it has no {missing}" in capsys.readouterr().err
    resumed = run_cli(f"resume={path}", f"run_dir={tmp_path / 'resumed'}")
    assert (resumed.returncode, "Traceback" in resumed.stdout) == (2, False), resumed.stdout
    assert f"it has no {missing}" in resumed.stdout


def test_a_newer_file_without_the_keys_is_skipped_for_the_older_checkpoint(trained, tmp_path):
    older = copy_run(trained, tmp_path)
    newer = older.with_name("ckpt-999999999999.pt")
    state = torch.load(older, weights_only=True)
    del state["config"]
    torch.save(state, newer)
    assert read_checkpoint(str(tmp_path))[0] == older
    assert load_newest(str(tmp_path))[0] == older  # resume=auto
    assert (tmp_path / "checkpoints" / "damaged" / newer.name).is_file()  # set aside, kept


def test_the_advice_to_take_an_older_checkpoint_speaks_to_its_reader(tmp_path, capsys):
    for steps in (100, 200):
        state = {"config": {"algorithm": {"name": "vtrace"}, "env": {}}, "model": {}}
        save_checkpoint(str(tmp_path), {**state, "env_steps": steps, "updates": 0}, keep=3)
    newest = tmp_path / "checkpoints" / "ckpt-000000000200.pt"
    newest.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match=r"newest ckpt-000000000100.pt: resume from it$"):
        read_checkpoint(str(newest))
    assert main([f"checkpoint={newest}"]) == 2
    assert capsys.readouterr().err.endswith("newest ckpt-000000000100.pt: evaluate it\n")


def test_eval_refuses_a_max_episode_steps_training_refuses(trained, tmp_path, capsys):
    copy_run(trained, tmp_path)
    assert main([f"checkpoint={tmp_path}", "episodes=1", "env.max_episode_steps=0"]) == 2
    assert "env.max_episode_steps=0 is out of range; it must be > 0" in capsys.readouterr().err
