import textwrap

import pytest

from autotune.errors import SearchSpaceError, UnknownModelError
from autotune.spec.space import find_space_file, known_models, load_space

GOOD = """
[model]
name = "m"
target = "m-{quant}.gguf"
quants = ["Q4_K_M", "Q8_0"]

[drafts.draft-simple]
file = "small-{quant}.gguf"
quants = ["Q8_0"]

[spec_types.ngram-simple]
ngram_simple_size_n = [1, 4]
ngram_simple_size_m = 16

[spec_types.draft-simple]
draft_p_min = [0.0, 0.9, 0.1]
"""


def write(tmp_path, text):
    path = tmp_path / "space.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_every_bundled_space_loads():
    assert "gemma3-270m" in known_models()
    for name in known_models():
        space = load_space(find_space_file(name))
        assert space.model.name == name
        assert space.spec_types


def test_ranges_fixed_values_and_steps(tmp_path):
    space = load_space(write(tmp_path, GOOD))
    assert space.model.targets.patterns() == [("Q4_K_M", "m-Q4_K_M.gguf"), ("Q8_0", "m-Q8_0.gguf")]
    assert [p.patterns() for p in space.draft_files("draft-simple")] == [[("Q8_0", "small-Q8_0.gguf")]]
    size_n, size_m = space.spec_types["ngram-simple"]
    assert (size_n.low, size_n.high, size_n.is_fixed) == (1, 4, False)
    assert size_m.is_fixed and size_m.low == 16
    (p_min,) = space.spec_types["draft-simple"]
    assert (p_min.low, p_min.high, p_min.step) == (0.0, 0.9, 0.1)


def test_a_draft_type_may_take_drafts_from_several_tables(tmp_path):
    two = (
        GOOD.replace("[drafts.draft-simple]", "[[drafts.draft-simple]]")
        + """
[[drafts.draft-simple]]
hf = "org/bigger-draft"
file = "bigger-{quant}.gguf"
quants = ["Q8_0", "Q4_K_M"]
"""
    )
    space = load_space(write(tmp_path, two))
    small, bigger = space.draft_files("draft-simple")
    assert small.patterns() == [("Q8_0", "small-Q8_0.gguf")] and small.source is None
    assert bigger.source.repo == "org/bigger-draft"
    assert bigger.patterns() == [("Q8_0", "bigger-Q8_0.gguf"), ("Q4_K_M", "bigger-Q4_K_M.gguf")]
    with pytest.raises(SearchSpaceError, match=r"drafts\.draft-simple\[1\]\.quants: with hf"):
        load_space(write(tmp_path, two.replace('quants = ["Q8_0", "Q4_K_M"]', "")))


@pytest.mark.parametrize(
    "old, new, key, problem",
    [
        ('quants = ["Q4_K_M", "Q8_0"]', 'colour = "red"', "model.colour", "unknown key"),
        ('quants = ["Q4_K_M", "Q8_0"]', 'context_size = "big"', "model.context_size", "expected int"),
        ('quants = ["Q4_K_M", "Q8_0"]', 'quants = "Q4"', "model.quants", "expected list"),
        ("[drafts.draft-simple]", "[drafts.ngram-simple]", "drafts.ngram-simple", "not a draft spec type"),
        ('file = "small-{quant}.gguf"', 'path = "small.gguf"', "drafts.draft-simple.path", "unknown key"),
        ('name = "m"\n', "", "model.name", "required"),
        ("[1, 4]", "[4, 1]", "spec_types.ngram-simple.ngram_simple_size_n", "empty range"),
        ("[1, 4]", "[1.5, 4]", "spec_types.ngram-simple.ngram_simple_size_n", "expected int"),
        ("ngram_simple_size_m = 16", "draft_n_max = 3", "spec_types.ngram-simple.draft_n_max", "unknown parameter"),
        ("[spec_types.draft-simple]", "[spec_types.draft-magic]", "spec_types.draft-magic", "unknown spec type"),
        ("[0.0, 0.9, 0.1]", "[0.0, 0.9, -0.1]", "spec_types.draft-simple.draft_p_min", "step must be positive"),
    ],
)
def test_malformed_file_names_file_key_and_problem(tmp_path, old, new, key, problem):
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(SearchSpaceError) as info:
        load_space(path)
    message = str(info.value)
    assert str(path) in message and key in message and problem in message


def test_invalid_toml_and_unknown_model(tmp_path):
    with pytest.raises(SearchSpaceError, match="not valid TOML"):
        load_space(write(tmp_path, "[model\nname="))
    with pytest.raises(UnknownModelError, match="gemma3-270m"):
        find_space_file("no-such-model")


def test_draft_spec_type_without_draft_files_is_refused(tmp_path):
    path = write(tmp_path, GOOD.replace("[drafts.draft-simple]", "[drafts.draft-dspark]"))
    with pytest.raises(SearchSpaceError, match="spec_types.draft-simple: needs a draft file"):
        load_space(path)
