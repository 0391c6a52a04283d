"""``crossed-view``'s server: one static page and a read-only JSON API over one run folder.

The standard library's threading HTTP server, as the annotation page's (calibration/server.py): no dependency, and
its checks are proven there. It answers GET only and writes nothing. It serves no file by its path: the page and
the API's answers are built from what :class:`RunData` read at start, so no request can reach a file outside the
run's data; a path holding ``..`` (percent-encoded or not) is refused outright. It answers its own Host only (DNS
rebinding) and no other origin, and sends the annotation page's content security policy: the page's own script by
its hash and nothing else, so model text, which the page inserts as text, could not run even were it markup.
Every answer is one page of rows (server-side paging): the browser never holds the whole run.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from crossed_rlvr.calibration.server import LOOPBACK, BadRequest, LocalPageHandler, security_headers
from crossed_rlvr.view.data import RunData, ViewError

PAGE = Path(__file__).with_name("page.html")
PAGE_TEXT = PAGE.read_text(encoding="utf-8")
PER_PAGE = 20  # responses a page of a cell shows
PAIRS_PER_PAGE = 10  # item pairs a page of the paired view shows
Refused = BadRequest  # an answer other than 200: its status and one line


def climbs(raw_path: str) -> bool:
    """Whether a request's path, decoded as often as it decodes, names a parent folder (``..``) or a backslash."""
    seen = raw_path
    for _ in range(4):  # %252e%252e: encoded twice
        if ".." in seen or "\\" in seen:
            return True
        decoded = unquote(seen)
        if decoded == seen:
            return False
        seen = decoded
    return True  # encoded more deeply than any page of ours would


class ViewHandler(LocalPageHandler):
    """The page and its JSON API over one run's data (``make_handler`` binds it)."""

    data: RunData
    headers_sent = security_headers(PAGE_TEXT)

    @staticmethod
    def _int(q: dict[str, str], name: str, default: int | None = None, top: int | None = None) -> int:
        raw = q.get(name)
        if raw is None and default is not None:
            return default
        if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
            raise Refused(400, f"{name}={raw!r} is not a number")
        value = int(raw)
        if top is not None and value >= top:
            raise Refused(404, f"no {name} {value}")
        return value

    def do_GET(self) -> None:
        try:
            self._check_origin()
            url = urlparse(self.path)
            if climbs(url.path):  # the query is never a path: a search for "..." is text
                raise Refused(400, "a path outside the run's data (..) is refused")
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            n_cells = len(self.data.cells)
            if url.path in ("/", "/index.html"):
                self._send(200, PAGE_TEXT, "text/html; charset=utf-8")
            elif url.path == "/api/grid":
                self._send(200, self.data.grid)
            elif url.path == "/api/cell":
                cid = self._int(q, "id", top=n_cells)
                self._send(200, self.data.cell_page(cid, self._int(q, "page", 0), PER_PAGE, q.get("q", "").strip()))
            elif url.path == "/api/response":
                cid = self._int(q, "id", top=n_cells)
                found = self.data.one(cid, q.get("item", ""), self._int(q, "sample", 0))
                if found is None:
                    raise Refused(404, f"no response to item {q.get('item')!r} in this cell")
                self._send(200, found)
            elif url.path == "/api/pair":
                a, b = self._int(q, "a", top=n_cells), self._int(q, "b", top=n_cells)
                self._send(200, self.data.pair_page(a, b, q.get("measure", "payload"), q.get("kind", "all"),
                                                    self._int(q, "page", 0), PAIRS_PER_PAGE))
            else:
                raise Refused(404, f"no such page {url.path}")
        except Refused as err:
            self._send(err.code, {"error": str(err)})
        except ViewError as err:
            self._send(400, {"error": str(err)})


def make_handler(data: RunData) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (ViewHandler,), {"data": data})


class Server(ThreadingHTTPServer):
    request_queue_size = 64  # a burst of page loads is queued, not reset (as the annotation page's server)
    daemon_threads = True


def serve(data: RunData, host: str = "127.0.0.1", port: int = 8766, allow_remote: bool = False) -> Server:
    if host not in LOOPBACK and not allow_remote:
        raise PermissionError(f"--host {host} serves the run's responses beyond this machine; pass --allow-remote "
                              "to mean it (an SSH port forward reaches 127.0.0.1 from anywhere)")
    return Server((host, port), make_handler(data))
