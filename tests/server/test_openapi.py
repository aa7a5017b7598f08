"""docs/api/openapi.yaml and the server agree, both ways: every documented (method, path) is in
the server's route table (kRoutes in src/server/api.cc, plus GET /health, which is served
outside it) and every route there is documented; and a real daemon serves every documented
route (it does not answer with the router's "no route" 404 or with 405).

Python 3 standard library and PyYAML (python3-yaml). Run (as root, from tests/server):
/usr/bin/python3 -m unittest -v test_openapi
"""

import json
import os
import re
import unittest
from urllib.parse import quote

import yaml

from brigtest import DaemonTestCase, short

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OPENAPI = os.path.join(ROOT, "docs", "api", "openapi.yaml")
API_SOURCE = os.path.join(ROOT, "src", "server", "api.cc")

HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
# Answered by Api::Handle before the table is consulted.
HEALTH = ("GET", "/health")
METRICS = ("GET", "/metrics")

# {"POST", "/v1/sandboxes/{id}/commands", RunCommand, true},
ROUTE_ENTRY = re.compile(r'\{\s*"([A-Z]+)"\s*,\s*"(/[^"]*)"\s*,\s*\w+\s*,\s*(?:true|false)\s*\}')
ROUTE_TABLE = re.compile(r"\bkRoutes\s*\[\s*\]\s*=\s*\{(.*?)\n\s*\};", re.S)


def load_document():
    with open(OPENAPI, encoding="utf-8") as f:
        return yaml.safe_load(f)


def documented_routes(doc):
    """{(METHOD, path template)} of the document's `paths`."""
    return {(method.upper(), path)
            for path, item in (doc.get("paths") or {}).items()
            for method in item if method in HTTP_METHODS}


def server_routes():
    """{(METHOD, path template)} the server serves: the kRoutes table, parsed from the source,
    and GET /health."""
    with open(API_SOURCE, encoding="utf-8") as f:
        source = f.read()
    table = ROUTE_TABLE.search(source)
    if not table:
        raise AssertionError(f"no kRoutes table in {API_SOURCE}")
    routes = set(ROUTE_ENTRY.findall(table.group(1)))
    # Every line of the table that looks like an entry must have parsed: a changed entry shape
    # would otherwise drop routes silently.
    entry_lines = [line for line in table.group(1).splitlines() if line.strip().startswith("{")]
    if len(entry_lines) != len(ROUTE_ENTRY.findall(table.group(1))) or not routes:
        raise AssertionError(f"cannot parse every kRoutes entry in {API_SOURCE}:\n"
                             + table.group(1))
    for _, path in (HEALTH, METRICS):
        if not re.search(r'request\.path\s*==\s*"' + path + '"', source):
            raise AssertionError(f"{API_SOURCE} no longer serves {path} outside the table")
    return routes | {HEALTH, METRICS}


def operations(doc):
    """{(METHOD, path template): operation object}."""
    return {(method.upper(), path): op
            for path, item in doc["paths"].items()
            for method, op in item.items() if method in HTTP_METHODS}


def resolve(doc, ref):
    node = doc
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def fmt(routes):
    return "\n".join(f"  {m} {p}" for m, p in sorted(routes, key=lambda r: (r[1], r[0])))


class DocumentTest(unittest.TestCase):
    """The document against the server's source; no daemon."""

    @classmethod
    def setUpClass(cls):
        cls.doc = load_document()

    def test_document_is_openapi_3_1(self):
        self.assertIsInstance(self.doc, dict)
        self.assertRegex(str(self.doc.get("openapi")), r"^3\.1\.\d+$")
        self.assertTrue(self.doc.get("paths"), "no paths")

    def test_refs_resolve(self):
        unresolved = sorted({r for r in refs(self.doc)
                             if not r.startswith("#/") or resolve(self.doc, r) is None})
        self.assertEqual(unresolved, [], "unresolved $ref")

    def test_path_parameters_declared(self):
        for path, item in self.doc["paths"].items():
            wanted = set(re.findall(r"\{([^}]+)\}", path))
            for method, op in item.items():
                if method not in HTTP_METHODS:
                    continue
                declared = set()
                for p in (item.get("parameters") or []) + (op.get("parameters") or []):
                    p = resolve(self.doc, p["$ref"]) if "$ref" in p else p
                    if p and p.get("in") == "path":
                        declared.add(p["name"])
                with self.subTest(f"{method.upper()} {path}"):
                    self.assertEqual(declared, wanted, "path parameters")

    def test_every_documented_route_is_in_the_route_table(self):
        extra = documented_routes(self.doc) - server_routes()
        self.assertFalse(extra, "documented in openapi.yaml but not served (kRoutes / "
                         "/health):\n" + fmt(extra))

    def test_every_route_in_the_table_is_documented(self):
        missing = server_routes() - documented_routes(self.doc)
        self.assertFalse(missing, "served (kRoutes / /health) but not in openapi.yaml:\n"
                         + fmt(missing))


NO_PID = 999999  # no such process in the sandbox
NAME = "openapi-probe-" + os.urandom(4).hex()
PROBE_FILE = "openapi-probe/file.txt"
PROBE_DIR = "openapi-probe/dir"

# How to call each route without effects beyond the test's own sandbox, in the order they are
# sent: (query, body). Routes the document has and this table lacks are sent last, with an
# unknown query parameter and no body, which every handler refuses (400) before doing anything.
PROBES = {
    ("GET", "/health"): ({}, None),
    ("GET", "/metrics"): ({}, None),
    # A live sandbox of this name exists: it is returned (200) and nothing is created.
    ("POST", "/v1/sandboxes"): ({}, {"name": NAME}),
    ("GET", "/v1/sandboxes"): ({"name": NAME}, None),
    ("GET", "/v1/sandboxes/{id}"): ({}, None),
    ("POST", "/v1/sandboxes/{id}/timeout"): ({}, {"timeout": 600}),
    ("GET", "/v1/sandboxes/{id}/metrics"): ({}, None),
    ("POST", "/v1/sandboxes/{id}/pause"): ({}, None),
    ("POST", "/v1/sandboxes/{id}/resume"): ({}, None),
    ("POST", "/v1/sandboxes/{id}/commands"): ({}, {"argv": ["true"]}),
    ("GET", "/v1/sandboxes/{id}/commands"): ({}, None),
    ("GET", "/v1/sandboxes/{id}/commands/{pid}/output"): ({"follow": "false"}, None),
    ("POST", "/v1/sandboxes/{id}/commands/{pid}/stdin"): ({}, b"x"),
    ("POST", "/v1/sandboxes/{id}/commands/{pid}/stdin/close"): ({}, None),
    ("POST", "/v1/sandboxes/{id}/commands/{pid}/signal"): ({}, {"signal": "SIGTERM"}),
    ("POST", "/v1/sandboxes/{id}/commands/{pid}/resize"): ({}, {"rows": 24, "cols": 80}),
    ("GET", "/v1/sandboxes/{id}/commands/{pid}/wait"): ({"request_timeout": "5"}, None),
    ("PUT", "/v1/sandboxes/{id}/files"): ({"path": PROBE_FILE}, b"probe\n"),
    ("GET", "/v1/sandboxes/{id}/files"): ({"path": PROBE_FILE}, None),
    ("GET", "/v1/sandboxes/{id}/files/stat"): ({"path": PROBE_FILE}, None),
    ("POST", "/v1/sandboxes/{id}/files/mkdir"): ({}, {"path": PROBE_DIR}),
    ("GET", "/v1/sandboxes/{id}/files/list"): ({"path": PROBE_DIR}, None),
    # The stream ends with an `error` line (408) after a second.
    ("GET", "/v1/sandboxes/{id}/files/watch"): ({"path": PROBE_DIR, "request_timeout": "1"},
                                                None),
    ("POST", "/v1/sandboxes/{id}/files/move"): ({}, {"from": PROBE_FILE,
                                                     "to": PROBE_DIR + "/moved.txt"}),
    ("DELETE", "/v1/sandboxes/{id}/files"): ({"path": "openapi-probe"}, None),
    # A context in the test's sandbox; {ctx} is filled with an id no context has (404).
    ("POST", "/v1/sandboxes/{id}/contexts"): ({}, {}),
    ("GET", "/v1/sandboxes/{id}/contexts"): ({}, None),
    ("POST", "/v1/sandboxes/{id}/code"): ({}, {"code": "1 + 1"}),
    ("POST", "/v1/sandboxes/{id}/contexts/{ctx}/restart"): ({}, None),
    ("POST", "/v1/sandboxes/{id}/contexts/{ctx}/fork"): ({}, None),
    ("DELETE", "/v1/sandboxes/{id}/contexts/{ctx}"): ({}, None),
    # Refused before it kills anything (the class cleanup kills the sandbox).
    ("DELETE", "/v1/sandboxes/{id}"): ({"openapi_probe": "1"}, None),
}
UNKNOWN_ROUTE_PROBE = ({"openapi_probe": "1"}, None)


class ServedTest(DaemonTestCase):
    """Every documented route, against a real daemon."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.doc = load_document()
        status, sb = cls.daemon.request("POST", "/v1/sandboxes", {"name": NAME, "timeout": 600},
                                        timeout=120)
        assert status == 201, f"create: {status} {sb}"
        cls.sid = sb["id"]

    def fill(self, template):
        values = {"id": self.sid, "pid": str(NO_PID)}
        return re.sub(r"\{([^}]+)\}",
                      lambda m: quote(values.get(m.group(1), "openapi-probe"), safe=""), template)

    def send(self, method, path, body):
        """(status, the body parsed as JSON or None, the raw body)."""
        conn, resp = self.daemon.connect(method, path, body, timeout=60)
        try:
            data = resp.read()
        finally:
            conn.close()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = None  # a stream or a file's bytes
        return resp.status, parsed, data

    def test_every_documented_route_is_served(self):
        documented = operations(self.doc)
        order = list(PROBES)
        routes = sorted(documented, key=lambda r: order.index(r) if r in order else len(order))
        for method, template in routes:
            query, body = PROBES.get((method, template), UNKNOWN_ROUTE_PROBE)
            path = self.fill(template)
            if query:
                path += "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
            with self.subTest(f"{method} {template}"):
                status, answer, data = self.send(method, path, body)
                context = f"{method} {path} -> {status} {short(data)}"
                message = answer.get("message", "") if isinstance(answer, dict) else ""
                if status == 404 and str(message).startswith("no route"):
                    self.fail("the router has no such route: " + context)
                self.assertNotEqual(status, 405, "the router knows the path, not the method: "
                                    + context)
                self.assertNotEqual(status, 401, context)
                # The answer is one the document gives for this operation.
                responses = documented[(method, template)].get("responses") or {}
                self.assertIn(str(status), {str(code) for code in responses},
                              "status not documented for this operation: " + context)
        # The sandbox is the one the probes were about, and still there for the cleanup.
        status, sb = self.daemon.request("GET", f"/v1/sandboxes/{self.sid}")
        self.assertEqual((status, sb.get("state")), (200, "running"), sb)
        self.assertEqual([s["id"] for s in self.daemon.sandboxes()], [self.sid],
                         "the probes made another sandbox")


if __name__ == "__main__":
    unittest.main()
