"""Tests for profile loading, validation and E2E sampling."""
from __future__ import annotations

import numpy as np
import pytest

from calf_core.errors import ConfigError
from calf_core.profiles import available_profiles, load_profile, profile_from_dict, sample_e2e

PROFILES = ["sim_clean", "delay_only", "full_net_aware", "real_eth", "wifi_normal", "wifi_degraded"]
DEPLOYMENT = ["real_eth", "wifi_normal", "wifi_degraded"]
TRACE = {"model": "trace_replay", "delays_ms": [50.0, 10.0]}
TARGETS_MS = {  # (p50, p95) E2E: the paper's Table 9; full_net_aware's N(25 ms, 28 ms) + 5 % loss each way, sampled
    "real_eth": (8.7, 14.3),
    "wifi_normal": (34.5, 68.2),
    "wifi_degraded": (82.1, 152.7),
    "full_net_aware": (67.0, 124.0),
}


@pytest.mark.parametrize("name", PROFILES)
def test_profile_loads(name):
    profile = load_profile(name)
    assert profile.name == name
    assert name in available_profiles()
    assert profile.description


@pytest.mark.parametrize("name", sorted(TARGETS_MS))
def test_sampled_e2e_matches_targets(name):
    p50, p95 = TARGETS_MS[name]
    stats = sample_e2e(load_profile(name), n=20000, seed=1)
    assert stats.p50_ms == pytest.approx(p50, rel=0.1)
    assert stats.p95_ms == pytest.approx(p95, rel=0.1)


@pytest.mark.parametrize("name", DEPLOYMENT)
def test_deployment_profiles_use_other_model_families(name):
    profile = load_profile(name)
    models = {spec["model"] for spec in profile.uplink + profile.downlink}
    assert models.isdisjoint({"gaussian_delay", "bernoulli_loss"})
    assert "gilbert_elliott" in models
    assert models & {"lognormal_delay", "pareto_delay", "empirical_delay"}
    assert profile.reorder == (False, False)


def test_clean_and_fixed_profiles():
    assert sample_e2e(load_profile("sim_clean"), 100, 0).all_messages[:3] == (0.0, 0.0, 0.0)
    stats = sample_e2e(load_profile("delay_only"), 100, 0)
    assert (stats.p50_ms, stats.p95_ms) == pytest.approx((51.0, 51.0))
    assert stats.round_trip_loss == 0.0


def test_full_net_aware_loses_about_ten_percent_of_round_trips():
    stats = sample_e2e(load_profile("full_net_aware"), 20000, 0)
    assert stats.obs_loss == pytest.approx(0.05, abs=0.005)
    assert stats.round_trip_loss == pytest.approx(1 - 0.95**2, abs=0.01)


def test_sample_e2e_is_deterministic_under_seed():
    profile = load_profile("wifi_normal")
    assert sample_e2e(profile, 2000, 5) == sample_e2e(profile, 2000, 5)
    assert sample_e2e(profile, 2000, 5) != sample_e2e(profile, 2000, 6)


def test_make_links_is_seeded_and_directions_are_independent():
    profile = profile_from_dict(
        {"uplink": [{"model": "lognormal_delay", "median_ms": 5, "sigma": 1}], "downlink": "same"}, "x"
    )

    def arrivals(seed: int) -> tuple[list, list]:
        uplink, downlink = profile.make_links(np.random.default_rng(seed))
        return [uplink.transmit(0.0) for _ in range(5)], [downlink.transmit(0.0) for _ in range(5)]

    up, down = arrivals(0)
    assert (up, down) == arrivals(0)
    assert up != down


def test_load_profile_from_path_and_defaults(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text("uplink:\n  - {model: fixed_delay, latency_ms: 4}\ndownlink: []\n")
    profile = load_profile(str(path))
    assert (profile.name, profile.compute_ms, profile.reorder, profile.downlink) == ("lab", 1.0, (False, False), ())
    assert profile.defaults == ("name", "description", "compute_ms", "reorder")


def test_reorder_is_per_direction():
    profile = profile_from_dict({"reorder": {"uplink": True}, "uplink": [TRACE], "downlink": "same"}, "x")
    assert profile.reorder == (True, False)
    uplink, downlink = profile.make_links(np.random.default_rng(0))
    assert [uplink.transmit(t)[0] for t in (0.0, 0.02)] == pytest.approx([0.05, 0.03])
    assert [downlink.transmit(t)[0] for t in (0.0, 0.02)] == pytest.approx([0.05, 0.05])


def test_shipped_profiles_say_how_they_order_messages():
    for name in available_profiles():
        assert "reorder" not in load_profile(name).defaults, name


def test_acted_on_e2e_drops_the_overtaken_observations():
    stats = sample_e2e(load_profile("ablation_jitter"), 20000, 0)  # N(25, 40) each way, reordering
    assert stats.acted_on.n < 0.8 * stats.all_messages.n
    assert stats.acted_on.p95_ms < 0.9 * stats.all_messages.p95_ms
    fixed = sample_e2e(load_profile("delay_only"), 2000, 0)
    assert fixed.acted_on == fixed.all_messages


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"uplink": [], "downlink": [], "latency": 5}, "unknown key 'latency'"),
        ({"uplink": []}, "profile 'bad': missing required key 'downlink'"),
        ({"uplink": [{"model": "fixed_delay", "latency_ms": -5}], "downlink": "same"},
         "profile 'bad' uplink[0]: fixed_delay: latency_ms must be in [0, 60000] ms, got -5"),
        ({"uplink": [{"model": "stall", "duration_ms": 100, "perod_ms": 400}], "downlink": "same"},
         "profile 'bad' uplink[0]: stall: unknown key 'perod_ms'"),
        ({"uplink": [], "downlink": [{"model": "gaussian_delay", "mean_ms": True, "std_ms": 1}]},
         "profile 'bad' downlink[0]: gaussian_delay: mean_ms must be a finite number (ms), got True"),
        ({"uplink": [], "downlink": [{"model": "bernoulli_loss", "p": 1.2}]}, "downlink[0]: bernoulli_loss: p must be in [0, 1], got 1.2"),
        ({"uplink": [{"model": "teleport"}], "downlink": []}, "unknown model 'teleport'"),
        ({"uplink": [{"model": "bandwidth", "rate_kbps": 0, "queue_packets": 5}], "downlink": []}, "rate_kbps must be in [1, 1e+08] kbit/s, got 0"),
        ({"uplink": [], "downlink": [], "compute_ms": -1}, "compute_ms must be in [0, 60000] ms, got -1"),
        ({"uplink": [], "downlink": [], "reorder": "yes"}, "reorder must be true, false or {uplink: bool, downlink: bool}, got 'yes'"),
        ({"uplink": [], "downlink": [], "reorder": {"uplink": 1}}, "profile 'bad': reorder: uplink must be true or false, got 1"),
        ({"uplink": [], "downlink": [], "name": 5}, "profile 'bad': name must be a string, got 5"),
        ({"uplink": {"model": "fixed_delay"}, "downlink": []}, "uplink must be a list of at most 32 stage specs"),
    ],
)
def test_invalid_profiles_raise_one_line_config_error(data, message):
    with pytest.raises(ConfigError) as info:
        profile_from_dict(data, "bad")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_yaml_file_with_bad_key(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("uplink: []\ndownlink: same\nreoder: false\n")
    with pytest.raises(ConfigError, match="profile 'typo': unknown key 'reoder'"):
        load_profile(str(path))


def test_unknown_profile_name_lists_available():
    with pytest.raises(ConfigError, match=r"unknown network profile 'wifi_perfect' \(available: .*wifi_normal"):
        load_profile("wifi_perfect")
