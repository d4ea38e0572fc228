from autotune.measure.lossless import TieEvidence, compare_outputs, first_difference
from autotune.measure.measurement import GenerationResult, Measurement


def result(n_generated, decode_ms, category="qa", drafted=0, accepted=0, steps=0):
    return GenerationResult(
        "p",
        category,
        n_prompt=10,
        prompt_ms=20.0,
        n_generated=n_generated,
        decode_ms=decode_ms,
        n_drafted=drafted,
        n_accepted=accepted,
        n_verify_steps=steps,
    )


def test_decode_rate_excludes_the_first_token():
    assert result(11, 100.0).decode_tok_s == 100.0


def test_mix_rate_sums_tokens_and_times_instead_of_averaging_rates():
    mix = Measurement([result(101, 1000.0), result(11, 1000.0)])
    assert mix.mix_tok_s == 55.0  # mean of rates would be 55 too only by accident: check another split
    mix = Measurement([result(101, 1000.0), result(11, 100.0)])
    assert round(mix.mix_tok_s, 3) == round(110 / 1.1, 3)
    assert mix.prompt_tok_s == 500.0


def test_acceptance_and_mean_accepted_length():
    m = Measurement([result(20, 100.0, drafted=12, accepted=9, steps=4), result(20, 100.0, "rag", 4, 1, 2)])
    assert m.acceptance == 10 / 16
    assert m.mean_accepted_length == 1 + 10 / 6
    assert set(m.per_category()) == {"qa", "rag"}
    assert Measurement([result(5, 10.0)]).acceptance is None


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2


def test_a_flip_at_a_near_tie_is_lossless_and_a_clear_preference_is_not():
    asked = []

    def margins(index, generated, a, b):
        asked.append((index, list(generated), a, b))
        return TieEvidence(0.03, -0.2, 0.01) if index == 1 else TieEvidence(2.5, 2.4, 0.2)

    verdicts = compare_outputs(["p0", "p1", "p2"], [[1, 2], [1, 2, 3], [4, 5]], [[1, 2], [1, 2, 9], [4, 6]], margins)
    assert [v.verdict for v in verdicts] == ["same", "tie", "differs"]
    assert asked[0] == (1, [1, 2], 3, 9)
    assert not verdicts[2].lossless and verdicts[1].lossless


def test_noise_widens_the_tie_band():
    assert TieEvidence(0.18, 0.3, noise_rms=0.2).is_tie()
    assert not TieEvidence(0.18, 0.3, noise_rms=0.01).is_tie()
