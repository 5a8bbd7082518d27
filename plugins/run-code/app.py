"""run-code: runs the Python a model writes, inside this component's own
CPython, so the code has only what the host grants the plugin: the
directories named in its grant, sites through the host's `http` import, and
the plugin's deadline, memory and output limits. There are no processes,
no sockets and no native modules to reach past that.

Each call runs in a fresh interpreter, unless it asks to keep one: the
manifest names `keep` as the plugin's session argument, so the host runs a
`{"keep": true}` call in an instance kept for its trace alone.
"""

import ast
import builtins
import contextlib
import importlib
import io
import json
import linecache
import os
import sys
import traceback

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.tool import ToolError_Failed, ToolError_InvalidArguments, ToolError_UnknownTool, ToolOutput
from wit_world.imports import http
from wit_world.imports.types import Image, ToolSpec

# componentize-py keeps only the modules imported while it builds the
# component (later imports find no files), so the whole standard library is
# imported here, each module that imports under WASI at all. Skipped: what
# only opens windows or browsers, prints on import, or installs packages.
_SKIP = {
    "__main__", "antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo",
    "test", "ensurepip", "venv", "pydoc", "pydoc_data", "webbrowser", "__phello__",
}
# A package's submodules too (the codecs `encodings.idna` that sockets
# need, `xml.etree.ElementTree`, `email.mime.text`, ...), but no tests.
import pkgutil


def _import_all(name):
    try:
        module = importlib.import_module(name)
    except BaseException:
        return
    for sub in pkgutil.iter_modules(getattr(module, "__path__", None) or []):
        if not sub.name.startswith(("test", "_test", "idle_test")):
            _import_all(f"{name}.{sub.name}")


for _name in sorted(sys.stdlib_module_names - _SKIP):
    _import_all(_name)

# Pure-Python packages added to the build (`pip install --target
# plugins/run-code/packages NAME`), imported now for the same reason.
_PACKAGES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "packages")
if os.path.isdir(_PACKAGES):
    sys.path.insert(0, _PACKAGES)
    for _module in pkgutil.iter_modules([_PACKAGES]):
        if not _module.name.startswith("_"):
            try:
                importlib.import_module(_module.name)
            except BaseException as _error:
                print(f"run-code: package {_module.name} did not import: {_error!r}", file=sys.stderr)

FILENAME = "<code>"
# Each stream the model sees, at most; the rest is counted, not kept.
MAX_STREAM_CHARS = 16_000
MAX_VALUE_CHARS = 5_000
IMAGE_TYPES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

SCHEMA = {
    "type": "object",
    "properties": {
        "code": {
            "type": "string",
            "description": "Python 3 source. The value of a last bare expression is returned, like a notebook cell.",
        },
        "keep": {
            "type": "boolean",
            "description": "Run in this conversation's kept interpreter, so variables and imports from earlier "
            "keep=true calls are still there. Default false: a fresh interpreter.",
        },
    },
    "required": ["code"],
    "additionalProperties": False,
}

DESCRIPTION = (
    "Runs Python code in a sandboxed interpreter and returns its stdout, stderr and the value of the last "
    "expression. The standard library is available; there are no subprocesses, sockets or native "
    "extensions. Files: only the directories the user granted (read-only unless granted read-write); "
    "relative paths start in the first. Network: fetch(url, method='GET', headers=None, body=None) "
    "reaches granted sites and returns an object with .status, .headers, .body (bytes) and .text(). "
    "show(data) returns an image (PNG, JPEG or GIF bytes); image files the code writes are returned too."
)


class Capped(io.StringIO):
    """A stream that keeps the first MAX_STREAM_CHARS characters and counts the rest."""

    def __init__(self):
        super().__init__()
        self.dropped = 0

    def write(self, text):
        room = max(MAX_STREAM_CHARS - self.tell(), 0)
        if room < len(text):
            self.dropped += len(text) - room
        super().write(text[:room])
        return len(text)

    def text(self):
        body = self.getvalue()
        if self.dropped:
            body += f"\n… {self.dropped} more characters not shown"
        return body


class Response:
    """What fetch() returns."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = dict(headers)
        self.body = bytes(body)

    def text(self, encoding="utf-8"):
        return self.body.decode(encoding, "replace")

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status}, {len(self.body)} bytes>"


def fetch(url, method="GET", headers=None, body=None, timeout_ms=None):
    """An HTTP request through the host, which sends it only to granted sites."""
    if isinstance(body, str):
        body = body.encode()
    request = http.Request(method, url, list((headers or {}).items()), body, timeout_ms)
    try:
        response = http.send(request)
    except Err as err:
        reason = getattr(err.value, "value", None) or type(err.value).__name__.removeprefix("HttpError_").lower()
        if isinstance(err.value, http.HttpError_Denied):
            raise PermissionError(f"{method} {url}: {reason}") from None
        raise OSError(f"{method} {url}: {reason}") from None
    return Response(response.status, response.headers, response.body)


def image_type(data):
    for magic, media_type in IMAGE_TYPES:
        if data.startswith(magic):
            return media_type
    return None


class Run:
    """One call's captured output, images and written files."""

    def __init__(self):
        self.stdout = Capped()
        self.stderr = Capped()
        self.images = []
        self.written = []

    def show(self, data):
        data = bytes(data)
        media_type = image_type(data)
        if media_type is None:
            raise ValueError("show() takes PNG, JPEG or GIF bytes")
        self.images.append(Image(media_type, data))

    @contextlib.contextmanager
    def watching_writes(self):
        """Notes the files the code opens to write, so images it saves come back."""
        real_open = builtins.open

        def open_noting(file, mode="r", *args, **kwargs):
            handle = real_open(file, mode, *args, **kwargs)
            if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+"):
                self.written.append(os.path.abspath(os.fsdecode(file)))
            return handle

        builtins.open = io.open = open_noting
        try:
            yield
        finally:
            builtins.open = io.open = real_open

    def saved_images(self):
        for path in dict.fromkeys(self.written):
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError:
                continue
            media_type = image_type(data)
            if media_type:
                self.images.append(Image(media_type, data))


def split_last_expression(code):
    """The code's statements, and its last one apart when it is a bare expression."""
    tree = ast.parse(code, FILENAME, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    return compile(tree, FILENAME, "exec"), (compile(last, FILENAME, "eval") if last else None)


def user_traceback(error):
    """The traceback from the model's code down, without this plugin's frames."""
    trace = traceback.TracebackException.from_exception(error)
    frames = trace.stack
    while frames and frames[0].filename != FILENAME:
        frames.pop(0)
    trace.stack = traceback.StackSummary.from_list([frame for frame in frames if frame.filename != __file__])
    return "".join(trace.format()).rstrip()


def execute(code, namespace, cwd):
    run = Run()
    try:
        body, last = split_last_expression(code)
    except SyntaxError as error:
        raise Err(ToolError_Failed("".join(traceback.format_exception_only(error)).rstrip()))
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    namespace["show"] = run.show
    namespace["fetch"] = fetch
    value = None
    error = None
    if cwd:
        os.chdir(cwd)
    with run.watching_writes(), contextlib.redirect_stdout(run.stdout), contextlib.redirect_stderr(run.stderr):
        try:
            exec(body, namespace)
            if last is not None:
                value = eval(last, namespace)
        except SystemExit as exit:
            if exit.code not in (None, 0):
                error = f"SystemExit: {exit.code}"
        except BaseException as raised:
            error = user_traceback(raised)
    run.saved_images()
    if isinstance(value, (bytes, bytearray)) and image_type(value):
        run.show(value)
        value = None
    parts = []
    for label, stream in (("stdout", run.stdout), ("stderr", run.stderr)):
        text = stream.text()
        if text:
            parts.append(f"{label}:\n{text.rstrip()}")
    if value is not None:
        shown = repr(value)
        if len(shown) > MAX_VALUE_CHARS:
            shown = shown[:MAX_VALUE_CHARS] + f" … ({len(shown) - MAX_VALUE_CHARS} more characters)"
        parts.append(f"value: {shown}")
    if run.images:
        parts.append(f"images: {len(run.images)}")
    if error is not None:
        parts.append(error)
        raise Err(ToolError_Failed("\n".join(parts)))
    return ToolOutput("\n".join(parts) or "(no output)", None, False, run.images)


# The namespace of a kept interpreter's calls, and how many it has run.
kept_namespace = None
kept_calls = 0


class Tool(exports.Tool):
    def list(self):
        return [ToolSpec("run_code", DESCRIPTION, json.dumps(SCHEMA))]

    def call(self, name, args, context):
        global kept_namespace, kept_calls
        if name != "run_code":
            raise Err(ToolError_UnknownTool(name))
        try:
            args = json.loads(args)
            code = args["code"]
        except (ValueError, KeyError, TypeError) as error:
            raise Err(ToolError_InvalidArguments(f"expected {{\"code\": \"...\"}}: {error}"))
        if not args.get("keep"):
            return execute(code, {"__name__": "__main__"}, context.cwd)
        fresh = kept_namespace is None
        if fresh:
            kept_namespace = {"__name__": "__main__"}
        kept_calls += 1
        note = "[a new kept interpreter]" if fresh else f"[kept interpreter, call {kept_calls}]"
        try:
            output = execute(code, kept_namespace, context.cwd)
        except Err as err:
            err.value.value = f"{note}\n{err.value.value}"
            raise
        output.text = f"{note}\n{output.text}"
        return output
