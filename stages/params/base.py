"""The shared base of the params schema: one module per stage section lives beside it (``stages/params/``).

Each stage reads ``params.yaml`` through a **view** (:class:`View`): a model whose fields are the sections, or the
parts of sections, the stage reads, defined in that stage's own schema module (``stages/params/{section}.py``).
So a stage's import closure, and so its DVC code deps, holds its own schema module, this base, and the schema
modules of the sections whose keys it reads, never the others: editing one section's schema reruns only the
stages that read it. The whole file is validated at once (every section, the cross-section checks) by
:mod:`stages.params.root`, which ``bert-pipeline profile`` and the Prefect flow run before they start anything.

Any problem (unknown key, missing key, wrong type, value out of range) raises :class:`ParamsError` whose message is
one line naming the file and the dotted key and what was expected, e.g. ``params.yaml: prepare_corpus.min_words:
expected int >= 0, got "ten"``. A misspelt key or section is reported before the key it leaves missing, with the
close match (``params.yaml: unknown section 'pretrian' (did you mean 'pretrain'?)``); a number given as text says
how to write it; a value set by an override names the override's origin (a profile file, ``--set-param``) instead
of the file. YAML is read with YAML 1.2's floats (:class:`ParamsLoader`: ``2e-3`` is a number, as DVC reads it).

The schema is the only config, by one rule: every key of a stage's section is required (``params.yaml`` states
the whole configuration; no default here can disagree with it), while the entries a user adds to a list or mapping
(corpus sources, user tasks, ``finetune.models`` and ``finetune.tasks`` entries, ``pretrain.phases``) and the
``promote`` and ``orchestration`` sections (``bert-pipeline promote``'s and the flow's, not a stage's) have defaults
for their optional keys, and ``params.yaml`` lists only what differs from them.

**Which keys a stage reads** is recorded when the environment variable :data:`RECORD_ENV` names a file: the view a
stage loads is then wrapped in :class:`RecordedParams`, and at exit the process appends one JSON line (its
command and the sorted dotted keys it read) to that file. ``tests/test_params_declared.py`` compares those keys with
the params ``dvc.yaml`` declares for the stage.
"""

from __future__ import annotations

import atexit
import copy
import difflib
import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union

import annotated_types
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from bert_pipeline.errors import PipelineError
from bert_pipeline.io import flatten
from bert_pipeline.model.sizes import SIZES

DEFAULT_PARAMS = Path("params.yaml")
RECORD_ENV = "BERT_PIPELINE_PARAMS_RECORD"


class ParamsError(PipelineError, ValueError):
    """A params file that does not match the schema. ``str(err)`` is one line naming the key."""


class Section(BaseModel):
    """Base of every params section: unknown keys are errors, no silent type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class View(BaseModel):
    """Base of a stage's view of ``params.yaml``: its fields are the sections (each a :class:`Section`, validated
    whole) or the parts of sections (a :class:`View` of its own) the stage reads; every other key is ignored."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


# Value types that more than one section's schema uses.
SizeName = Literal[tuple(SIZES)]  # type: ignore[valid-type]  # the names of bert_pipeline.model.sizes
Probability = Annotated[float, annotated_types.Ge(0.0), annotated_types.Le(1.0)]
SpeedSeqLength = Annotated[int, annotated_types.Ge(8), annotated_types.Le(512)]  # tokens an input is padded to when timed


def first_repeat(values: list[Any]) -> Any | None:
    """The smallest value that occurs more than once in ``values`` (what a "distinct" check names), or None."""
    repeated = sorted({v for v in values if values.count(v) > 1})
    return repeated[0] if repeated else None



# ------------------------------------------------------------------------------------------ error format
MAX_LISTED_KEYS = 6  # keys a message lists before it counts the rest
_TYPE_NAMES = {int: "int", float: "float", str: "str", bool: "bool", type(None): "null", list: "list", dict: "mapping"}


def _describe(annotation: Any, metadata: list[Any]) -> str:
    """Human text for what a field expects, e.g. ``int >= 0``."""
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if origin is Literal or str(origin) == "typing.Literal":
        text = "one of " + ", ".join(json.dumps(a) for a in args)
    elif origin is Union or type(annotation).__name__ == "UnionType":
        text = " or ".join(_describe(a, []) for a in args)
    elif origin is Annotated or hasattr(annotation, "__metadata__"):
        return _describe(annotation.__origin__, list(annotation.__metadata__) + metadata)
    elif origin in (list, dict):
        text = f"list of {_describe(args[0], [])}" if origin is list and args else _TYPE_NAMES[origin]
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        text = "mapping with keys " + _key_list(list(annotation.model_fields))
    else:
        text = _TYPE_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))
    bounds = []
    for m in metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None and type(m).__name__ in ("Ge", "Gt", "Le", "Lt", "Interval"):
                bounds.append(f"{sym} {getattr(m, attr)}")
        if type(m).__name__ == "MinLen":
            bounds.append(f"with at least {m.min_length} item(s)")
    return " ".join([text, " and ".join(bounds)]) if bounds else text


def _key_list(names: list[str], limit: int = MAX_LISTED_KEYS) -> str:
    """``a, b, c``; past ``limit`` names, the first ``limit`` and the count (``a, b, ..., (22 keys)``)."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... ({len(names)} keys)"


def _options(annotation: Any) -> list[Any]:
    """The alternatives of an annotation: each member of a union (``X | None``), else the annotation itself;
    ``Annotated[...]`` unwrapped."""
    if hasattr(annotation, "__metadata__"):
        annotation = annotation.__origin__
    if getattr(annotation, "__origin__", None) is Union or type(annotation).__name__ == "UnionType":
        return [option for arg in annotation.__args__ for option in _options(arg)]
    return [annotation]


def _field_at(model: type[BaseModel], loc: tuple[Any, ...]):
    """Walk ``loc`` through nested models, lists and mappings' values (``finetune.models.NAME``); return
    (annotation, metadata) at its end, or None."""
    ann: Any = model
    meta: list[Any] = []
    for part in loc:
        options = _options(ann)
        if isinstance(part, int):
            lists = [o for o in options if getattr(o, "__origin__", None) is list]
            if not lists:
                return None
            ann, meta = lists[0].__args__[0], []
            continue
        models = [o for o in options if isinstance(o, type) and issubclass(o, BaseModel) and part in o.model_fields]
        if models:
            info = models[0].model_fields[part]
            ann, meta = info.annotation, list(info.metadata)
            continue
        mappings = [o for o in options if getattr(o, "__origin__", None) is dict and len(o.__args__) == 2]
        if not mappings:
            return None
        ann, meta = mappings[0].__args__[1], []
    return ann, meta


def _plain(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` without pydantic's union-member and validator tags: the keys as the YAML file has them."""
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in _UNION_TAGS or _VALIDATOR_TAG.match(p))))


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the mapping at ``loc`` (pydantic's, tags included) accepts; for a union, the tagged member's."""
    tags = [p for p in loc if isinstance(p, str) and p in _UNION_MEMBERS]
    plain = _plain(loc)
    field = _field_at(model, plain) if plain else (model, [])
    if field is None:
        return []
    models = [o for o in _options(field[0]) if isinstance(o, type) and issubclass(o, BaseModel)]
    models = [m for m in models if m.__name__ in tags] or models
    return list(dict.fromkeys(k for m in models for k in m.model_fields))


_NUMBER_TEXT = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?)(\d+))?")


def _number_fix(text: str, integer: bool) -> str | None:
    """How to write the number ``text`` so that it reaches the schema as one, or None when ``text`` is no number.
    It arrived as text because it was quoted (``"2e-3"``), or read by a YAML 1.1 parser, for which ``2e-3`` is text
    (its floats need a dot and a signed exponent); ``2.0e-3`` unquoted is a float for every YAML reader."""
    m = _NUMBER_TEXT.fullmatch(text.strip())
    if not m or not (m.group(2) or m.group(3)):
        return None
    value = float(text)
    if integer:
        if not value.is_integer():
            return None
        return f"write {int(value)}, without quotes"
    sign, whole, frac, exp_sign, exp = m.groups()
    written = text.strip() if exp is None else f"{sign}{whole or '0'}.{frac or '0'}e{exp_sign or '+'}{exp}"
    if not isinstance(yaml.safe_load(written), float):  # the YAML 1.1 form, which YAML 1.2 reads too
        written = repr(value)
    return f"write {written}, without quotes"


def _source_of(loc: tuple[Any, ...], source: str, origins: dict[str, str] | None) -> str:
    """Where the value at ``loc`` came from: the override that set it (or the list or mapping around it, e.g. a
    profile's ``pretrain.phases``); ``source`` with the overrides' origins for an error about a mapping they
    changed part of (``pretrain.warmup_steps: expected <= max_steps``); else ``source``."""
    if not origins:
        return source
    dotted = ".".join(str(p) for p in loc)
    setting = [k for k in origins if k == dotted or dotted.startswith(k + ".")]
    if setting:
        return origins[max(setting, key=len)]
    inside = [origins[k] for k in origins if not dotted or k.startswith(dotted + ".")]
    return f"{source} with {' and '.join(dict.fromkeys(inside))}" if inside else source


def _one_line(err: dict[str, Any], source: str, origins: dict[str, str] | None,
              model: type[BaseModel]) -> str:
    """One pydantic error as the user's line: ``SOURCE: dotted.key: what was expected, got what`` (``source``
    the file, or the override's origin per :func:`_source_of`); ``model`` is the schema that was validated."""
    loc = _plain(tuple(err["loc"]))
    dotted = ".".join(str(p) for p in loc) or "(top level)"
    source = _source_of(loc, source, origins)
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = _allowed_keys(model, tuple(err["loc"])[:-1])
        match = difflib.get_close_matches(key, allowed, n=1)
        if len(loc) == 1:
            hint = f"did you mean {match[0]!r}?" if match else f"expected one of {_key_list(allowed, len(allowed))}"
            return f"{source}: unknown section {key!r} ({hint})"
        hint = f" (did you mean {match[0]!r}?)" if match else (f" (expected one of {_key_list(allowed)})" if allowed else "")
        return f"{source}: {dotted}: unknown key{hint}"
    if kind == "missing":
        field = _field_at(model, loc)
        what = f" ({_describe(*field)})" if field else ""
        return f"{source}: {dotted}: missing {'section' if len(loc) == 1 else 'key'}{what}"
    if kind == "value_error":
        return f"{source}: {str(err['msg']).removeprefix('Value error, ')}"
    field = _field_at(model, loc)
    expected = _describe(*field) if field else err["msg"]
    given = err.get("input")
    if kind in ("float_type", "int_type") and isinstance(given, str):
        fix = _number_fix(given, integer=kind == "int_type")
        if fix:
            noun = "an integer" if kind == "int_type" else "a number"
            return f"{source}: {dotted}: expected {noun} ({expected}), got the text {given!r} ({fix})"
    if kind == "int_type" and isinstance(given, float) and given.is_integer():  # max_steps: 1e5
        return f"{source}: {dotted}: expected an integer ({expected}), got the float {given!r} (write {int(given)})"
    return f"{source}: {dotted}: expected {expected}, got {json.dumps(given, default=str)}"


_UNION_MEMBERS = {"FileSource", "HubSource", "str"}  # pydantic's tags for the members of CorpusSource
_UNION_TAGS = _UNION_MEMBERS | {"constrained-float", "literal['grid']"}
_VALIDATOR_TAG = re.compile(r"^function-(after|before|wrap|plain)\[")  # a model validator's tag in pydantic's loc


def _ranked_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pydantic's errors for one params mapping, the one to report first at the head.

    A union (a corpus source: a packaged name, a :class:`FileSource` or a :class:`HubSource`) reports every
    member's errors; only the member the value was meant as counts (the fewest errors; a value of the wrong kind
    altogether last). Then an unknown key before anything else: a misspelt key also leaves its right spelling
    missing, and the typo is the error to fix; then the deepest key.
    """
    def member_at(err: dict[str, Any]) -> int | None:
        return next((i for i, p in enumerate(err["loc"]) if isinstance(p, str) and p in _UNION_MEMBERS), None)

    members: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for err in errors:
        i = member_at(err)
        if i is not None:
            members.setdefault(tuple(err["loc"][:i]), {}).setdefault(err["loc"][i], []).append(err)
    meant = {prefix: min(by_member, key=lambda m: (any(len(e["loc"]) == len(prefix) + 1 for e in by_member[m]),
                                                     len(by_member[m])))
             for prefix, by_member in members.items()}
    kept = [e for e in errors if (i := member_at(e)) is None or meant[tuple(e["loc"][:i])] == e["loc"][i]]
    return sorted(kept, key=lambda e: (e["type"] != "extra_forbidden", e["type"] == "string_type", -len(e["loc"])))


def _also(errors: list[dict[str, Any]], shown: int = 3) -> str:
    """The suffix naming the dotted keys of the errors after the first, so one run shows every key to fix (a
    section's cross-field checks raise one at a time; separate sections' all at once): ``""`` when there are none."""
    locs = [_plain(tuple(e["loc"])) for e in errors]
    # a misspelt key leaves its right spelling missing beside it: the same fix, not another error (the missing key
    # closest to the unknown one, as "did you mean" finds it; any other missing key of that mapping is listed)
    missing: dict[tuple, list[str]] = {}
    for err, loc in zip(errors, locs, strict=True):
        if err["type"] == "missing" and loc:
            missing.setdefault(loc[:-1], []).append(str(loc[-1]))
    respelt = set()
    for err, loc in zip(errors, locs, strict=True):
        if err["type"] == "extra_forbidden" and loc:
            respelt.update(loc[:-1] + (m,) for m in difflib.get_close_matches(str(loc[-1]), missing.get(loc[:-1], []),
                                                                               n=1))
    keys = list(dict.fromkeys(".".join(str(p) for p in loc) or "(top level)"
                              for err, loc in zip(errors[1:], locs[1:], strict=True)
                              if loc != locs[0] and not (err["type"] == "missing" and loc in respelt)))
    if not keys:
        return ""
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return f" (also wrong: {', '.join(keys[:shown])}{more})"



def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with dotted-key overrides applied (``{"pretrain.max_steps": 10}``).

    A nested mapping value in ``overrides`` (as in a profile file) is merged key by key.
    """
    out = copy.deepcopy(raw)
    for key, value in flatten(overrides).items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ParamsError(f"override {key}: {p} is not a mapping")
        node[parts[-1]] = copy.deepcopy(value)
    return out


class ParamsLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's floats: ``2e-3`` and ``5e-05`` are numbers, as DVC (ruamel.yaml, YAML
    1.2) reads them in ``dvc params diff`` and writes them into an experiment's ``params.yaml`` on ``--set-param``.
    PyYAML's YAML 1.1 rule (a dot and a signed exponent: ``2.0e-3``) would read them as text, so the stage and DVC
    would disagree on a value and a float DVC wrote would fail the schema."""


ParamsLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ParamsLoader.add_implicit_resolver(  # YAML 1.2 core schema floats (after int, which wins for 10 or 1_000)
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
               r"|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def parse_yaml(text: str) -> Any:
    """Parse YAML text with :class:`ParamsLoader` (raises ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=ParamsLoader)  # a SafeLoader subclass: no arbitrary objects


def read_yaml(path: Path) -> Any:
    """Parse a YAML file (floats as YAML 1.2 and DVC read them: :class:`ParamsLoader`). Raises ParamsError (one
    line) when missing or malformed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParamsError(f"{path}: file not found") from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{path}:{where} invalid YAML ({getattr(exc, 'problem', exc)})") from None


M = TypeVar("M", bound=BaseModel)


def validate_as(model: type[M], raw: Any, source: str = "params.yaml", origins: dict[str, str] | None = None) -> M:
    """Validate a parsed params mapping against ``model`` (a stage's :class:`View`, or the whole file's schema).

    Args:
        source: the file ``raw`` was read from, named in the error.
        origins: where each overridden dotted key came from (a profile file, ``--set-param``): an error in a value
            an override set names that origin instead of ``source``.

    Raises:
        ParamsError: one line naming the file (or override) and the dotted key, what was expected and, for a
            misspelt key or section, the close match ("did you mean"); for a number YAML read as text, how to
            write it.
    """
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: expected a mapping of stage sections, got {type(raw).__name__}")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        ranked = _ranked_errors(exc.errors())
        raise ParamsError(_one_line(ranked[0], source, origins, model) + _also(ranked)) from None


def read_params(path: str | Path = DEFAULT_PARAMS, overrides: dict[str, Any] | None = None,
                origins: dict[str, str] | None = None) -> tuple[Any, str, dict[str, str] | None]:
    """Read ``path`` and apply dotted ``overrides`` (:func:`apply_overrides`): ``(mapping, source, origins)``, the
    three arguments of :func:`validate_as`. ``origins`` says where each override came from (``{"pretrain.max_steps":
    "profiles/smoke.yaml"}``); an override without one is named ``override``. Under ``dvc exp run`` (DVC sets
    ``DVC_EXP_NAME``) the default file is the experiment's copy, which DVC wrote with the run's ``--set-param``
    values; ``source`` says so.

    Raises:
        ParamsError: the file is missing or is not valid YAML (one line).
    """
    raw = read_yaml(Path(path))
    if overrides:
        raw = apply_overrides(raw or {}, overrides)
        given = origins or {}
        origins = {}
        for key in flatten(overrides):  # a mapping override ({"pretrain": {...}}) gives each of its keys its origin
            named = [k for k in given if key == k or key.startswith(k + ".")]
            origins[key] = given[max(named, key=len)] if named else "override"
    source = str(path)
    if os.environ.get("DVC_EXP_NAME") and Path(path) == DEFAULT_PARAMS:
        source += f" of experiment {os.environ['DVC_EXP_NAME']} (with its dvc exp run --set-param values)"
    return raw, source, origins


def load_view(view: type[M], path: str | Path = DEFAULT_PARAMS, overrides: dict[str, Any] | None = None,
              origins: dict[str, str] | None = None) -> M:
    """Load and validate what one stage reads of ``params.yaml`` (plus optional dotted overrides, see
    :func:`read_params`). With :data:`RECORD_ENV` set, the view comes wrapped in :class:`RecordedParams`.

    Raises:
        ParamsError: one line naming the file (or the override) and the dotted key.
    """
    loaded = validate_as(view, *read_params(path, overrides, origins))
    if os.environ.get(RECORD_ENV):
        _start_recording(os.environ[RECORD_ENV])
        return RecordedParams(loaded, "", _READS)  # type: ignore[return-value]
    return loaded


# ------------------------------------------------------------------------------------- recording the reads
_READS: set[str] = set()
_RECORDING: list[str] = []


def _start_recording(record_file: str) -> None:
    """Register, once per process, the exit hook that appends this process's reads to ``record_file``."""
    if _RECORDING:
        return
    _RECORDING.append(record_file)

    def write() -> None:
        main = sys.modules.get("__main__")
        spec = getattr(main, "__spec__", None)
        module = spec.name if spec is not None else Path(sys.argv[0]).stem
        line = json.dumps({"cmd": " ".join(["python", "-m", module, *sys.argv[1:]]), "cwd": os.getcwd(),
                           "reads": sorted(_READS)})
        with open(record_file, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    atexit.register(write)


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _wrap(value: Any, path: str, reads: set[str]) -> Any:
    """``value`` read at ``path``: a model, mapping or list comes back wrapped (its own reads are recorded as they
    happen); a plain value is recorded as read and returned."""
    if isinstance(value, BaseModel | dict | list):
        return RecordedParams(value, path, reads)
    reads.add(path)
    return value


def _schema_method(cls: type, name: str) -> bool:
    """Whether ``name`` is a method the params schema defines (``stages.params``), not pydantic's."""
    owner = next((c for c in cls.__mro__ if name in vars(c)), None)
    return owner is not None and owner.__module__.startswith("stages.params")


class RecordedParams:
    """A read-only stand-in for a validated params object (a model, a mapping or a list) that adds to ``reads``
    the dotted key of every value read through it: a field or entry read, a ``model_dump`` (its included fields), a
    membership test (``name in finetune.models`` reads ``finetune.models.NAME``). Anything that can see the whole
    object (iterating, ``len``, ``items``, ``model_copy``, any other method) records the object's own key; a
    method the schema itself defines (e.g. ``FinetuneParams.settings_for``) runs on this view, so what it reads is
    recorded key by key.
    ``isinstance`` sees the wrapped object's class. Used only to check ``dvc.yaml``'s params lists
    (:data:`RECORD_ENV`)."""

    __slots__ = ("_target", "_path", "_reads")

    def __init__(self, target: Any, path: str, reads: set[str]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_reads", reads)

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: D105  (isinstance and pydantic's checks see the real class)
        return type(self._target)

    def _whole(self) -> Any:
        self._reads.add(self._path)
        return self._target

    def __getattr__(self, name: str) -> Any:
        target = self._target
        if isinstance(target, BaseModel):
            fields = type(target).model_fields
            if name in fields:
                return _wrap(getattr(target, name), _join(self._path, name), self._reads)
            attribute = getattr(type(target), name, None)
            if isinstance(attribute, property):  # computed from fields: read them through this view
                return attribute.fget(self)
            if isinstance(attribute, types.FunctionType) and _schema_method(type(target), name):
                return types.MethodType(attribute, self)  # a schema's own method reads through this view too
            if name == "model_dump":
                def model_dump(*args: Any, include: Any = None, exclude: Any = None, **kwargs: Any) -> Any:
                    keys = set(fields) if include is None else set(include)
                    for key in keys - set(exclude or ()):
                        self._reads.add(_join(self._path, key))
                    return target.model_dump(*args, include=include, exclude=exclude, **kwargs)
                return model_dump
        elif isinstance(target, dict) and name == "get":
            return lambda key, default=None: (self[key] if key in target else (self._reads.add(_join(self._path, key))
                                                                               or default))
        return getattr(self._whole(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"params are read-only ({self._path or 'params'}.{name})")

    def __getitem__(self, key: Any) -> Any:
        if isinstance(self._target, dict):
            return _wrap(self._target[key], _join(self._path, key), self._reads)
        return self._whole()[key]

    def __contains__(self, key: Any) -> bool:
        if isinstance(self._target, dict):
            self._reads.add(_join(self._path, key))
            return key in self._target
        return key in self._whole()

    def __iter__(self):
        return iter(self._whole())

    def __len__(self) -> int:
        return len(self._whole())

    def __bool__(self) -> bool:
        return bool(self._whole())

    def __eq__(self, other: Any) -> bool:
        return self._whole() == (other._whole() if isinstance(other, RecordedParams) else other)

    def __hash__(self) -> int:
        return hash(self._whole())

    def __repr__(self) -> str:
        return f"RecordedParams({self._path or 'params'})"
