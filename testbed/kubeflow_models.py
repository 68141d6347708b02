"""Check a manifest against Kubeflow's own TFJob API definition, strictly.

The definition is the one the Kubeflow Training Operator publishes as its Python SDK
(``kubeflow-training`` on PyPI: models generated from the operator's OpenAPI spec, e.g.
``kubeflow.training.models.KubeflowOrgV1TFJob``), with the Kubernetes types it refers to from the
``kubernetes`` client package (``V1PodTemplateSpec`` and below). Each model class lists its fields
(``openapi_types``: python name -> type; ``attribute_map``: python name -> JSON key).

The SDK's own deserialiser drops unknown keys, which would let a typo through (and the job would
run without it). This walk does not: an unknown key, a value of the wrong type, or a required field
left out (the generated setters refuse ``None`` for those) is an error naming its path.
"""

from __future__ import annotations

import re
from typing import Any

from .modules import require

INSTALL = "pip install -e '.[test]'"
_PRIMITIVES: dict[str, tuple[type, ...]] = {"str": (str,), "int": (int,), "bool": (bool,),
                                            "float": (int, float), "object": (object,),
                                            "datetime": (str,), "date": (str,)}


#: Fields whose values are Kubernetes quantities: the API takes an integer or a string there
#: (``nvidia.com/gpu: 1``), although the Python client types them as ``str``.
_QUANTITY_MAPS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests")}


class ManifestError(ValueError):
    """The manifest is not a valid instance of the API type."""


def _model(name: str) -> Any:
    training = require("kubeflow.training.models", INSTALL)
    if hasattr(training, name):
        return getattr(training, name)
    k8s = require("kubernetes.client.models", INSTALL)
    if hasattr(k8s, name):
        return getattr(k8s, name)
    raise ManifestError(f"no model {name} in kubeflow.training or kubernetes.client")


def validate(value: Any, type_name: str = "KubeflowOrgV1TFJob", path: str = "$") -> None:
    """Raise :class:`ManifestError` unless ``value`` (parsed YAML/JSON) is a valid ``type_name``."""
    if value is None:
        return
    if m := re.fullmatch(r"list\[(.+)\]", type_name):
        if not isinstance(value, list):
            raise ManifestError(f"{path}: expected a list, got {value!r}")
        for i, item in enumerate(value):
            validate(item, m.group(1), f"{path}[{i}]")
        return
    if m := re.fullmatch(r"dict\(str, (.+)\)", type_name):
        if not isinstance(value, dict):
            raise ManifestError(f"{path}: expected a mapping, got {value!r}")
        for key, item in value.items():
            validate(item, m.group(1), f"{path}.{key}")
        return
    if type_name in _PRIMITIVES:
        ok = isinstance(value, _PRIMITIVES[type_name]) and not (type_name in ("int", "float") and isinstance(value, bool))
        if not ok:
            raise ManifestError(f"{path}: expected {type_name}, got {value!r}")
        return
    cls = _model(type_name)
    if not isinstance(value, dict):
        raise ManifestError(f"{path}: expected a {type_name} mapping, got {value!r}")
    by_key = {json_key: name for name, json_key in cls.attribute_map.items()}
    unknown = sorted(set(value) - set(by_key))
    if unknown:
        raise ManifestError(f"{path}: unknown field(s) {unknown} for {type_name} (known: {sorted(by_key)})")
    for key, item in value.items():
        field_type = cls.openapi_types[by_key[key]]
        if (type_name, key) in _QUANTITY_MAPS and isinstance(item, dict):
            for name, quantity in item.items():
                if not isinstance(quantity, (str, int)) or isinstance(quantity, bool):
                    raise ManifestError(f"{path}.{key}.{name}: expected a quantity, got {quantity!r}")
            continue
        validate(item, field_type, f"{path}.{key}")
    try:  # the generated setters check required fields and enumerations
        cls(**{by_key[key]: item for key, item in value.items()})
    except ValueError as exc:
        raise ManifestError(f"{path}: {type_name}: {exc}") from None
