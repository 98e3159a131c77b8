"""Framework profiles: loading, detection from names, version choice and classification."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import parsers
from taxonomy.profiles import (
    CLASSES_SCHEMA,
    ProfileError,
    assume_version,
    classify,
    detect,
    load_profiles,
    profiles_frame,
    version_matches,
)
from taxonomy.vocab import STAGE_NAMES

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
VERL_LOG = CORPUS / "logs" / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log"
FRAMEWORKS = (
    "verl",
    "openrlhf",
    "trl",
    "nemo_rl",
    "slime",
    "areal",
    "roll",
    "deepspeed_chat",
    "vllm",
    "sglang",
    "generic",
)


@pytest.fixture(scope="module")
def profiles():
    return load_profiles()


def test_every_framework_has_a_profile_with_readable_rules(profiles):
    assert set(profiles) == set(FRAMEWORKS)
    table = profiles_frame(profiles)
    assert set(table["stage"].to_list()) <= set(STAGE_NAMES)
    assert table.filter(pl.col("relation") == "part")["parent"].null_count() == 0
    for name in FRAMEWORKS:
        assert profiles[name].title and (name == "generic" or profiles[name].detect)


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("openrlhf_v0.10_sync.log", "openrlhf"),
        ("openrlhf_v0.5_episode.log", "openrlhf"),
        ("trl_grpo_trainer_state.json", "trl"),
        ("nemo_rl_grpo_sync.log", "nemo_rl"),
        ("nemo_rl_grpo_async.log", "nemo_rl"),
        ("slime_perf.log", "slime"),
        ("areal_stats.log", "areal"),
        ("roll_rlvr.log", "roll"),
        ("deepspeed_chat_now.log", "deepspeed_chat"),
        ("verl_ray_timeline.json", "verl"),
        ("areal_traces-r0.jsonl", "areal"),
        ("nemo_rl_trace.json", "nemo_rl"),
    ],
)
def test_detection_from_names_alone(profiles, name, profile):
    out = parsers.parse_file(FIXTURES / name)
    assert detect(out.events["name"].cast(pl.String), {}, profiles).profile.name == profile


def test_framework_hint_wins_and_plain_torch_names_fall_back_to_generic(profiles):
    assert detect(["timing/generation"], {"framework": "verl"}, profiles).profile.name == "verl"
    assert detect(["ProfilerStep#3", "aten::mm"], {}, profiles).profile.name == "generic"
    assert detect([], {}, profiles).profile.name == "generic"


def test_verl_version_evidence(profiles):
    verl = profiles["verl"]
    assert assume_version(verl, ["timing_s/gen", "timing_s/update_weights"], {})[0] == "0.8"
    assert (
        assume_version(verl, ["timing_s/gen", "timing_s/reshard"], {"number_format": "full"})[0]
        == "0.5"
    )
    assert assume_version(verl, ["timing/gen", "timing/step"], {})[0] == "0.1"
    assert assume_version(verl, ["timing_s/gen"], {"number_format": "full"})[0] == "0.6"
    assert (
        assume_version(verl, ["timing_s/gen", "timing_s/reward"], {"number_format": "fixed3"})[0]
        == "0.4.0"
    )
    assert assume_version(verl, ["timing_s/gen"], {"number_format": "fixed3"})[0] == "0.3"
    assert assume_version(verl, ["timing_s/gen"], {"framework_version": "0.7.1"}) == (
        "0.7.1",
        "version stated by the source",
    )
    version, reason = assume_version(verl, ["timing_s/gen"], {})
    assert version == "0.6" and "default" in reason


def test_corpus_verl_log_is_classified_as_v0_4(profiles):
    out = parsers.parse_file(VERL_LOG)
    found = detect(out.events["name"].cast(pl.String), out.meta, profiles)
    assert found.version == "0.4.0"
    assert found.version_assumed.startswith("verl 0.4.0: 3-decimal numbers")
    classes = classify(out.events["name"].cast(pl.String), "log", found, profiles=profiles)
    assert classes.schema == pl.Schema(CLASSES_SCHEMA)
    by = {r["name"]: r for r in classes.iter_rows(named=True)}
    assert by["timing_s/step"]["relation"] == "step"
    assert (by["timing_s/gen"]["stage"], by["timing_s/gen"]["hides"]) == (
        "rollout",
        ["weight_sync"],
    )
    assert (by["timing_s/testing"]["stage"], by["timing_s/testing"]["in_step"]) == (
        "evaluation",
        True,
    )
    assert (by["timing_s/save_checkpoint"]["stage"], by["timing_s/save_checkpoint"]["in_step"]) == (
        "checkpoint",
        True,
    )
    assert {by[f"timing_s/{k}"]["stage"] for k in ("values", "update_critic", "adv")} == {
        "values",
        "critic_update",
        "advantage",
    }
    assert classes["relation"].cast(pl.String).is_in(["stage", "step"]).all()


def test_verl_version_changes_meaning(profiles):
    names = ["timing_s/gen", "timing_s/testing", "timing_s/reshard", "timing_s/update_weights"]
    old = {
        r["name"]: r
        for r in classify(names, "log", profiles["verl"], "0.5", profiles).iter_rows(named=True)
    }
    new = {
        r["name"]: r
        for r in classify(names, "log", profiles["verl"], "0.6", profiles).iter_rows(named=True)
    }
    assert (
        old["timing_s/testing"]["in_step"] is True and new["timing_s/testing"]["in_step"] is False
    )
    assert old["timing_s/gen"]["hides"] is None and new["timing_s/gen"]["hides"] == ["weight_sync"]
    assert (old["timing_s/reshard"]["relation"], old["timing_s/reshard"]["parent"]) == (
        "part",
        "timing_s/gen",
    )
    assert new["timing_s/update_weights"]["stage"] == "weight_sync"


def test_unknown_names_are_kept_as_other(profiles):
    classes = classify(
        ["timing_s/get_batch_rollout_with_filtering", "timing_s/gen"],
        "log",
        profiles["verl"],
        "0.6",
        profiles,
    )
    row = classes.filter(pl.col("name") == "timing_s/get_batch_rollout_with_filtering").row(
        0, named=True
    )
    assert (row["stage"], row["relation"], row["rule"]) == ("other", "unknown", None)


def test_trace_names_of_each_framework(profiles):
    cases = {
        "verl": {
            "gen": "rollout",
            "generate_sequences": "rollout",
            "actor_compute_log_prob": "old_logprob",
            "compute_ref_log_prob": "ref_logprob",
            "WorkerDict.critic_update_critic": "critic_update",
            "task::WorkerDict.actor_rollout_update_actor": "actor_update",
            "compute_rm_score": "reward",
            "update_weights": "weight_sync",
            "ProfilerStep#12": "other",
            "ray.get": "other",
        },
        "nemo_rl": {
            "vllm_genertion_worker/generate": "rollout",
            "dtensor_policy_worker_v2/get_logprobs": "old_logprob",
            "megatron_policy_worker/get_reference_policy_logprobs": "ref_logprob",
            "vllm_genertion_worker/update_weights_via_ipc_zmq": "weight_sync",
            "policy_training": "actor_update",
        },
        "areal": {
            "train.rollout": "rollout",
            "train.update_weights": "weight_sync",
            "fsdp_engine.backward": "actor_update",
        },
        "roll": {
            "model_update": "weight_sync",
            "old_log_probs_and_values": "old_logprob",
            "val_generate": "evaluation",
        },
        "openrlhf": {
            "RolloutRayActor.generate": "rollout",
            "ReferenceModelActor.forward": "ref_logprob",
            "PolicyModelActor.broadcast_to_vllm": "weight_sync",
            "CriticModelActor.fit": "critic_update",
        },
    }
    for profile, expected in cases.items():
        classes = classify(
            list(expected), "trace", profiles[profile], profiles[profile].default_version, profiles
        )
        got = dict(classes.select("name", pl.col("stage").cast(pl.String)).iter_rows())
        assert got == expected, profile
        assert classes["relation"].cast(pl.String).ne("unknown").all(), profile


def test_source_separates_log_keys_from_trace_names(profiles):
    log = classify(["gen", "timing_s/gen"], "log", profiles["verl"], "0.6", profiles)
    assert dict(log.select("name", pl.col("relation").cast(pl.String)).iter_rows()) == {
        "gen": "unknown",
        "timing_s/gen": "stage",
    }
    with pytest.raises(ValueError):
        classify(["gen"], "nvtx", profiles["verl"])


def test_user_rules_take_priority(tmp_path):
    rules = tmp_path / "mine.toml"
    rules.write_text(
        "[profile]\nname = \"verl\"\n\n[[rules]]\nmatch = "
        "'^timing_s/get_batch_rollout_with_filtering$'\n"
        'source = "log"\nstage = "rollout"\nrelation = "stage"\nrole = "rollout"\nnote = "our '
        'fork"\n\n'
        '[[rules]]\nmatch = \'^timing_s/adv$\'\nsource = "log"\nstage = "reward"\nrelation = '
        '"stage"\n'
    )
    profiles = load_profiles(rules)
    classes = classify(
        ["timing_s/get_batch_rollout_with_filtering", "timing_s/adv"],
        "log",
        profiles["verl"],
        "0.6",
        profiles,
    )
    got = {r["name"]: (r["stage"], r["rule"]) for r in classes.iter_rows(named=True)}
    assert got == {
        "timing_s/get_batch_rollout_with_filtering": ("rollout", "user:1"),
        "timing_s/adv": ("reward", "user:2"),
    }
    assert profiles["openrlhf"].rules[0].profile == "openrlhf"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "[[rules]]\nmatch = 'x'\nstage = 'launch'\nrelation = 'stage'\n",
            "unknown stage 'launch'",
        ),
        ("[[rules]]\nmatch = '(unclosed'\nstage = 'rollout'\nrelation = 'stage'\n", "bad regex"),
        (
            "[[rules]]\nmatch = 'x'\nstage = 'rollout'\nrelation = 'part'\n",
            "a part needs its parent",
        ),
        (
            "[[rules]]\nmatch = 'x'\nstage = 'rollout'\nrelation = 'stage'\nversions = 'new'\n",
            "bad version range",
        ),
        (
            "[profile]\nname = 'megatron'\n[[rules]]\nmatch = 'x'\nstage = 'rollout'\nrelation = "
            "'stage'\n",
            "which does not exist",
        ),
        ("rules = 3 = 4\n", "not valid TOML"),
    ],
)
def test_bad_user_rules_name_the_file(tmp_path, text, problem):
    path = tmp_path / "bad_rules.toml"
    path.write_text(text)
    with pytest.raises(ProfileError) as err:
        load_profiles(path)
    assert str(path) in str(err.value) and problem in str(err.value)


def test_version_ranges():
    assert version_matches(">=0.2,<0.6", "0.4.1")
    assert not version_matches(">=0.2,<0.6", "0.6")
    assert version_matches("<0.4.1", "0.4.0") and not version_matches("<0.4.1", "0.4.1")
    assert version_matches(">=0.8", "0.10") and version_matches(None, None)
    assert not version_matches(">=0.6", None)
