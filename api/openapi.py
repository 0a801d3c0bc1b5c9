"""The OpenAPI document with each tool's arguments: a plan step is described as one of a
tool step per registered tool (a union discriminated by `tool`, each with its tool's
argument schema), a model step, a wait step or an approval step, so generated clients
and /docs show what every tool takes.

The request is still validated by `longrun.contracts.Step` and the plan checks, whose
422s name the tool's accepted arguments; this only describes what they accept."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI

from longrun.catalogue import ToolSpec

REF = "#/components/schemas/"
KINDS = ("tool", "model", "wait", "approval")


def describe_tools(app: FastAPI, tools: Mapping[str, ToolSpec]) -> None:
    """Make `app`'s OpenAPI document describe each tool's step (built once, on first use)."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_tool_steps(build(), tools)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def with_tool_steps(document: dict[str, Any], tools: Mapping[str, ToolSpec]) -> dict[str, Any]:
    """`document` with its `Step` schema replaced by the union of step kinds."""
    document = copy.deepcopy(document)
    schemas: dict[str, Any] = document["components"]["schemas"]
    step = schemas["Step"]
    common = {k: v for k, v in step["properties"].items() if k not in (*KINDS, "args")}
    tool_steps: dict[str, str] = {}
    for name, spec in sorted(tools.items()):
        key = re.sub(r"[^A-Za-z0-9._-]", "_", name)
        args = spec.args_model.model_json_schema(ref_template=f"{REF}ToolArgs.{key}.{{model}}")
        for nested, schema in args.pop("$defs", {}).items():
            schemas[f"ToolArgs.{key}.{nested}"] = schema
        schemas[f"ToolArgs.{key}"] = args
        schemas[f"ToolStep.{key}"] = _variant(
            step,
            common,
            {
                "tool": {"type": "string", "const": name, "title": "Tool"},
                "args": {"$ref": f"{REF}ToolArgs.{key}"},
            },
            required=["tool", "args"] if args.get("required") else ["tool"],
            description=f"A `{name}` step: {spec.description}",
        )
        tool_steps[name] = f"{REF}ToolStep.{key}"
    schemas["ToolStep"] = {
        "oneOf": [{"$ref": ref} for ref in tool_steps.values()],
        "discriminator": {"propertyName": "tool", "mapping": tool_steps},
        "title": "ToolStep",
        "description": "A tool call; `args` as the named tool takes them (GET /v1/tools).",
    }
    for kind, spec_name, description in [
        ("model", "ModelSpec", "A model call."),
        ("wait", "WaitSpec", "A durable timer."),
        ("approval", "ApprovalSpec", "A gate a person must approve."),
    ]:
        schemas[f"{kind.capitalize()}Step"] = _variant(
            step,
            common,
            {kind: {"$ref": f"{REF}{spec_name}"}},
            required=[kind],
            description=description,
        )
    schemas["Step"] = {
        "oneOf": [{"$ref": f"{REF}{kind.capitalize()}Step"} for kind in KINDS],
        "title": "Step",
        "description": step.get("description", ""),
    }
    return document


def _variant(
    step: dict[str, Any],
    common: dict[str, Any],
    own: dict[str, Any],
    required: list[str],
    description: str,
) -> dict[str, Any]:
    """One kind of step: the common fields and its own."""
    properties = {"id": common["id"], **own}
    properties.update((k, v) for k, v in common.items() if k != "id")
    return {
        "type": "object",
        "properties": properties,
        "required": [*step.get("required", []), *required],
        "additionalProperties": False,
        "description": description,
    }
