import shlex
from pathlib import Path

import pytest

from autotune.spec.command import ServerCommand, format_command, server_argv
from autotune.spec.config import SpecConfig
from autotune.spec.sampling import Sampling

TARGET = Path("/models/Qwen3 8B-Q4_K_M.gguf")


def test_baseline_runs_all_layers_on_gpu_with_flash_attention_greedily():
    argv = server_argv(SpecConfig(target=TARGET), context_size=4096)
    # greedy is not llama-server's default (temperature 0.8), so the command says so
    assert argv == [
        "llama-server",
        "-m",
        str(TARGET),
        "-c",
        "4096",
        "-np",
        "1",
        "-ngl",
        "all",
        "-fa",
        "on",
        "--temp",
        "0",
    ]
    assert server_argv(SpecConfig(target=TARGET), context_size=4096, threads=6)[-4:-2] == ["-t", "6"]


def test_sampling_settings_that_differ_from_llama_servers_defaults_are_in_the_command():
    assert Sampling(temperature=0.8).server_flags() == ["--seed", "0"]  # all defaults: only the seed, which repeats
    flags = Sampling(temperature=0.7, top_k=20, top_p=0.9, min_p=0.0, seed=5).server_flags()
    assert flags == ["--temp", "0.7", "--top-k", "20", "--top-p", "0.9", "--min-p", "0", "--seed", "5"]
    command = ServerCommand(2048, ("--jinja",), "/opt/bin/llama-server", 4, Sampling(temperature=0.7, seed=5))
    argv = command.argv(SpecConfig(target=TARGET))
    assert argv[0] == "/opt/bin/llama-server" and argv[argv.index("--temp") + 1] == "0.7" and argv[-1] == "--jinja"
    assert ServerCommand.from_dict(command.as_dict()) == command


def test_draft_sampling_is_spelled_as_llama_server_takes_it():
    config = SpecConfig(
        target=TARGET, spec_type="draft-simple", draft=Path("/m/d.gguf"), params={"draft_sampling": "probabilistic"}
    )
    argv = server_argv(config, context_size=4096)
    assert argv[argv.index("--spec-draft-sampling") + 1] == "probabilistic"


def test_draft_config_spells_every_set_parameter_and_the_draft_model():
    config = SpecConfig(
        target=TARGET,
        spec_type="draft-simple",
        draft=Path("/m/d.gguf"),
        params={"draft_n_max": 5, "draft_p_min": 0.5},
    )
    argv = server_argv(config, context_size=2048, base_flags=["--jinja"], binary="/opt/llama-server")
    assert argv[0] == "/opt/llama-server"
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("-md") + 1] == "/m/d.gguf"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "5"
    assert argv[argv.index("--spec-draft-p-min") + 1] == "0.5"
    assert "--jinja" in argv
    assert "--spec-draft-n-min" not in argv  # unset parameters keep llama.cpp's default


def test_ngram_flags_and_quoting_round_trip():
    config = SpecConfig(target=TARGET, spec_type="ngram-simple", params={"ngram_simple_size_n": 3})
    argv = server_argv(config, context_size=4096)
    assert argv[-2:] == ["--spec-ngram-simple-size-n", "3"]
    assert shlex.split(format_command(argv)) == argv


@pytest.mark.parametrize(
    "kwargs",
    [
        {"spec_type": "draft-fancy"},
        {"spec_type": "draft-simple"},  # needs a draft
        {"spec_type": "ngram-simple", "draft": Path("/d.gguf")},
        {"spec_type": "ngram-simple", "params": {"draft_n_max": 3}},
    ],
)
def test_spec_config_refuses_inconsistent_settings(kwargs):
    with pytest.raises(ValueError):
        SpecConfig(target=TARGET, **kwargs)


def test_value_falls_back_to_llama_cpp_default():
    config = SpecConfig(target=TARGET, spec_type="ngram-simple", params={"ngram_simple_size_n": 2})
    assert config.value("ngram_simple_size_n") == 2
    assert config.value("ngram_simple_size_m") == 48


def test_pctree_switch_and_its_parameters():
    draft = Path("/m/dspark.gguf")
    on = SpecConfig(TARGET, "draft-dspark", draft, {"dspark_pctree": True, "dspark_pctree_k": 3, "dspark_pctree_n": 16})
    argv = server_argv(on, context_size=4096)
    assert "--spec-dspark-pctree" in argv
    assert argv[argv.index("--spec-dspark-pctree-k") + 1] == "3"
    assert argv[argv.index("--spec-dspark-pctree-n") + 1] == "16"
    off = SpecConfig(TARGET, "draft-dspark", draft, {"dspark_pctree": False, "dspark_pctree_k": 3})
    assert not [a for a in server_argv(off, context_size=4096) if "pctree" in a]
    assert "pctree=on" in on.describe()


def test_on_a_binary_that_speculates_by_default_a_command_turns_off_what_it_does_not_run():
    on = ("ngram-mod",)  # llama.cpp PR #28391's default; `--spec-type` adds to it there
    plain = server_argv(SpecConfig(target=TARGET), context_size=4096, spec_types_on=on)
    assert plain[-2:] == ["--no-spec-type", "ngram-mod"]
    combined = SpecConfig(TARGET, "ngram-mod,draft-simple", Path("/m/d.gguf"))
    argv = server_argv(combined, context_size=4096, spec_types_on=on)
    assert "--no-spec-type" not in argv and argv[argv.index("--spec-type") + 1] == "ngram-mod,draft-simple"
    default = SpecConfig(TARGET, "ngram-mod", params={"ngram_mod_n_match": 24, "ngram_mod_n_max": 64})
    assert server_argv(default, context_size=4096, spec_types_on=on) == plain[:-2]  # what it runs anyway
