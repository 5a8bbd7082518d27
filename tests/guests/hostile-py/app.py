"""Misbehaving Python tools for tests/system/authoring_python.rs: each attacks one
limit of the sandbox from inside CPython (componentize-py)."""

import json
import os
import sys
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.tool import ToolError_Denied, ToolError_UnknownTool, ToolOutput
from wit_world.imports import http, process
from wit_world.imports.types import ToolSpec


def resolve(path, context):
    # Relative paths are relative to the first granted directory, as the
    # host tells it; the guest's own working directory is `/`.
    return os.path.join(context.cwd or "/", path)


def echo(args, context):
    return args["text"]


def spin(args, context):
    n = 0
    while True:
        n += 1


def stubborn(args, context):
    # Catches everything Python can raise: the deadline is not an exception.
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass


def nap(args, context):
    time.sleep(args["ms"] / 1000)
    return f"slept {args['ms']} ms"


def grow(args, context):
    hoard = []
    while True:
        hoard.append(bytearray(1 << 20))


def grow_once(args, context):
    return str(len(bytearray(args["mb"] << 20)))


def flood(args, context):
    return "x" * args["bytes"]


def deep(args, context):
    # Recursion through C (repr of nested lists), with Python's own guard
    # lifted: the stack, not an exception, is what runs out.
    sys.setrecursionlimit(1 << 30)
    nested = []
    for _ in range(args["depth"]):
        nested = [nested]
    return str(len(repr(nested)))


def read(args, context):
    try:
        with open(resolve(args["path"], context)) as f:
            return f.read()
    except OSError as err:
        raise Err(ToolError_Denied(f"{type(err).__name__}: {err}"))


def read_unguarded(args, context):
    with open(resolve(args["path"], context)) as f:
        return f.read()


def write(args, context):
    try:
        with open(resolve(args["path"], context), "w") as f:
            f.write(args["text"])
        return "written"
    except OSError as err:
        raise Err(ToolError_Denied(f"{type(err).__name__}: {err}"))


def listdir(args, context):
    try:
        return json.dumps(sorted(os.listdir(args["path"])))
    except OSError as err:
        raise Err(ToolError_Denied(f"{type(err).__name__}: {err}"))


def fetch(args, context):
    try:
        response = http.send(http.Request("GET", args["url"], [], None, 2000))
    except Err as err:
        raise Err(ToolError_Denied(f"http: {err.value}"))
    return f"{response.status}: {bytes(response.body).decode()}"


def run(args, context):
    command = process.Command(args["program"], args["args"], None, [], None, 2000)
    try:
        output = process.run(command)
    except Err as err:
        raise Err(ToolError_Denied(f"process: {err.value}"))
    return bytes(output.stdout).decode()


def environ(args, context):
    return json.dumps(dict(os.environ))


TOOLS = {
    "py_echo": echo,
    "py_spin": spin,
    "py_stubborn": stubborn,
    "py_nap": nap,
    "py_grow": grow,
    "py_grow_once": grow_once,
    "py_flood": flood,
    "py_deep": deep,
    "py_read": read,
    "py_read_unguarded": read_unguarded,
    "py_write": write,
    "py_listdir": listdir,
    "py_fetch": fetch,
    "py_run": run,
    "py_environ": environ,
}


class Tool(exports.Tool):
    def list(self):
        return [ToolSpec(name, f"Hostile: {name}.", json.dumps({"type": "object"})) for name in TOOLS]

    def call(self, name, args, context):
        if name not in TOOLS:
            raise Err(ToolError_UnknownTool(name))
        return ToolOutput(TOOLS[name](json.loads(args), context), None, False, [])
