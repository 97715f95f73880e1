from pathlib import Path

import pytest

from ragvps.config import Settings, load_settings
from ragvps.errors import ConfigError


def test_layers_in_order(tmp_path: Path):
    toml = tmp_path / "ragvps.toml"
    toml.write_text('[ragvps]\nchunk_size = 300\nlanguage = "german"\nembedder = "ollama"\n')
    env = {"RAGVPS_CHUNK_SIZE": "250", "RAGVPS_DATA_DIR": "/srv/rag"}
    s = load_settings(toml, env=env, chunk_size=None, language="french")
    assert s.chunk.size == 250  # env beats file
    assert s.search.language == "french"  # flag beats file
    assert s.embed.kind == "ollama"  # file beats default
    assert s.database.data_dir == Path("/srv/rag")
    assert s.search.top_k == Settings().search.top_k
    with pytest.raises(AttributeError):
        s.search.top_k = 3  # type: ignore[misc]


def test_ollama_host_is_honoured(tmp_path: Path):
    none = tmp_path / "empty.toml"
    none.write_text("")
    assert load_settings(env={"RAGVPS_CONFIG": str(none)}).embed.ollama_url == "http://127.0.0.1:11434"
    assert load_settings(env={"OLLAMA_HOST": "0.0.0.0"}).embed.ollama_url == "http://127.0.0.1:11434"
    assert load_settings(env={"OLLAMA_HOST": "gpu:8080"}).embed.ollama_url == "http://gpu:8080"
    env = {"OLLAMA_HOST": "gpu:8080", "RAGVPS_OLLAMA_URL": "http://other:11434"}
    assert load_settings(env=env).embed.ollama_url == "http://other:11434"


def test_errors_name_the_setting_and_its_origin(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"chunk_size='big' from environment variable RAGVPS_CHUNK_SIZE"):
        load_settings(env={"RAGVPS_CHUNK_SIZE": "big"})
    toml = tmp_path / "ragvps.toml"
    toml.write_text("[ragvps]\nchunk_sise = 3\n")
    with pytest.raises(ConfigError, match="unknown setting 'chunk_sise'"):
        load_settings(toml, env={})
    with pytest.raises(ConfigError, match="chunk_overlap=200 must be smaller than chunk_size=100"):
        load_settings(env={}, chunk_size=100, chunk_overlap=200)


def test_a_value_out_of_range_names_where_it_came_from(tmp_path: Path):
    with pytest.raises(
        ConfigError,
        match=r"hnsw_m=500 is out of range: use 2 to 100 \(from environment variable "
        r"RAGVPS_HNSW_M\)",
    ):
        load_settings(env={"RAGVPS_HNSW_M": "500"})
    toml = tmp_path / "ragvps.toml"
    toml.write_text("[ragvps]\nhnsw_m = 1\n")
    with pytest.raises(ConfigError, match=rf"hnsw_m=1 is out of range: use 2 to 100 \(from config file {toml}\)"):
        load_settings(toml, env={})
    with pytest.raises(ConfigError, match=r"hnsw_m=0 is out of range.*\(from option --hnsw-m\)"):
        load_settings(toml, env={}, hnsw_m=0)
    with pytest.raises(
        ConfigError,
        match=r"chunk_overlap=200 must be smaller than chunk_size=100 \(chunk_overlap "
        r"from option --chunk-overlap; chunk_size from environment variable",
    ):
        load_settings(env={"RAGVPS_CHUNK_SIZE": "100"}, chunk_overlap=200)


def test_top_k_is_bounded_by_max_k_the_one_limit_the_server_holds_too():
    with pytest.raises(ConfigError, match=r"top_k=101 is out of range: use 1 to 100, the setting max_k") as raised:
        load_settings(env={}, top_k=101)
    assert raised.value.settings == ("top_k", "max_k")
    assert load_settings(env={"RAGVPS_MAX_K": "500"}, top_k=101).search.top_k == 101


def test_every_setting_declares_its_facts_beside_its_field():
    from dataclasses import fields

    from ragvps import config

    groups = {
        "database": ("database",),
        "embed": ("embed", "ollama"),
        "chunk": ("chunk",),
        "index": ("index",),
        "search": (),
        "rerank": ("reranker", "rerank"),
        "generate": ("generator", "answer"),
        "serve": (),
        "auth": (),
        "source": ("source",),
    }
    kinds = {"embed": "embedder", "rerank": "reranker", "generate": "generator"}
    seen = set()
    for group in fields(Settings):
        for f in fields(group.default):  # type: ignore[arg-type]
            name = f.metadata["name"]
            seen.add(name)
            assert config.SETTINGS[name] == (group.name, f.name)
            attr = f.name.removesuffix("s")  # ollama_url holds ollama_urls: one or several
            expected = {attr} | {f"{word}_{attr}" for word in groups[group.name]}
            expected |= {kinds[group.name]} if f.name == "kind" else set()
            assert name.removesuffix("s") in expected, f"{name} names {group.name}.{f.name} in other words: rename one"
            assert (name in config.SECRETS) == (not f.repr)
    assert seen == set(config.SETTINGS)
    assert "generator_api_key" in config.SECRETS and "generator_url" not in config.SECRETS
    assert "secret" not in repr(Settings.of(generator_api_key="secret"))


def test_backend_choices_come_from_the_backends_and_each_backend_builds():
    from ragvps import backends

    for setting, table in (
        ("embedder", backends.EMBEDDERS),
        ("generator", backends.GENERATORS),
        ("reranker", backends.RERANKERS),
    ):
        for name, backend in table.items():
            assert Settings.of(**{setting: name}).get(setting) == name
            assert callable(backend.load()) or hasattr(backend.load(), "embedder")
        with pytest.raises(
            ConfigError,
            match=f"{setting}='nope' from environment variable "
            f"RAGVPS_{setting.upper()} must be one of: {' | '.join(table)}",
        ):
            load_settings(env={f"RAGVPS_{setting.upper()}": "nope"})
    assert Settings.of(embedder="local").embed.model_name == backends.LOCAL_MODEL
    assert Settings.of(embedder="ollama", embed_model="bge-m3").embed.model_name == "bge-m3"


def test_an_old_flat_name_still_works_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    from ragvps import config

    monkeypatch.setitem(config.ALIASES, "results", "top_k")  # as answer_min_score -> answer_min_evidence
    assert load_settings(env={"RAGVPS_RESULTS": "5"}).search.top_k == 5
    assert "setting results (from environment variable RAGVPS_RESULTS) is now called top_k" in caplog.text
    toml = tmp_path / "ragvps.toml"
    toml.write_text("[ragvps]\nresults = 6\n")
    assert load_settings(toml, env={}).search.top_k == 6
    assert load_settings(toml, env={"RAGVPS_TOP_K": "7"}).search.top_k == 7  # the current name wins
    assert Settings.of(results=4).search.top_k == 4


def test_no_code_branches_on_a_backends_name():
    """What a caller needs to know about a backend is a fact in ragvps.backends, not a test of its name."""
    import re

    from ragvps import backends

    names = {*backends.EMBEDDERS, *backends.GENERATORS, *backends.RERANKERS}
    pattern = re.compile(
        r'(\.kind|\.name|embedder|generator|reranker)\s*[!=]=\s*"(' + "|".join(names) + r')"'
        r'|"(' + "|".join(names) + r')" if \w+ else'
    )
    root = Path(__file__).resolve().parents[1] / "ragvps"
    found = [
        f"{path.relative_to(root)}:{n}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert found == []


def test_replica_urls_are_a_secret_list_checked_like_the_database_url():
    from ragvps.config import load_settings
    from ragvps.errors import ConfigError

    env = {
        "RAGVPS_DATABASE_URL": "postgresql://ragvps:pw1@db1/ragvps",
        "RAGVPS_DATABASE_REPLICA_URLS": "postgresql://ragvps:pw2@db2/ragvps, postgresql://ragvps:pw3@db3/ragvps",
    }
    s = load_settings(config_file=None, env=env)
    assert s.database.replica_urls == ("postgresql://ragvps:pw2@db2/ragvps", "postgresql://ragvps:pw3@db3/ragvps")
    assert "pw2" not in repr(s) and s.database.replica_max_lag == 10.0 and s.database.replica_wait == 1.0
    with pytest.raises(ConfigError, match="database_replica_urls") as bad:
        load_settings(config_file=None, env=env | {"RAGVPS_DATABASE_REPLICA_URLS": "mysql://u:secretpw@db2/x"})
    assert "secretpw" not in str(bad.value)
    with pytest.raises(ConfigError, match="set database_url to that primary"):
        load_settings(config_file=None, env={"RAGVPS_DATABASE_REPLICA_URLS": env["RAGVPS_DATABASE_REPLICA_URLS"]})
