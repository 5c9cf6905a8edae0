"""The JSON Schemas `edgebus schema` exports (docs/schemas.md): each is a valid
draft 2020-12 schema, takes the files the project ships (the bridge's
example.toml, every board manifest, the views files in docs/spark.md), and
refuses a bad value as the tools do, the tools saying it in one line that
names the file, the table or field, what was expected and what was got."""

import json
import re
import tomllib
from pathlib import Path

import jsonschema
import pytest

from edgebus.bridge import config as bridge_config
from edgebus.bridge import schema_doc
from edgebus.ingest.views import config as views_config
from edgebus.tools import cli
from edgebus.tools.boardkit import boards
from edgebus.tools.commands import schema as schema_cmd
from tests.conftest import ROOT

NAMES = sorted(schema_cmd.FILES)


def _editor(name):
    """A plain validator, as an editor or another tool would use the schema."""
    doc = schema_cmd.document(name)
    return jsonschema.Draft202012Validator(
        doc, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_is_a_valid_json_schema(name):
    jsonschema.Draft202012Validator.check_schema(schema_cmd.document(name))


def test_the_shipped_bridge_schema_is_the_one_its_table_makes():
    shipped = Path(ROOT, "edgebus", "bridge", "bridge.schema.json").read_text()
    assert shipped == schema_doc.text(), (
        "bridge.schema.json is stale: python -m edgebus.bridge.schema_doc > "
        "edgebus/bridge/bridge.schema.json (docs/schemas.md)"
    )


@pytest.mark.parametrize("name", NAMES)
def test_the_command_writes_the_shipped_file(name, tmp_path):
    out = tmp_path / "s.json"
    assert cli.main(["schema", name, "-o", str(out)]) == 0
    package, file = schema_cmd.FILES[name]
    shipped = Path(ROOT, *package.split("."), file).read_text()
    assert out.read_text() == shipped


def test_the_example_bridge_config_fits_and_points_an_editor_at_it():
    text = Path(bridge_config.EXAMPLE).read_text()
    assert text.startswith("#:schema ./bridge.schema.json\n")
    assert list(_editor("bridge").iter_errors(tomllib.loads(text))) == []


def test_every_board_manifest_fits():
    names = boards.list_boards()
    assert names
    for name in names:
        data = json.loads(Path(boards.board_path(name)).read_text())
        assert list(_editor("boards").iter_errors(data)) == [], name


def _views_files():
    """The views files docs/spark.md shows, and each with its commented keys set."""
    doc = Path(ROOT, "docs", "spark.md").read_text()
    blocks = [b for b in re.findall(r"```toml\n(.*?)```", doc, re.S) if "[[view]]" in b]
    on = [re.sub(r"^# (\w+ = )", r"\1", b, flags=re.M) for b in blocks]
    return blocks + on


def test_the_documented_views_files_fit(tmp_path):
    files = _views_files()
    assert len(files) >= 4 and any("max_columns = 64" in f for f in files)
    for text in files:
        data = tomllib.loads(text)
        assert list(_editor("views").iter_errors(data)) == [], text
        views_config.parse(data, str(tmp_path / "views.toml"))


def _refused(name, data):
    assert list(_editor(name).iter_errors(data)), data


def test_a_bad_bridge_value_is_one_line_naming_table_key_range_and_value(tmp_path):
    data = {"log": {"dir": "log", "segment_seconds": -5}}
    _refused("bridge", data)
    (tmp_path / "bridge.toml").write_text('[log]\ndir = "log"\nsegment_seconds = -5\n')
    with pytest.raises(bridge_config.ConfigError) as e:
        bridge_config.load(str(tmp_path / "bridge.toml"))
    msg = str(e.value)
    assert "\n" not in msg and "bridge.toml" in msg
    assert "[log]: segment_seconds must be between 0.1 and 604800 seconds, got -5" in msg


def test_a_bad_manifest_value_is_one_line_naming_file_field_and_value(tmp_path):
    data = json.loads(Path(boards.board_path("esp32")).read_text())
    data["queues"]["bus"] = 0
    _refused("boards", data)
    (tmp_path / "esp32.json").write_text(json.dumps(data))
    with pytest.raises(boards.BoardError) as e:
        boards.load_board(str(tmp_path / "esp32.json"))
    msg = str(e.value)
    assert "\n" not in msg and "esp32.json: queues.bus: expected an integer 1..65535, got 0" in msg


def test_a_manifest_platform_list_names_its_bad_entry():
    data = json.loads(Path(boards.board_path("esp32")).read_text())
    data["device"]["platform"] = ["esp32", ""]
    with pytest.raises(boards.BoardError, match=r"device.platform\[1\]: expected a non-empty"):
        boards.validate(data, source="esp32.json")


def test_a_bad_views_value_is_one_line_naming_file_view_key_and_value(tmp_path):
    data = {"view": [{"name": "temps", "topic": "dev/+/temp", "max_columns": 5000}]}
    _refused("views", data)
    with pytest.raises(ValueError) as e:
        views_config.parse(data, str(tmp_path / "views.toml"))
    assert str(e.value) == (
        "%s: view 1 (temps): max_columns must be a whole number from 1 to 1000, got 5000"
        % (tmp_path / "views.toml")
    )


@pytest.mark.parametrize(
    "data, words",
    [
        ({"bridge": {"queue_len": 5.0}}, "[bridge]: queue_len has the wrong type (float)"),
        ({"bridge": {"paced": 1}}, "[bridge]: paced has the wrong type (int)"),
        ({"quota": {"bytes": True}}, "[quota]: bytes has the wrong type (bool)"),
    ],
)
def test_a_whole_number_is_an_int_not_a_float_or_a_bool(data, words):
    # JSON Schema's "integer" takes 5.0: the tools' validators do not.
    with pytest.raises(bridge_config.ConfigError, match=re.escape(words)):
        bridge_config.parse(data)


def test_a_file_nested_too_deeply_is_one_line_not_a_traceback(tmp_path):
    # tomllib recurses once per level: a hostile or broken file must not crash a tool.
    deep = "[" * 3000 + "]" * 3000
    bridge, views = tmp_path / "bridge.toml", tmp_path / "views.toml"
    bridge.write_text('[bridge]\nnode = "gw"\nx = %s\n' % deep)
    views.write_text("rejects = %s\n" % deep)
    with pytest.raises(bridge_config.ConfigError) as e:
        bridge_config.load(str(bridge))
    assert str(e.value) == "%s: not valid TOML: nested too deeply" % bridge
    with pytest.raises(ValueError) as e:
        views_config.load(str(views))
    assert str(e.value) == "%s: not valid TOML: nested too deeply" % views
