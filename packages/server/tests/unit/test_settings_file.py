"""config.json errors say where: a line and a column, or that the file is empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from codey_server.errors import ConfigError
from codey_server.settings import Settings, load_config_file


def _load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "config.json"
    path.write_text(text)
    return load_config_file(Settings(data_dir=tmp_path), path)


def test_a_syntax_error_gives_its_line_and_column(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, '{\n  "providers": [\n    {"name": "x",, "base_url": "y"}\n  ]\n}\n')
    assert "line 3, column 18" in str(err.value) and "byte" not in str(err.value)


@pytest.mark.parametrize("text", ["", "   \n"])
def test_an_empty_file_says_so(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match="is empty"):
        _load(tmp_path, text)


def test_a_wrong_field_names_its_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\$\.providers\[0\]\.name"):
        _load(tmp_path, '{"providers": [{"name": 3, "base_url": "y"}]}')


def test_roles_merge_over_the_defaults(tmp_path: Path) -> None:
    settings = _load(tmp_path, '{"roles": {"reviewer": {"description": "Reviews.", '
                               '"read_only": true}}}')
    assert set(settings.roles) == {"explorer", "developer", "reviewer"}
    assert settings.roles["reviewer"].read_only
