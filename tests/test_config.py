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
