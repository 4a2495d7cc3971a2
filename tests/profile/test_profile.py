import pytest

from harness.errors import LayerbenchError
from harness.profile.loading import builtin_profiles, load_profile


def test_builtin_profiles_load():
    assert {"quick", "cpu", "default"} <= set(builtin_profiles())
    q = load_profile("quick")
    assert q.concurrency == [1, 2, 16] and q.output_tokens == 64 and q.requests == 30 and q.engine.step is not None
    assert load_profile("default").requests_for(64) == 128  # 2 per slot beats 32 at c=64


def test_unknown_profile_names_the_choices():
    with pytest.raises(LayerbenchError, match="unknown profile 'nope'.*quick"):
        load_profile("nope")


def test_malformed_profile_names_the_field(write_profile):
    p = write_profile(concurrency=[1, -4], output_tokens=32)
    with pytest.raises(LayerbenchError, match="field 'concurrency'"):
        load_profile(str(p))
    p = write_profile(slo={"ttft_s": "fast"})
    with pytest.raises(LayerbenchError, match=r"field 'slo\.ttft_s'"):
        load_profile(str(p))
    p = write_profile(concurency=[1])  # a typo is not silently ignored
    with pytest.raises(LayerbenchError, match="field 'concurency'"):
        load_profile(str(p))


def test_profile_not_a_mapping(tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(LayerbenchError, match="mapping"):
        load_profile(str(p))


def test_levels_too_short_are_refused_naming_the_fields(write_profile):
    p = write_profile(concurrency=[1, 4], requests=12, requests_per_concurrency=0)
    with pytest.raises(LayerbenchError, match="levels \\[1, 4\\].*`requests` or `requests_per_concurrency`"):
        load_profile(str(p))
    p = write_profile(scrape="interval", scrape_interval_s=2.0, min_duration_s=1.0)
    with pytest.raises(LayerbenchError, match="`min_duration_s`.*`scrape_interval_s`"):
        load_profile(str(p))
    assert load_profile("cpu").max_pairs == 8 and load_profile("cpu").stopping == "sequential"
    assert load_profile("quick").scrape == "boundary" and load_profile("quick-lognormal").stopping == "fixed"
