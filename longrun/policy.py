"""The permission policy: which tools a server allows, and which calls need a person.

A TOML file (LONGRUN_POLICY_FILE) says per tool:

    [tools.shell]
    allowed = false                 # refused at submission and at call time

    [tools.python]
    approval = "always"             # or "never", or "by_side_effect" (the default)
    network = true                  # its processes may reach LONGRUN_HTTP_ALLOW_HOSTS

    [[tools.http_request.require_approval_when]]
    arg = "method"
    not_in = ["GET", "HEAD"]

    [[tools.write_file.require_approval_when]]
    arg = "path"
    not_prefix = "out/"

    [[tools.shell.secrets_vouched_when]]
    arg = "argv"                    # a list argument is compared as its words joined
    prefix = "./deploy.sh "         # by spaces

By default a call needs approval when it is irreversible, and a plan step may opt out with
`"requires_approval": false`. `approval = "always"` and `require_approval_when` rules bind:
no step can opt out of them. So does this one: a call that hands a secret to a command
(a tool that exposes secrets, such as `shell` with `secret_env`) needs approval unless a
`secrets_vouched_when` rule of the tool holds, since the command may pass the secret on in
any form, beyond what redaction can recognise. A run's own `tools` list can only narrow
what is allowed. Pure code, so the workflow evaluates it on the arguments a call really gets.
"""

from __future__ import annotations

import functools
import hashlib
import posixpath
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from longrun import secrets


class Condition(BaseModel):
    """A test on one argument of a call; the rule holds when every given test holds."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    arg: str
    in_: list[Any] | None = Field(None, alias="in")
    not_in: list[Any] | None = None
    prefix: str | None = None
    not_prefix: str | None = None

    @model_validator(mode="after")
    def _has_a_test(self) -> Condition:
        if all(t is None for t in (self.in_, self.not_in, self.prefix, self.not_prefix)):
            raise ValueError("a condition needs one of in, not_in, prefix, not_prefix")
        return self

    def holds(self, args: dict[str, Any], *, words: bool = False) -> bool:
        """Whether the call's arguments meet this condition; with `words`, a list of
        strings is compared as its items joined by spaces."""
        value = args.get(self.arg)
        text = ""
        if words and isinstance(value, list) and all(isinstance(v, str) for v in value):
            text = " ".join(value)
        elif isinstance(value, str) and value:
            # Compare paths as written canonically, so "./deploy/x" meets a "deploy/" rule;
            # a URL as written ("https://a/b" as a path would lose a slash).
            text = value if "://" in value else posixpath.normpath(value)
            if value.endswith("/") and not text.endswith("/"):
                text += "/"
        return (
            (self.in_ is None or value in self.in_)
            and (self.not_in is None or value not in self.not_in)
            and (self.prefix is None or text.startswith(self.prefix))
            and (self.not_prefix is None or not text.startswith(self.not_prefix))
        )


class ToolPolicy(BaseModel):
    """What the policy says about one tool."""

    model_config = ConfigDict(extra="forbid")

    allowed: bool = True
    approval: Literal["always", "never", "by_side_effect"] = "by_side_effect"
    require_approval_when: list[Condition] = Field(default_factory=list)
    secrets_vouched_when: list[Condition] = Field(default_factory=list)
    # Processes the tool starts may reach LONGRUN_HTTP_ALLOW_HOSTS (through the worker's
    # proxy); without it they have no network.
    network: bool = False


class Policy(BaseModel):
    """The server's permission policy (empty: every tool allowed, gates by side effect)."""

    model_config = ConfigDict(extra="forbid")

    tools: dict[str, ToolPolicy] = Field(default_factory=dict)

    def digest(self) -> str:
        """A short name of this policy's content, for the audit to say which one a run
        was admitted under."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    def of(self, tool: str) -> ToolPolicy:
        """The policy of one tool."""
        return self.tools.get(tool) or ToolPolicy()

    def allows(self, tool: str) -> bool:
        """Whether the tool may be called at all."""
        return self.of(tool).allowed

    def binding_approval(self, tool: str, args: dict[str, Any]) -> str | None:
        """Why this call needs approval whatever the step says, or None."""
        rules = self.of(tool)
        if rules.approval == "always":
            return f"policy: {tool} always needs approval"
        for condition in rules.require_approval_when:
            if condition.holds(args):
                rule = condition.model_dump(exclude_none=True, by_alias=True)
                return f"policy: {tool} needs approval when {rule}"
        return None

    def secret_approval(self, tool: str, args: dict[str, Any]) -> str | None:
        """Why a call that hands the named secrets to a command needs approval, or None
        when it names none or a `secrets_vouched_when` rule of the tool holds."""
        names = secrets.named(args)
        if not names:
            return None
        if any(c.holds(args, words=True) for c in self.of(tool).secrets_vouched_when):
            return None
        return f"policy: {tool} gets the secrets {', '.join(names)} and no rule vouches for it"

    def default_approval(self, tool: str, effect: str) -> bool:
        """Whether a call needs approval when the step does not say; `effect` is the
        call's side-effect class (read_only, reversible, irreversible)."""
        approval = self.of(tool).approval
        if approval == "by_side_effect":
            return effect == "irreversible"
        return approval == "always"

    def needs_approval(self, tool: str, args: dict[str, Any], effect: str) -> bool:
        """For a call nobody opted out of: the default, or a binding rule."""
        return self.default_approval(tool, effect) or self.binding_approval(tool, args) is not None


class PolicyError(ValueError):
    """The policy file cannot be used; the message says why."""


@functools.cache
def policy_in_force(path: Path | None) -> Policy:
    """The policy a worker enforces where calls happen: the file as it read it first."""
    return load_policy(path)


def forbidding(path: Path | None, tool: str) -> str | None:
    """Why the policy in force forbids calling `tool` at all, or None. Checked by the
    activity, whatever policy the run was started with: a retry, a fork, a schedule's
    run or a run started before the policy changed calls only what is allowed now."""
    if policy_in_force(path).allows(tool):
        return None
    return f"the policy in force forbids the tool '{tool}' (LONGRUN_POLICY_FILE)"


def load_policy(path: Path | None) -> Policy:
    """The policy in `path` (TOML), or the empty policy when no file is configured."""
    if path is None:
        return Policy()
    try:
        return Policy.model_validate(tomllib.loads(path.read_text()))
    except (OSError, tomllib.TOMLDecodeError, ValidationError) as exc:
        raise PolicyError(f"policy file {path}: {exc}") from exc
