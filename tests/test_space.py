import textwrap

import pytest

from autotune.errors import SearchSpaceError, UnknownModelError
from autotune.space import find_space_file, known_models, load_space

GOOD = """
[model]
name = "m"
target = "m-*.gguf"

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
    size_n, size_m = space.spec_types["ngram-simple"]
    assert (size_n.low, size_n.high, size_n.is_fixed) == (1, 4, False)
    assert size_m.is_fixed and size_m.low == 16
    (p_min,) = space.spec_types["draft-simple"]
    assert (p_min.low, p_min.high, p_min.step) == (0.0, 0.9, 0.1)


@pytest.mark.parametrize(
    "old, new, key, problem",
    [
        ('target = "m-*.gguf"', 'target = "m-*.gguf"\ncolour = "red"', "model.colour", "unknown key"),
        ('target = "m-*.gguf"', 'target = "m-*.gguf"\ncontext_size = "big"', "model.context_size", "expected int"),
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
