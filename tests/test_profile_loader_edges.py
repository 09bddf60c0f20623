"""The profile loader's paths one step past the broken files tests/test_profile_errors.py feeds it: each ends in
one KitError line naming the problem and the fix (never a traceback), found by mutation testing (issue 19)."""

from __future__ import annotations

import os
import re
import threading
from datetime import datetime
from ipaddress import IPv4Network
from pathlib import Path

import pytest
from pydantic import BaseModel, Field, ValidationError

from pdkit.errors import KitError, ProfileError
from pdkit.model import profile_files


def test_a_cdk_json_without_a_default_profile_names_the_fix(tmp_path, monkeypatch):
    """cdk.json's context.profile is the one default (`cdk synth` reads the same key: CDK context values,
    https://docs.aws.amazon.com/cdk/v2/guide/context.html)."""
    broken = tmp_path / "cdk.json"
    broken.write_text('{"app": "python3 app.py", "context": {}}')
    monkeypatch.setattr(profile_files, "CDK_JSON", broken)
    with pytest.raises(KitError, match=r"cdk\.json: no context\.profile \('profile'\)\. Fix: restore cdk\.json from the repository$"):
        profile_files.default_profile_name()
    broken.write_text("{not json")
    with pytest.raises(KitError, match=r"no context\.profile"):
        profile_files.default_profile_name()


def test_a_pipe_is_refused_before_it_is_read(tmp_path):
    """stat(2) tells a FIFO from a regular file (S_ISREG); reading a FIFO with no writer would block forever. Were the
    check gone, a writer thread feeds the pipe once a reader opens it, so the test fails instead of hanging."""
    fifo = tmp_path / "profile.yaml"
    os.mkfifo(fifo)
    done = threading.Event()

    def feed() -> None:
        while not done.is_set():
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: nobody has the pipe open for reading (fifo(7))
                done.wait(0.01)
                continue
            with os.fdopen(fd, "w") as pipe:
                pipe.write("name: x\n")
            return

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        with pytest.raises(KitError, match=r"profile\.yaml: not a regular file\. Fix: save the profile to a \.yaml file and pass that$"):
            profile_files._read_text(fifo)
    finally:
        done.set()
        writer.join()


def test_a_file_that_vanished_says_it_cannot_be_read(tmp_path):
    """stat(2) fails with ENOENT: the OSError's strerror, not a traceback."""
    gone = tmp_path / "gone.yaml"
    with pytest.raises(KitError, match=r"gone\.yaml: cannot read it \(No such file or directory\)\. Fix: check the file's permissions$"):
        profile_files._read_text(gone)


def test_a_file_that_grows_past_the_limit_after_stat_is_still_refused(tmp_path, monkeypatch):
    """The size from stat(2) can be stale (a file being written): the read itself is bounded too."""
    grown = tmp_path / "grown.yaml"
    grown.write_bytes(b"a" * (profile_files.MAX_BYTES + 1))
    small = tmp_path / "small.yaml"
    small.write_text("name: x\n")
    real_stat = Path.stat
    monkeypatch.setattr(Path, "stat", lambda self, **kw: real_stat(small if self == grown else self, **kw))
    with pytest.raises(
        KitError, match=rf"grown\.yaml: over {profile_files.MAX_BYTES} bytes; a profile is a few KB\. Fix: pass the profile"
    ):
        profile_files._read_text(grown)


def test_exactly_the_limit_is_read(tmp_path):
    """MAX_BYTES is the largest size accepted, by stat and by the read."""
    edge = tmp_path / "edge.yaml"
    edge.write_bytes(b"#" * (profile_files.MAX_BYTES - 1) + b"\n")
    assert len(profile_files._read_text(edge)) == profile_files.MAX_BYTES


def test_a_duplicate_after_a_merge_key_is_still_refused(tmp_path):
    """YAML 1.1 merge keys (`<<: *anchor`, https://yaml.org/type/merge.html) are skipped by the duplicate check,
    not the end of it: a key repeated after one is still two keys (YAML 1.2.2 §3.2.1.1: keys are unique)."""
    f = tmp_path / "p.yaml"
    f.write_text("base: &b {x: 1}\nthing:\n  <<: *b\n  y: 1\n  y: 2\n")
    with pytest.raises(KitError, match=r"duplicate key 'y' at lines 4 and 5"):
        profile_files.load(str(f))


def test_a_merge_key_is_not_a_duplicate_of_the_key_it_merges(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("base: &b {x: 1}\nthing:\n  <<: *b\n  x: 2\n")
    # Past the loader: the profile model then refuses what is not a profile, one line naming the first field.
    with pytest.raises(ProfileError, match=r"name = \(missing\): required field is missing"):
        profile_files.load(str(f))


def test_a_mapping_as_a_key_is_one_line_not_a_traceback(tmp_path):
    """A complex key (`? [a, b]`, YAML 1.2.2 §8.2.2) is unhashable in Python: SafeConstructor says so as a YAML error."""
    f = tmp_path / "p.yaml"
    f.write_text("? [a, b]\n: 1\nname: x\n")
    with pytest.raises(KitError, match=r"p\.yaml: not valid YAML at line 1: .*unhashable key.*\. Fix: quote the value"):
        profile_files.load(str(f))


def test_an_error_without_a_specific_hint_keeps_pydantics_words(raw_with):
    """A pattern mismatch (Kubernetes namespace names are RFC 1123 labels) has no kind-specific fix: pydantic's own
    message, clipped, and the pointer to the README's reference."""
    with pytest.raises(ProfileError) as err:
        profile_files.parse(raw_with("serving.namespace", "Not_A_Label"))
    e = err.value
    assert e.field == "serving.namespace"
    assert e.problem.startswith("String should match pattern")
    assert e.fix == "see README, Profile reference, for the allowed values"


class _Bounds(BaseModel):
    whole_below: int = Field(default=0, lt=10)
    whole_at_most: int = Field(default=0, le=10)
    whole_above: int = Field(default=1, gt=0)
    whole_open: int = Field(default=1, gt=0, lt=10)
    number_below: float = Field(default=0, lt=1.5)
    number_at_most: float = Field(default=0, le=1.5)
    number_at_least: float = Field(default=0, ge=0.5)
    unbounded: int = 0


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("whole_below", "<= 9"),  # a whole number below 10 is at most 9
        ("whole_at_most", "<= 10"),
        ("whole_above", ">= 1"),
        ("whole_open", "in [1, 9]"),
        ("number_below", "< 1.5"),
        ("number_at_most", "<= 1.5"),
        ("number_at_least", ">= 0.5"),
        ("unbounded", None),
    ],
)
def test_bound_text_states_every_kind_of_bound(field, text):
    """annotated_types Gt/Ge/Lt/Le as pydantic's Field(gt=, ge=, lt=, le=) records them in FieldInfo.metadata."""
    assert profile_files.bound_text(_Bounds.model_fields[field]) == text


class _Section(BaseModel):
    x: int = 0


class _Kinds(BaseModel):
    model_config = {"extra": "forbid"}
    whole: int = 0
    number: float = 0.0
    switch: bool = False
    text: str = ""
    section: _Section = _Section()
    mapping: dict[str, int] = {}
    items: tuple[int, ...] = ()
    listed: list[int] = []
    cidr: IPv4Network = IPv4Network("10.0.0.0/16")
    when: datetime | None = None
    code: str = Field(default="a" * 200, pattern="^" + "a" * 200 + "$")


TYPE_ERRORS = [
    # field, value, pydantic's error type (https://docs.pydantic.dev/latest/errors/validation_errors/), what the line asks for
    ("whole", "four", "int_parsing", "a whole number"),
    ("whole", [4], "int_type", "a whole number"),
    ("whole", 4.5, "int_from_float", "a whole number"),
    ("number", "lots", "float_parsing", "a number"),
    ("number", [1], "float_type", "a number"),
    ("switch", "maybe", "bool_parsing", "true or false"),
    ("switch", [True], "bool_type", "true or false"),
    ("text", 5, "string_type", "a string (quote it)"),
    ("section", 5, "model_type", "a mapping of fields"),
    ("mapping", 5, "dict_type", "a mapping of fields"),
    ("items", 5, "tuple_type", "a list"),
    ("listed", 5, "list_type", "a list"),
    ("cidr", "banana", "ip_v4_network", "an IPv4 CIDR like 10.0.0.0/16"),
    ("when", "2026-13-45", "datetime_from_date_parsing", "an ISO 8601 time like 2026-12-01T11:30:00Z"),
    ("when", 10**30, "datetime_parsing", "an ISO 8601 time like 2026-12-01T11:30:00Z"),  # a number far past year 9999
]


def _refusal(raw):
    try:
        _Kinds.model_validate(raw)
    except ValidationError as exc:
        return exc, profile_files._first_error(exc)
    raise AssertionError(f"{raw} was accepted")


@pytest.mark.parametrize(("field", "value", "kind", "expected"), TYPE_ERRORS, ids=[t[2] for t in TYPE_ERRORS])
def test_every_type_error_kind_names_what_to_write(field, value, kind, expected):
    """Each pydantic type-error kind the loader translates gets its own words and the fix that names the field."""
    exc, err = _refusal({field: value})
    assert exc.errors()[0]["type"] == kind, "the case must raise the kind it is named for"
    assert (err.field, err.value) == (field, value)
    assert err.problem == f"wrong type, expected {expected}"
    assert err.fix == f"write {field} as {expected}"


@pytest.mark.parametrize(("bad", "more"), [(1, ""), (2, " (and 1 more problem)"), (3, " (and 2 more problems)")])
def test_further_problems_are_counted_in_words(bad, more):
    fields = [("whole", "four"), ("number", "lots"), ("switch", "maybe")][:bad]
    _, err = _refusal(dict(fields))
    assert err.problem == "wrong type, expected a whole number" + more


def test_a_literal_names_the_allowed_values(raw_with):
    with pytest.raises(ProfileError) as err:
        profile_files.parse(raw_with("capacity.placement_group", "spread"))
    assert (err.value.field, err.value.value) == ("capacity.placement_group", "spread")
    assert err.value.problem == "not an allowed value"
    assert err.value.fix == "use 'cluster' or 'none'"


def test_a_missing_field_says_which_key_to_add(raw_with):
    with pytest.raises(ProfileError) as err:
        profile_files.parse(raw_with("capacity.instance_type", None))
    assert err.value.field == "capacity.instance_type"
    assert err.value.problem == "required field is missing"
    assert err.value.fix == "add `instance_type:` (see README, Profile reference)"


@pytest.mark.parametrize(
    ("where", "known"),
    [
        ("zzz", "name, description, aws, capacity"),
        ("roles.decode.parallelism.zzz", "tp, pp, attn_cp, attn_dp"),
    ],
)
def test_an_unknown_field_lists_the_fields_of_its_own_section(raw_with, where, known):
    """At the top level and three sections deep, the known fields are the ones next to the unknown key."""
    with pytest.raises(ProfileError) as err:
        profile_files.parse(raw_with(where, 1))
    assert err.value.fix.startswith(f"remove it; known fields here: {known}, ")


def test_an_unknown_field_lists_the_known_ones_when_nothing_is_close(raw_with):
    with pytest.raises(ProfileError) as err:
        profile_files.parse(raw_with("network.zzz", 1))
    assert err.value.problem == "unknown field"
    assert err.value.fix == "remove it; known fields here: vpc_cidr, nat_gateways, flow_log_retention_days"


def test_an_unmapped_kind_keeps_pydantics_words_clipped_to_120_characters():
    """A kind with no translation (here string_pattern_mismatch, whose message repeats the pattern) keeps pydantic's
    message, cut to 120 characters so the line stays one readable line."""
    _, err = _refusal({"code": "b"})
    assert err.value == "b"
    assert err.problem == "String should match pattern '^" + "a" * 87 + "..."
    assert len(err.problem) == 120


YAML_ERRORS = [
    # libyaml's own words (context: problem), the line, and the fix for that kind of error
    ("a: {b: 1\n", "at line 2: while parsing a flow mapping: did not find expected ',' or '}'", "check indentation and quoting there"),
    (
        "a: 1\n---\nb: 2\n",
        "at line 2: expected a single document in the stream: but found another document",
        "keep one document per file (remove the second `---`)",
    ),
    ("a: *x\n", "at line 1: found undefined alias 'x'", "define the anchor (&name) before the alias (*name), or write the value out"),
    (
        "a: " + "[" * 2000 + "\n",
        "at line 1: while increasing flow level: exceeded maximum nesting depth",
        "a profile nests at most 4 levels; close the brackets",
    ),
]


@pytest.mark.parametrize(("text", "where_what", "fix"), YAML_ERRORS, ids=["syntax", "two-documents", "undefined-alias", "too-deep"])
def test_each_yaml_error_gets_its_own_fix(tmp_path, text, where_what, fix):
    """PyYAML's MarkedYAMLError carries libyaml's context and problem and the mark of the problem
    (https://pyyaml.org/wiki/PyYAMLDocumentation, YAMLError); the line says both, then the fix for that kind."""
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(KitError) as err:
        profile_files.load(str(f))
    assert str(err.value) == f"{f}: not valid YAML {where_what}. Fix: {fix}"


def test_a_duplicate_key_line_has_no_stray_location(tmp_path):
    """The duplicate's two lines are in the problem itself; no ' at line' is added after it."""
    f = tmp_path / "p.yaml"
    f.write_text("name: x\nname: y\n")
    with pytest.raises(KitError) as err:
        profile_files.load(str(f))
    assert str(err.value) == f"{f}: duplicate key 'name' at lines 1 and 2 (YAML keeps only the last). Fix: keep one of them"


def test_an_unknown_name_lists_every_shipped_profile():
    with pytest.raises(KitError) as err:
        profile_files.resolve("no-such-profile-anywhere")
    shipped = profile_files.available_profiles()
    assert len(shipped) >= 2
    assert f"use one of {', '.join(shipped)} or a path to a .yaml file" in str(err.value)


def test_libyamls_words_are_clipped_to_120_characters(tmp_path):
    """An undefined alias repeats its (unbounded) name in libyaml's problem: the line stays short."""
    f = tmp_path / "p.yaml"
    f.write_text("a: *" + "x" * 300 + "\n")
    with pytest.raises(KitError) as err:
        profile_files.load(str(f))
    said = "found undefined alias '" + "x" * 300 + "'"
    assert str(err.value) == (
        f"{f}: not valid YAML at line 1: {said[:117]}.... Fix: define the anchor (&name) before the alias (*name), or write the value out"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("name: 2026-13-45\n", "at line 1: cannot read this value (month must be in 1..12)"),
        # CPython refuses int() of more than 4300 digits (https://docs.python.org/3/library/stdtypes.html#int-max-str-digits)
        (
            "a: 1\nname: " + "9" * 5000 + "\n",
            "at line 2: cannot read this value (Exceeds the limit (4300 digits) for integer string conver...)",
        ),
    ],
    ids=["impossible-date", "huge-integer"],
)
def test_a_value_yaml_cannot_construct_names_its_line_and_why(tmp_path, text, said):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(KitError) as err:
        profile_files.load(str(f))
    assert str(err.value) == f"{f}: not valid YAML {said}. Fix: quote the value to keep it as text, and use no !tags"


# --- How a reference resolves, and each refusal of resolve() as its whole line ---------------------------------


@pytest.mark.parametrize("ref", ["mine.yaml", "mine.yml", "sub/mine"])
def test_a_yaml_suffix_or_a_slash_makes_a_reference_a_path(tmp_path, monkeypatch, ref):
    """`pdkit --profile mine.yaml` in the operator's own directory is their file, not config/mine.yaml.yaml; a
    reference with a slash is a path even without the suffix."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / ref).write_text("name: x\n")
    assert profile_files.resolve(ref) == (tmp_path / ref).resolve()


def test_a_directory_with_a_trailing_slash_gets_the_example_path_with_one_slash(tmp_path):
    """Shell completion adds the trailing slash; the example in the fix is the directory plus `/<name>.yaml`."""
    folder = tmp_path / "profilesX"
    folder.mkdir()
    ref = f"{folder}/"
    with pytest.raises(KitError) as err:
        profile_files.resolve(ref)
    assert str(err.value) == f"profile {ref!r} is a directory. Fix: pass the .yaml file inside it, e.g. {folder}/<name>.yaml"


def test_a_missing_file_lists_the_shipped_names_as_the_alternative(tmp_path):
    ref = str(tmp_path / "gone.yaml")
    with pytest.raises(KitError) as err:
        profile_files.resolve(ref)
    names = ", ".join(profile_files.available_profiles())
    assert str(err.value) == f"profile file {ref!r} does not exist. Fix: check the path, or use a name from config/: {names}"


def test_a_name_close_to_nothing_gets_no_hint():
    with pytest.raises(KitError) as err:
        profile_files.resolve("qqqqzzzz")
    names = ", ".join(profile_files.available_profiles())
    assert str(err.value) == f"no profile named 'qqqqzzzz' in config/. Fix: use one of {names} or a path to a .yaml file"


# --- The loader's own refusals, whole: the problem, the line it is on, the fix ---------------------------------


def _load_error(tmp_path: Path, text: str) -> str:
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(KitError) as err:
        profile_files.load(str(f))
    return str(err.value).removeprefix(f"{f}: ")


def _loaded(said: str) -> bool:
    """The YAML was read and the profile's model refused it: the line starts with a field (`name = (missing): ...`),
    not with a loader's refusal."""
    return re.match(r"^[a-z_.]+ = ", said) is not None


def test_an_alias_inside_its_own_anchor_names_the_alias_line(tmp_path):
    said = _load_error(tmp_path, "name: x\nbench: &b\n  concurrency: *b\n")
    assert said == "alias *b is used inside its own anchor at line 3. Fix: replace the alias with the values it stands for"


def _nested(levels: int) -> str:
    """`zz:` then `levels` mappings inside each other, on line 2: the deepest node sits at depth levels + 1 (the
    document's mapping is depth 1, and every key and value one deeper than its mapping)."""
    return "name: x\nzz: " + "{a: " * (levels - 1) + "{}" + "}" * (levels - 1) + "\n"


def test_nesting_is_refused_one_level_past_the_limit_and_not_at_it(tmp_path):
    """MAX_DEPTH is the deepest node accepted. Mappings with keys make the depth go up and down between siblings, so
    the count must come back down after each node, not reset."""
    assert _loaded(_load_error(tmp_path, _nested(profile_files.MAX_DEPTH - 1)))
    refused = _load_error(tmp_path, _nested(profile_files.MAX_DEPTH))
    assert refused == f"nested deeper than {profile_files.MAX_DEPTH} levels at line 2. Fix: a profile nests at most 4 levels; flatten it"


EXPANDS = f"expands to more than {profile_files.MAX_NODES} YAML values (each use of an alias counts again); a profile has about 100"
EXPANDS_FIX = "Fix: remove the anchors (&name) and aliases (*name) or the repeated data"


def test_values_are_counted_exactly_up_to_the_limit(tmp_path):
    """The document's mapping, the key, the list and its items count one each: MAX_NODES values load, one more is
    refused at the document's first line (the mapping is counted last, after its children)."""
    items = profile_files.MAX_NODES - 3
    assert _loaded(_load_error(tmp_path, "zz: [" + ", ".join(["a"] * items) + "]\n"))
    refused = _load_error(tmp_path, "zz: [" + ", ".join(["a"] * (items + 1)) + "]\n")
    assert refused == f"{EXPANDS} at line 1. {EXPANDS_FIX}"


def _aliased_text(plain: int, aliases: int) -> str:
    """`plain` one-value items, then a 2,565-character string (1 + 2565 // 256 = 11 values) and `aliases` uses of it."""
    lines = ["zz:", *["- a"] * plain, "- &d " + "x" * 2565, *["- *d"] * aliases]
    return "\n".join(lines) + "\n"


def test_a_long_string_weighs_one_value_per_256_characters_each_time_it_is_aliased(tmp_path):
    """47 + 11 x 450 + 3 = MAX_NODES loads; 7 + 11 x 454 + 1 crosses the limit at the last alias, which is the
    line named (libyaml's mark of that alias)."""
    assert profile_files.MAX_NODES == 5_000
    assert _loaded(_load_error(tmp_path, _aliased_text(47, 449)))
    refused = _load_error(tmp_path, _aliased_text(7, 453))
    assert refused == f"{EXPANDS} at line {1 + 7 + 1 + 453}. {EXPANDS_FIX}"


def test_an_aliased_list_weighs_itself_and_its_items_each_time(tmp_path):
    """`&s [a, b, c]` stands for 4 values: 1 + 4 x 1,249 + 3 = MAX_NODES loads, one more item is refused."""
    body = ["- &s [a, b, c]", *["- *s"] * 1248]
    assert _loaded(_load_error(tmp_path, "\n".join(["zz:", "- a", *body]) + "\n"))
    refused = _load_error(tmp_path, "\n".join(["zz:", "- a", "- a", *body]) + "\n")
    assert refused == f"{EXPANDS} at line 1. {EXPANDS_FIX}"
