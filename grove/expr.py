"""A small expression language with two renderings: CEL text for the CRDs' `x-kubernetes-validations`, and a Python
evaluator over the same wire (camelCase JSON) data that `grove-temporal validate` and the workflows check.

A validation rule is written once, as an expression tree (see grove/rules.py); `cel()` renders it for the
apiserver and `value()` evaluates it here. Only the CEL subset the rules need exists: field access, `has()`,
literals, boolean and comparison operators, `size`, `string`, `duration`, `matches`, `in`, list indexing and the
`all` / `exists` / `filter` macros. Semantics follow CEL where the rules can tell the difference (`matches` is an
unanchored RE2 search, `&&`/`||` short-circuit, `size` counts code points).

`failures()` also says *where* a rule fails: every binding of the `all` macros under which the rule's check is
false, so that the Python rendering can name `cliqueNames[1]` where CEL can only name the list.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from grove.durations import DurationError, parse_duration

__all__ = [
    "Env",
    "EvalError",
    "Expr",
    "Msg",
    "SELF",
    "dur",
    "has",
    "lit",
    "size",
    "string",
]


class EvalError(Exception):
    """The expression cannot be evaluated on this data (CEL would report an evaluation error)."""


@dataclass(frozen=True)
class Env:
    """Variable bindings: value and wire path of each variable (`self` and the macros' iteration variables)."""

    values: Mapping[str, Any]
    paths: Mapping[str, str]

    def bind(self, name: str, value: Any, path: str) -> Env:
        return Env({**self.values, name: value}, {**self.paths, name: path})

    @staticmethod
    def of(node: Any, path: str) -> Env:
        return Env({"self": node}, {"self": path})


@dataclass(frozen=True)
class Render:
    """How to render: the CEL spelling of each variable (`self`, or `oldSelf.value()` for the transition form)."""

    names: Mapping[str, str] = field(default_factory=dict)

    def var(self, name: str) -> str:
        return self.names.get(name, name)


class Expr:
    """Base of every node. Python operators build trees: `&`, `|`, `~`, `<`, `<=`, `>`, `>=`, `+`; `.eq()`."""

    def cel(self, render: Render | None = None) -> str:
        return self._cel(render or Render())

    def _cel(self, render: Render) -> str:
        raise NotImplementedError

    def value(self, env: Env) -> Any:
        raise NotImplementedError

    def path(self, env: Env) -> str:
        raise EvalError(f"{self.cel()} does not name a field")

    def free_vars(self) -> set[str]:
        return set()

    def walk(self) -> Iterator[Expr]:
        """This node and every node below it."""
        yield self
        for item in dataclasses.fields(self):  # type: ignore[arg-type]
            child = getattr(self, item.name)
            if isinstance(child, Expr):
                yield from child.walk()

    def reads(self) -> set[str]:
        """The fields of `self` this expression reads, as `.a.b` paths."""
        return {p for node in self.walk() if isinstance(node, Get) and (p := node.self_path()) is not None}

    # --- builders -------------------------------------------------------------------------------------------
    def f(self, name: str) -> Get:
        return Get(self, name)

    def __getitem__(self, index: int) -> Index:
        return Index(self, lit(index))

    def __and__(self, other: Expr) -> Expr:
        return Bin("&&", self, other)

    def __or__(self, other: Expr) -> Expr:
        return Bin("||", self, other)

    def __invert__(self) -> Expr:
        return Not(self)

    def __lt__(self, other: object) -> Expr:
        return Bin("<", self, _expr(other))

    def __le__(self, other: object) -> Expr:
        return Bin("<=", self, _expr(other))

    def __gt__(self, other: object) -> Expr:
        return Bin(">", self, _expr(other))

    def __ge__(self, other: object) -> Expr:
        return Bin(">=", self, _expr(other))

    def __add__(self, other: object) -> Expr:
        return Bin("+", self, _expr(other))

    def __sub__(self, other: object) -> Expr:
        return Bin("-", self, _expr(other))

    def eq(self, other: object) -> Expr:
        return Bin("==", self, _expr(other))

    def ne(self, other: object) -> Expr:
        return Bin("!=", self, _expr(other))

    def contains(self, item: object) -> Expr:
        """`item in self` (self a list)."""
        return Bin("in", _expr(item), self)

    def matches(self, pattern: str) -> Expr:
        return Matches(self, pattern)

    def all(self, var: str, body: Expr) -> Expr:
        return Macro("all", self, var, body)

    def exists(self, var: str, body: Expr) -> Expr:
        return Macro("exists", self, var, body)

    def filter(self, var: str, body: Expr) -> Expr:
        return Macro("filter", self, var, body)

    __hash__ = object.__hash__


def _expr(value: object) -> Expr:
    return value if isinstance(value, Expr) else Lit(value)


def lit(value: object) -> Expr:
    return Lit(value)


@dataclass(frozen=True, eq=False)
class Lit(Expr):
    literal: Any

    def _cel(self, render: Render) -> str:
        value = self.literal
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        if isinstance(value, str):
            return cel_string(value)
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(Lit(item)._cel(render) for item in value) + "]"
        raise TypeError(f"no CEL literal for {value!r}")

    def value(self, env: Env) -> Any:
        return list(self.literal) if isinstance(self.literal, tuple) else self.literal


def cel_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\")
    if "'" in text and '"' not in text:
        return '"' + escaped + '"'
    return "'" + escaped.replace("'", "\\'") + "'"


@dataclass(frozen=True, eq=False)
class Var(Expr):
    name: str

    def _cel(self, render: Render) -> str:
        return render.var(self.name)

    def value(self, env: Env) -> Any:
        return env.values[self.name]

    def path(self, env: Env) -> str:
        return env.paths[self.name]

    def free_vars(self) -> set[str]:
        return {self.name}


SELF = Var("self")


@dataclass(frozen=True, eq=False)
class Get(Expr):
    target: Expr
    name: str

    def _cel(self, render: Render) -> str:
        return f"{self.target._cel(render)}.{self.name}"

    def value(self, env: Env) -> Any:
        container = self.target.value(env)
        if not isinstance(container, Mapping) or container.get(self.name) is None:
            raise EvalError(f"no such key: {self.name}")
        return container[self.name]

    def path(self, env: Env) -> str:
        base = self.target.path(env)
        return f"{base}.{self.name}" if base else self.name

    def free_vars(self) -> set[str]:
        return self.target.free_vars()

    def self_path(self) -> str | None:
        """`.a.b` when this is `self.a.b`, else None (CEL's fieldPath names fields of `self` only)."""
        if isinstance(self.target, Var):
            return f".{self.name}" if self.target.name == "self" else None
        if isinstance(self.target, Get):
            base = self.target.self_path()
            return None if base is None else f"{base}.{self.name}"
        return None


@dataclass(frozen=True, eq=False)
class Has(Expr):
    target: Get

    def _cel(self, render: Render) -> str:
        return f"has({self.target._cel(render)})"

    def value(self, env: Env) -> Any:
        container = self.target.target.value(env)
        return isinstance(container, Mapping) and container.get(self.target.name) is not None

    def free_vars(self) -> set[str]:
        return self.target.free_vars()


def has(target: Expr) -> Expr:
    if not isinstance(target, Get):
        raise TypeError("has() takes a field")
    return Has(target)


@dataclass(frozen=True, eq=False)
class Index(Expr):
    target: Expr
    index: Expr

    def _cel(self, render: Render) -> str:
        return f"{self.target._cel(render)}[{self.index._cel(render)}]"

    def value(self, env: Env) -> Any:
        items, index = self.target.value(env), self.index.value(env)
        if not isinstance(items, list) or not 0 <= index < len(items):
            raise EvalError("index out of range")
        return items[index]

    def free_vars(self) -> set[str]:
        return self.target.free_vars() | self.index.free_vars()


_COMPARE = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "in": lambda a, b: a in b,
}


@dataclass(frozen=True, eq=False)
class Bin(Expr):
    op: str
    left: Expr
    right: Expr

    def _cel(self, render: Render) -> str:
        return f"({self.left._cel(render)} {self.op} {self.right._cel(render)})"

    def value(self, env: Env) -> Any:
        if self.op == "&&":
            return bool(self.left.value(env)) and bool(self.right.value(env))
        if self.op == "||":
            return bool(self.left.value(env)) or bool(self.right.value(env))
        left, right = self.left.value(env), self.right.value(env)
        if self.op in {"<", "<=", ">", ">=", "+", "-"} and type(left) is not type(right):
            raise EvalError(f"no such overload: {type(left).__name__} {self.op} {type(right).__name__}")
        return _COMPARE[self.op](left, right)

    def free_vars(self) -> set[str]:
        return self.left.free_vars() | self.right.free_vars()


@dataclass(frozen=True, eq=False)
class Not(Expr):
    operand: Expr

    def _cel(self, render: Render) -> str:
        return f"!{self.operand._cel(render)}"

    def value(self, env: Env) -> Any:
        return not self.operand.value(env)

    def free_vars(self) -> set[str]:
        return self.operand.free_vars()


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """size(x), string(x), duration(x)."""

    function: str
    argument: Expr

    def _cel(self, render: Render) -> str:
        return f"{self.function}({self.argument._cel(render)})"

    def value(self, env: Env) -> Any:
        argument = self.argument.value(env)
        if self.function == "size":
            return len(argument)
        if self.function == "string":
            return _string(argument)
        if self.function == "duration":
            try:
                return parse_duration(argument)
            except DurationError as error:
                raise EvalError(str(error)) from None
        raise EvalError(f"unknown function {self.function}")

    def free_vars(self) -> set[str]:
        return self.argument.free_vars()


def _string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, str) and not value.isprintable():
        return repr(value)[1:-1]  # a name like '\n' shows escaped: a message stays one readable line
    return str(value)


def size(argument: Expr) -> Expr:
    return Call("size", argument)


def string(argument: Expr) -> Expr:
    return Call("string", argument)


def dur(argument: Expr | str) -> Expr:
    return Call("duration", _expr(argument))


@dataclass(frozen=True, eq=False)
class Matches(Expr):
    target: Expr
    pattern: str

    def _cel(self, render: Render) -> str:
        return f"{self.target._cel(render)}.matches({cel_string(self.pattern)})"

    def value(self, env: Env) -> Any:
        return re.search(self.pattern, self.target.value(env)) is not None

    def free_vars(self) -> set[str]:
        return self.target.free_vars()


@dataclass(frozen=True, eq=False)
class Macro(Expr):
    kind: str  # all | exists | filter
    target: Expr
    var: str
    body: Expr

    def _cel(self, render: Render) -> str:
        return f"{self.target._cel(render)}.{self.kind}({self.var}, {self.body._cel(render)})"

    def _bindings(self, env: Env) -> list[Env]:
        items = self.target.value(env)
        if not isinstance(items, list):
            raise EvalError(f"{self.kind}() needs a list")
        try:
            base = self.target.path(env)
        except EvalError:
            base = self.target.cel()
        return [env.bind(self.var, item, f"{base}[{index}]") for index, item in enumerate(items)]

    def value(self, env: Env) -> Any:
        if self.kind == "all":
            return all(self.body.value(inner) for inner in self._bindings(env))
        if self.kind == "exists":
            return any(self.body.value(inner) for inner in self._bindings(env))
        return [inner.values[self.var] for inner in self._bindings(env) if self.body.value(inner)]

    def free_vars(self) -> set[str]:
        return self.target.free_vars() | (self.body.free_vars() - {self.var})


# --- where a check fails ---------------------------------------------------------------------------------------
def failures(check: Expr, env: Env) -> list[Env]:
    """The bindings under which `check` is false: one per failing element of an `all`, recursively; `a || b`
    fails where `b` fails (write guards on the left); `a && b` where either fails; anything else at `env`."""
    if isinstance(check, Macro) and check.kind == "all":
        return [failed for inner in check._bindings(env) for failed in failures(check.body, inner)]
    if isinstance(check, Bin) and check.op == "||":
        return [] if check.value(env) else failures(check.right, env)
    if isinstance(check, Bin) and check.op == "&&":
        return failures(check.left, env) + failures(check.right, env)
    return [] if check.value(env) else [env]


# --- messages ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Msg:
    """A message with `{}` holes filled by expressions: Python formats it, CEL builds it as a messageExpression."""

    template: str
    args: Sequence[Expr] = ()

    def __init__(self, template: str, *args: Expr) -> None:
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "args", tuple(args))
        if template.count("{}") != len(args):
            raise ValueError(f"{template!r} has {template.count('{}')} holes for {len(args)} arguments")

    def text(self, env: Env) -> str:
        return self.template.format(*(_string(arg.value(env)) for arg in self.args))

    def free_vars(self) -> set[str]:
        return {name for arg in self.args for name in arg.free_vars()}
