"""Config: defaults < TOML file < SPECCHAT_* env < CLI flags, file discovery, every error path,
the example file, and ``specchat config show | path``.

Every test runs with the SPECCHAT_* environment cleared and the platform config/data dirs pointed at
``tmp_path`` (see ``isolated``), so the developer's own config never leaks in.
"""

from __future__ import annotations

import os
import re
import tomllib
import types
from pathlib import Path

import pytest

from specchat.config import (
    ConfigError,
    NgramSettings,
    SamplingSettings,
    Settings,
    field_paths,
    load_settings,
    locate_config,
    settings_sources,
)
from specchat.engine.drafter_kinds import K_MAX

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "config.example.toml"


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> types.SimpleNamespace:
    """No SPECCHAT_* variables; HOME and the XDG config/data dirs inside tmp_path."""
    for name in list(os.environ):
        if name.upper().startswith("SPECCHAT_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    config_home = tmp_path / "xdg-config"
    data_home = tmp_path / "xdg-data"
    for d in (home, config_home, data_home):
        d.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    default_file = config_home / "specchat" / "config.toml"
    return types.SimpleNamespace(home=home, default_file=default_file, data_home=data_home, tmp=tmp_path)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``specchat.cli.main(argv)``: exit code, stdout, stderr."""
    from specchat.cli import main

    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# -- defaults and discovery -----------------------------------------------------------------------------


def test_defaults_without_any_file_or_env(isolated):
    s = load_settings()
    assert s == Settings()
    assert (s.target, s.draft, s.k, s.auto_k) == ("bundled", "ngram", 3, True)
    assert s.sampling == SamplingSettings(temperature=0.0, top_k=40, top_p=0.95, seed=None)
    assert s.ngram == NgramSettings(min_n=1, max_n=4)
    assert s.threads == (os.cpu_count() or 1)
    assert (s.n_ctx, s.n_predict, s.system_prompt, s.theme, s.keymap, s.data_dir) == (
        4096, 512, "", "specchat-dark", {}, None
    )
    loaded = settings_sources()
    assert not loaded.file_loaded
    assert set(loaded.sources.values()) == {"default"}
    assert loaded.location.path == isolated.default_file


def test_settings_constructor_reads_neither_env_nor_file(isolated, monkeypatch):
    write(isolated.default_file, "k = 7\n")
    monkeypatch.setenv("SPECCHAT_N_CTX", "128")
    assert Settings().k == 3 and Settings().n_ctx == 4096
    assert load_settings().k == 7 and load_settings().n_ctx == 128


def test_default_file_is_read_from_user_config_dir(isolated):
    write(isolated.default_file, 'k = 7\ndraft = "none"\n')
    s = load_settings()
    assert (s.k, s.draft) == (7, "none")


def test_specchat_config_env_then_explicit_path_win(isolated, monkeypatch):
    write(isolated.default_file, "k = 1\n")
    env_file = write(isolated.tmp / "env.toml", "k = 2\n")
    flag_file = write(isolated.tmp / "flag.toml", "k = 4\n")
    assert load_settings().k == 1
    monkeypatch.setenv("SPECCHAT_CONFIG", str(env_file))
    assert load_settings().k == 2
    assert locate_config().origin == "SPECCHAT_CONFIG"
    assert load_settings(str(flag_file)).k == 4
    assert locate_config(str(flag_file)).origin == "--config"


def test_missing_default_file_is_fine_missing_explicit_file_is_not(isolated, monkeypatch):
    assert not isolated.default_file.exists()
    load_settings()
    missing = isolated.tmp / "nope.toml"
    with pytest.raises(ConfigError, match=r"^config error: config file .*nope\.toml not found \(given by --config\)"):
        load_settings(str(missing))
    monkeypatch.setenv("SPECCHAT_CONFIG", str(missing))
    with pytest.raises(ConfigError, match=r"not found \(given by \$SPECCHAT_CONFIG\)"):
        load_settings()


# -- precedence -------------------------------------------------------------------------------------------


def test_precedence_file_env_cli(isolated, monkeypatch):
    path = write(
        isolated.tmp / "c.toml",
        'k = 5\nn_ctx = 1024\ntheme = "file-theme"\n[sampling]\ntemperature = 0.5\ntop_k = 10\n',
    )
    monkeypatch.setenv("SPECCHAT_K", "6")
    monkeypatch.setenv("SPECCHAT_N_CTX", "2048")
    monkeypatch.setenv("SPECCHAT_SAMPLING__TEMPERATURE", "0.7")
    loaded = settings_sources(str(path), overrides={"k": 8, "sampling": {"temperature": 0.9}})
    s = loaded.settings
    assert s.k == 8  # cli > env > file
    assert s.n_ctx == 2048  # env > file
    assert s.theme == "file-theme"  # file > default
    assert s.sampling.temperature == 0.9  # cli > env > file, nested
    assert s.sampling.top_k == 10  # the table merges key by key across layers
    assert s.sampling.top_p == 0.95  # untouched default inside a table someone set
    src = loaded.sources
    assert src[("k",)] == "cli"
    assert src[("n_ctx",)] == "env SPECCHAT_N_CTX"
    assert src[("theme",)] == f"file {path}"
    assert src[("sampling", "temperature")] == "cli"
    assert src[("sampling", "top_k")] == f"file {path}"
    assert src[("sampling", "top_p")] == "default"
    assert src[("target",)] == "default"


def test_overrides_accept_dotted_keys_and_skip_none(isolated):
    s = load_settings(overrides={"sampling.top_p": 0.5, "k": None, "ngram": {"max_n": 6, "min_n": None}})
    assert s.sampling.top_p == 0.5
    assert s.k == 3  # None = flag not given
    assert s.ngram == NgramSettings(min_n=1, max_n=6)


def test_env_names_types_json_tables_and_keymap_merge(isolated, monkeypatch):
    path = write(isolated.tmp / "c.toml", '[keymap]\n"ctrl+k" = "k_up"\n"ctrl+j" = "k_down"\n')
    monkeypatch.setenv("specchat_auto_k", "false")  # names are case-insensitive
    monkeypatch.setenv("SPECCHAT_NGRAM", '{"min_n": 2, "max_n": 3}')
    monkeypatch.setenv("SPECCHAT_KEYMAP", '{"ctrl+j": "stop"}')
    monkeypatch.setenv("SPECCHAT_SAMPLING__SEED", "42")
    monkeypatch.setenv("SPECCHAT_DATA_DIR", str(isolated.tmp / "data"))
    loaded = settings_sources(str(path))
    s = loaded.settings
    assert s.auto_k is False
    assert s.ngram == NgramSettings(min_n=2, max_n=3)
    assert s.keymap == {"ctrl+k": "k_up", "ctrl+j": "stop"}
    assert s.sampling.seed == 42
    assert s.effective_data_dir() == isolated.tmp / "data"
    assert loaded.sources[("keymap", "ctrl+k")] == f"file {path}"
    assert loaded.sources[("keymap", "ctrl+j")] == "env SPECCHAT_KEYMAP"
    assert loaded.sources[("ngram", "min_n")] == "env SPECCHAT_NGRAM"


def test_empty_env_value_unsets_an_optional_setting(isolated, monkeypatch):
    path = write(isolated.tmp / "c.toml", '[sampling]\nseed = 5\n')
    monkeypatch.setenv("SPECCHAT_SAMPLING__SEED", "")
    assert load_settings(str(path)).sampling.seed is None


def test_unknown_top_level_env_vars_are_ignored_and_reported(isolated, monkeypatch):
    monkeypatch.setenv("SPECCHAT_SOMETHING_ELSE", "1")
    loaded = settings_sources()
    assert loaded.settings == Settings()
    assert loaded.ignored_env == ["SPECCHAT_SOMETHING_ELSE"]


def test_data_dir_default_file_and_home_expansion(isolated):
    assert load_settings().effective_data_dir() == isolated.data_home / "specchat"
    assert load_settings().history_path() == isolated.data_home / "specchat" / "history.sqlite3"
    path = write(isolated.tmp / "c.toml", 'data_dir = "~/chats"\n')
    assert load_settings(str(path)).effective_data_dir() == isolated.home / "chats"
    nested = write(isolated.tmp / "conf" / "c.toml", 'data_dir = "data"\n')
    assert load_settings(str(nested)).effective_data_dir() == isolated.tmp / "conf" / "data"  # next to the file


# -- errors -------------------------------------------------------------------------------------------------

#: a K above the largest the engine accepts, whatever K_MAX is
BIG_K = K_MAX + 1

FILE_ERRORS = [
    (f"k = {BIG_K}\n", rf"k = {BIG_K} in {{path}}: must be an integer in 0\.\.{K_MAX}$"),
    ("k = -1\n", rf"k = -1 in {{path}}: must be an integer in 0\.\.{K_MAX}$"),
    ("k = 2.5\n", rf"k = 2\.5 in {{path}}: must be an integer in 0\.\.{K_MAX}$"),
    ("k = true\n", rf"k = true in {{path}}: must be an integer in 0\.\.{K_MAX}$"),
    ('k = "three"\n', rf'k = "three" in {{path}}: must be an integer in 0\.\.{K_MAX}$'),
    ("auto_k = 3\n", r"auto_k = 3 in {path}: must be true or false$"),
    ('repack = "maybe"\n', r'repack = "maybe" in {path}: must be one of "auto", "on", "off"$'),
    ("repack = true\n", r'repack = true in {path}: must be one of "auto", "on", "off"$'),
    ("threads_batch = 0\n", r"threads_batch = 0 in {path}: must be an integer in 1\.\.\d+ \(or unset\)$"),
    (
        "threads = 0\n",
        r"threads = 0 in {path}: must be an integer in 1\.\.\d+ \(at most 4 x the \d+ CPUs here: more threads only "
        r"wait for each other\)$",
    ),
    ("n_ctx = 32\n", r"n_ctx = 32 in {path}: must be an integer >= 64$"),
    ("n_predict = 0\n", r"n_predict = 0 in {path}: must be an integer >= 1$"),
    ('target = ""\n', r'target = "" in {path}: must be a non-empty string$'),
    ("[sampling]\ntemperature = 9\n", r"sampling\.temperature = 9 in {path}: must be a number in 0\.\.5$"),
    ("[sampling]\ntop_p = 0\n", r"sampling\.top_p = 0 in {path}: must be a number in \(0, 1\]$"),
    ("[sampling]\ntop_p = 1.5\n", r"sampling\.top_p = 1\.5 in {path}: must be a number in \(0, 1\]$"),
    (
        "keymap = 3\n",
        (
            r'keymap = 3 in {path}: must be a table of strings, each entry binding-id = "keys" \(Textual\'s form: '
            r'k_up = "f4,alt\+up"\) or "key" = "binding-id" \("alt\+up" = "k_up"\)$'
        ),
    ),
    ("[sampling]\ntop_k = -1\n", r"sampling\.top_k = -1 in {path}: must be an integer >= 0$"),
    ("[sampling]\nseed = -1\n", r"sampling\.seed = -1 in {path}: must be an integer >= 0 \(or unset\)$"),
    ("[ngram]\nmin_n = 5\nmax_n = 2\n", r"\[ngram\] in {path}: min_n \(5\) must not exceed max_n \(2\)$"),
    ("sampling = 5\n", r"sampling = 5 in {path}: must be a table with keys temperature, top_k, top_p, seed$"),
    (
        "[keymap]\n\"ctrl+k\" = 1\n",
        (
            r'keymap\."ctrl\+k" = 1 in {path}: must be a string: an entry is binding-id = "keys" \(Textual\'s form: '
            r'k_up = "f4,alt\+up"\) or "key" = "binding-id" \("alt\+up" = "k_up"\)$'
        ),
    ),
    (  # the other form: a binding id with a non-string value
        "[keymap]\nk_up = [\"f4\"]\n",
        r'keymap\.k_up = \[\'f4\'\] in {path}: must be a string: an entry is binding-id = "keys" ',
    ),
    ("kk = 4\n", r"unknown key 'kk' in {path}: did you mean 'k'\? valid keys are target, draft, k, auto_k, "),
    (
        "[sampling]\ntemprature = 1\n",
        r"unknown key 'sampling\.temprature' in {path}: did you mean 'sampling\.temperature'\? "
        r"valid \[sampling\] keys are temperature, top_k, top_p, seed$",
    ),
    ("k = \n", r"{path}: invalid TOML at line 1, column 5: .+; fix the file$"),
    ("k = 3\n[sampling\ntop_k = 1\n", r"{path}: invalid TOML at line 2, column 10: .+; fix the file$"),
    ("k = 3\nk = 4\n", r"{path}: invalid TOML at line 2, column \d+: .+; fix the file$"),
]


@pytest.mark.parametrize("text,pattern", FILE_ERRORS, ids=[t for t, _ in FILE_ERRORS])
def test_bad_file_values_name_key_file_and_allowed_values(isolated, text, pattern):
    path = write(isolated.tmp / "bad.toml", text)
    with pytest.raises(ConfigError) as info:
        load_settings(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("config error: ")
    assert re.search(pattern.format(path=re.escape(str(path))), message), message


def test_several_bad_values_are_counted_on_one_line(isolated):
    path = write(isolated.tmp / "bad.toml", f"k = {BIG_K}\nthreads = 0\n")
    with pytest.raises(ConfigError, match=rf"^config error: k = {BIG_K} in .*: must be an integer in 0\.\.{K_MAX} \(and 1 more\)$"):
        load_settings(str(path))


def test_file_that_is_not_utf8_or_is_a_directory(isolated):
    path = isolated.tmp / "latin1.toml"
    path.write_bytes(b'k = 3\nsystem_prompt = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=r"latin1\.toml:2: not valid UTF-8"):
        load_settings(str(path))
    with pytest.raises(ConfigError, match="is a directory"):
        load_settings(str(isolated.tmp))


ENV_ERRORS = [
    ({"SPECCHAT_K": str(BIG_K)}, rf"^config error: k = {BIG_K} from environment variable SPECCHAT_K: must be an integer in 0\.\.{K_MAX}$"),
    ({"SPECCHAT_K": "lots"}, r"k = lots from environment variable SPECCHAT_K: must be an integer"),
    ({"SPECCHAT_AUTO_K": "maybe"}, r"auto_k = maybe from environment variable SPECCHAT_AUTO_K: must be true or false$"),
    (
        {"SPECCHAT_SAMPLING__TOPP": "0.5"},
        r"unknown key 'sampling\.topp' from environment variable SPECCHAT_SAMPLING__TOPP: did you mean 'sampling\.top_p'",
    ),
    ({"SPECCHAT_SAMPLING": "{not json"}, r"SPECCHAT_SAMPLING is not a JSON object"),
    ({"SPECCHAT_KEYMAP": "[1, 2]"}, r"SPECCHAT_KEYMAP must be a JSON object"),
    ({"SPECCHAT_K__MAX": "3"}, r"environment variable SPECCHAT_K__MAX: k is not a table"),
    ({"SPECCHAT_SAMPLING__SEED__X": "3"}, r"SPECCHAT_SAMPLING__SEED__X nests too deep"),
]


@pytest.mark.parametrize("env,pattern", ENV_ERRORS, ids=[next(iter(e)) for e, _ in ENV_ERRORS])
def test_bad_env_values_name_the_variable(isolated, monkeypatch, env, pattern):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "\n" not in str(info.value)
    assert re.search(pattern, str(info.value)), str(info.value)


def test_error_names_the_layer_that_supplied_the_bad_value(isolated, monkeypatch):
    path = write(isolated.tmp / "c.toml", f"k = {BIG_K}\n")
    monkeypatch.setenv("SPECCHAT_K", str(BIG_K + 1))
    with pytest.raises(ConfigError, match=rf"k = {BIG_K + 1} from environment variable SPECCHAT_K"):
        load_settings(str(path))
    with pytest.raises(ConfigError, match=rf"^config error: k = 99 from the command line: must be an integer in 0\.\.{K_MAX}$"):
        load_settings(str(path), overrides={"k": 99})
    monkeypatch.delenv("SPECCHAT_K")
    # a good env value hides the bad file value: the effective value is what gets validated
    monkeypatch.setenv("SPECCHAT_K", "2")
    assert load_settings(str(path)).k == 2


# -- the example file -----------------------------------------------------------------------------------


def _documented_paths(text: str) -> set[tuple[str, ...]]:
    """Keys set or shown commented-out (``# key = value``) in the example, with their [table]."""
    paths: set[tuple[str, ...]] = set()
    table: tuple[str, ...] = ()
    for line in text.splitlines():
        header = re.match(r"^\[([A-Za-z0-9_.]+)\]\s*$", line)
        if header:
            table = tuple(header.group(1).split("."))
            paths.add(table)
            continue
        assignment = re.match(r'^(?:#\s*)?("?[A-Za-z0-9_+\-<>]+"?)\s*=\s*\S', line)
        if assignment:
            paths.add(table + (assignment.group(1).strip('"'),))
    return paths


def test_example_file_is_valid_and_documents_every_field_with_its_default(isolated):
    text = EXAMPLE.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    loaded = load_settings(str(EXAMPLE))  # valid, nothing unknown
    defaults = Settings()
    # every active value is the default
    for key, value in data.items():
        if isinstance(value, dict) and key != "keymap":
            for sub, v in value.items():
                assert getattr(getattr(defaults, key), sub) == v, f"{key}.{sub}"
        else:
            assert getattr(defaults, key) == value, key
    assert loaded.model_dump(exclude={"threads"}) == defaults.model_dump(exclude={"threads"})
    # every field of the model (recursively) appears, set or commented out
    documented = _documented_paths(text)
    missing = [".".join(p) for p in field_paths() if p not in documented]
    assert not missing, f"config.example.toml does not document: {missing}"
    # and nothing documented is unknown to the model
    known = set(field_paths()) | {("sampling",), ("ngram",), ("suffix",)}
    unknown = [p for p in documented if p not in known and p[0] != "keymap"]
    assert not unknown, f"config.example.toml documents unknown keys: {unknown}"


def test_example_file_lists_every_binding_id_and_both_keymap_forms():
    """The [keymap] comments list each binding id of the app with its default keys, and the commented-out
    examples (one ``id = "keys"``, one ``"key" = "id"``) resolve without problems."""
    from specchat.tui.keys import ALL_SPECS, resolve_keymap

    keymap_part = EXAMPLE.read_text(encoding="utf-8").split("\n[keymap]\n", 1)[1]
    listed = re.findall(r"^#   ([a-z_]+) +(\S+) +\S", keymap_part, re.MULTILINE)
    assert dict(listed) == {spec.id: spec.keys for spec in ALL_SPECS.values()}  # the race's and tour's too
    assert len(listed) == len(dict(listed))
    examples = [line.removeprefix("# ") for line in keymap_part.splitlines() if re.match(r'^# \S+ = "', line)]
    entries = tomllib.loads("\n".join(examples))
    resolved, problems = resolve_keymap(entries)
    assert not problems
    assert resolved == {"k_up": "f4,alt+up", "k_down": "alt+down"}  # binding-id = keys, and key = binding-id


def test_field_paths_walks_nested_models():
    paths = field_paths()
    assert ("sampling", "temperature") in paths and ("ngram", "max_n") in paths and ("keymap",) in paths
    assert ("sampling",) not in paths
    assert ("suffix", "exclude") in paths
    assert len(paths) == len(set(paths)) == 26


# -- specchat config show / path ----------------------------------------------------------------------------


def test_config_show_prints_values_and_sources_as_reloadable_toml(isolated, monkeypatch, capsys):
    path = write(isolated.tmp / "c.toml", 'draft = "none"\n[sampling]\ntop_k = 7\n[keymap]\n"ctrl+k" = "k_up"\n')
    monkeypatch.setenv("SPECCHAT_K", "5")
    code, out, err = run_cli(["--config", str(path), "config", "show"], monkeypatch, capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"# config file: {path} (given by --config; loaded)"

    def line_for(key: str) -> str:
        (found,) = [ln for ln in lines if ln.startswith(key + " = ") or ln.startswith(f"# {key} is")]
        return found

    assert re.fullmatch(r'draft = "none"\s+# file ' + re.escape(str(path)), line_for("draft"))
    assert re.fullmatch(r"k = 5\s+# env SPECCHAT_K", line_for("k"))
    assert re.fullmatch(r"sampling\.top_k = 7\s+# file .*", line_for("sampling.top_k"))
    assert re.fullmatch(r'keymap\."ctrl\+k" = "k_up"\s+# file .*', line_for('keymap."ctrl+k"'))
    assert re.fullmatch(r"auto_k = true\s+# default", line_for("auto_k"))
    assert re.fullmatch(r"# sampling\.seed is unset\s+# default", line_for("sampling.seed"))
    # what it prints is TOML that loads back to the same settings
    reloaded = write(isolated.tmp / "shown.toml", out)
    monkeypatch.delenv("SPECCHAT_K")
    assert load_settings(str(reloaded)) == load_settings(str(path), overrides={"k": 5})


def test_config_show_also_takes_config_after_the_action(isolated, monkeypatch, capsys):
    path = write(isolated.tmp / "c.toml", "k = 9\n")
    code, out, _ = run_cli(["config", "show", "--config", str(path)], monkeypatch, capsys)
    assert code == 0 and re.search(r"^k = 9\s+# file ", out, re.M)


def test_config_show_with_a_bad_file_is_one_line_exit_2(isolated, monkeypatch, capsys):
    path = write(isolated.tmp / "c.toml", f"k = {BIG_K}\n")
    code, out, err = run_cli(["--config", str(path), "config", "show"], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert err == f"specchat: error: config error: k = {BIG_K} in {path}: must be an integer in 0..{K_MAX}\n"


def test_config_show_with_malformed_toml_is_one_line_exit_2(isolated, monkeypatch, capsys):
    write(isolated.default_file, "[sampling\n")
    code, out, err = run_cli(["config", "show"], monkeypatch, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert f"{isolated.default_file}: invalid TOML at line 1, column 10" in err


def test_config_path_reports_location_and_existence(isolated, monkeypatch, capsys):
    code, out, err = run_cli(["config", "path"], monkeypatch, capsys)
    assert code == 0 and out == f"{isolated.default_file}\n"
    assert "the user config dir" in err and "a missing file is fine" in err
    write(isolated.default_file, "")
    code, out, err = run_cli(["config", "path"], monkeypatch, capsys)
    assert out == f"{isolated.default_file}\n" and "exists" in err
    other = isolated.tmp / "other.toml"
    monkeypatch.setenv("SPECCHAT_CONFIG", str(other))
    code, out, err = run_cli(["config", "path"], monkeypatch, capsys)
    assert out == f"{other}\n" and "$SPECCHAT_CONFIG" in err and "does not exist" in err


def test_keymap_description_and_errors_name_both_forms_the_app_accepts():
    from specchat.config import KEYMAP_FORMS, Settings, allowed_values
    from specchat.tui.keys import resolve_keymap

    assert KEYMAP_FORMS in Settings.model_fields["keymap"].description
    assert KEYMAP_FORMS in allowed_values(("keymap",)) and KEYMAP_FORMS in allowed_values(("keymap", "ctrl+k"))
    # the examples the text gives are real: each, written in a config file, is accepted by the app
    examples = re.findall(r'\((?:Textual\'s form: )?(.+? = ".+?")\)', KEYMAP_FORMS)
    assert len(examples) == 2
    for example in examples:
        keymap, problems = resolve_keymap(tomllib.loads(example))
        assert problems == [] and set(keymap) == {"k_up"}, example


# -- a ~user that names no user: one line, exit 2, never a traceback --------------------------------------


def test_config_path_with_an_unknown_user_is_one_line_exit_2(isolated, monkeypatch, capsys):
    code, _, err = run_cli(["--config", "~nosuchuser-specchat/c.toml", "config", "path"], monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1
    assert "~nosuchuser-specchat/c.toml: the home directory of ~nosuchuser-specchat is not known" in err
    monkeypatch.setenv("SPECCHAT_CONFIG", "~nosuchuser-specchat/c.toml")
    with pytest.raises(ConfigError, match=r"is not known; give the path in full \(\$SPECCHAT_CONFIG\)$"):
        load_settings()


def test_data_dir_with_an_unknown_user_names_the_key_and_where(isolated, monkeypatch):
    path = write(isolated.tmp / "c.toml", 'data_dir = "~nosuchuser-specchat/chats"\n')
    with pytest.raises(ConfigError, match=rf"^config error: data_dir = \S+ in {re.escape(str(path))}: .*is not known"):
        load_settings(str(path))
    with pytest.raises(ConfigError, match="from the command line: .*is not known"):
        load_settings(overrides={"data_dir": "~nosuchuser-specchat/x"})
