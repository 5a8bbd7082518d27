"""word-stats: a Reson tool plugin in Python that reads a page through the
host's `http` import and counts its words.

The site comes from the plugin's settings (`config`), so the model only
names a path; the host sends the request only if the user granted the site.
"""

import heapq  # noqa: F401 -- Counter.most_common imports it lazily; see below
import json
import re
from collections import Counter

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.tool import ToolError_Denied, ToolError_Failed, ToolError_UnknownTool, ToolOutput
from wit_world.imports import config, http, log
from wit_world.imports.types import ToolSpec

# componentize-py bundles only the modules imported while it builds the
# component, so a module the standard library imports inside a function
# (heapq, above) must be imported here too.

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Path of the page on the configured site, e.g. /docs/intro."},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def word_stats(args):
    base = config.get("base_url")
    if not base:
        raise Err(ToolError_Failed("no `base_url` setting: set [plugins.word-stats] config = { base_url = \"...\" }"))
    top = int(config.get("top") or "3")
    url = base.rstrip("/") + "/" + args["path"].lstrip("/")
    try:
        response = http.send(http.Request("GET", url, [("accept", "text/plain")], None, 5000))
    except Err as err:
        if isinstance(err.value, http.HttpError_Denied):
            raise Err(ToolError_Denied(f"the host refused {url}: {err.value.value}"))
        raise Err(ToolError_Failed(f"GET {url}: {err.value}"))
    if response.status != 200:
        raise Err(ToolError_Failed(f"GET {url}: status {response.status}"))
    words = re.findall(r"[a-z']+", bytes(response.body).decode("utf-8", "replace").lower())
    common = ", ".join(f"{word} ({n})" for word, n in Counter(words).most_common(top))
    log.log(log.Level.INFO, f"counted {len(words)} words at {url}")
    return f"{len(words)} words, {len(set(words))} distinct; most common: {common}"


class Tool(exports.Tool):
    def list(self):
        return [ToolSpec("word_stats", "Counts the words of a page on the configured site.", json.dumps(SCHEMA))]

    def call(self, name, args, context):
        if name != "word_stats":
            raise Err(ToolError_UnknownTool(name))
        return ToolOutput(word_stats(json.loads(args)), None, False, [])
