"""The annotation page, served on localhost (``crossed-calibrate annotate``).

A threaded HTTP server (one slow or idle client never stalls the others: each connection has its own
thread and a read timeout; writes to the SQLite store are serialised by a lock, so labels never
interleave) with a JSON API and one static page. Every malformed request gets a 4xx and a message:
a body that is not a JSON object of UTF-8 text, a missing or bad Content-Length, a body over 1 MiB,
a request from another origin, or a Host header that is not this server's (DNS rebinding). What a stage may show is decided here, not in the page: Stage 1 items
carry only the anonymous id, question and response; Stage 2 items add the annotator's own locked
commitment, the reference and the permuted anonymous candidates; adjudication items add the two
annotators' labels. Model identity and reader scores are never sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from crossed_rlvr.calibration.labels import LabelError, LabelStore

PAGE = Path(__file__).with_name("page.html")
MAX_BODY = 1 << 20  # bytes: a label is a few hundred
READ_TIMEOUT_S = 30.0


def content_security_policy(page: str) -> str:
    """The page's own script (by its hash) and nothing else: no other script, frame, form target or origin to
    talk to, so text shown from a response or a label can never run or send anything anywhere."""
    script = re.search(r"<script>(.*?)</script>", page, re.S)
    digest = base64.b64encode(hashlib.sha256((script.group(1) if script else "").encode()).digest()).decode()
    return ("default-src 'none'; script-src 'sha256-" + digest + "'; style-src 'unsafe-inline'; connect-src 'self'; "
            "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def security_headers(page: str) -> dict[str, str]:
    """The headers every answer of a local page's server carries: its content security policy, no Referer (a
    personal link's token never leaves in one), no framing, no type sniffing."""
    return {"Content-Security-Policy": content_security_policy(page), "Referrer-Policy": "no-referrer",
            "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"}


LOOPBACK = ("127.0.0.1", "localhost", "::1")


class BadRequest(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class LocalPageHandler(BaseHTTPRequestHandler):
    """A local page's server (this one, crossed-view's): answers with its page's security headers, only to its own
    Host (DNS rebinding) and to no other origin."""

    headers_sent: dict[str, str]  # the page's security_headers
    timeout = READ_TIMEOUT_S  # a connection that sends nothing is dropped, never waited on

    def log_message(self, *args: Any) -> None:  # quiet: the page shows progress
        pass

    def _send(self, code: int, body: object, kind: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for name, value in self.headers_sent.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _check_origin(self) -> None:
        """This server's own Host only (DNS rebinding), and no other origin."""
        address = self.server.server_address
        assert isinstance(address, tuple)  # a TCP server's (host, port), never a Unix socket's path
        host, port = address[:2]
        allowed = {f"{h}:{port}" for h in (*LOOPBACK, host)} | {f"[::1]:{port}"}
        if self.headers.get("Host") not in allowed:
            raise BadRequest(421, f"Host {self.headers.get('Host')!r} is not this server")
        origin = self.headers.get("Origin")
        if origin is not None and urlparse(origin).netloc not in allowed:
            raise BadRequest(403, f"requests from origin {origin!r} are refused")


def _pack_gate(store: LabelStore, stage: str) -> None:
    if store.pack is not None and stage != "stage1":
        raise PermissionError(f"this is {store.pack['annotator']}'s Stage 1 pack: {stage} opens in the calibration "
                              "folder once these labels are imported there")


def next_item(store: LabelStore, annotator: str, stage: str) -> dict[str, Any]:
    """The annotator's next unlabelled item of ``stage`` (and progress), or ``done``."""
    _pack_gate(store, stage)
    if stage == "stage2" and not store.locked(annotator, "stage1"):
        raise PermissionError("Stage 2 opens after you lock Stage 1: references stay hidden until then")
    if stage == "adjudication":
        todo = store.to_adjudicate()
        done = {i for (_, _, i) in store.labels(stage="adjudication")}
    else:
        todo = store.order(annotator)
        done = {i for (_, _, i) in store.labels(annotator, stage)}
    progress = {"done": len([i for i in todo if i in done]), "total": len(todo),
                "locked": store.locked(annotator, stage)}
    remaining = [i for i in todo if i not in done]
    if not remaining:
        return {"done": True, **progress}
    return {"done": False, "item": item_view(store, annotator, stage, remaining[0]), **progress}


def labelled_item(store: LabelStore, annotator: str, stage: str, sid: str) -> dict[str, Any]:
    """An item the person already labelled in ``stage``, with that label, to change it before the lock (undo)."""
    _pack_gate(store, stage)
    if stage == "stage2" and not store.locked(annotator, "stage1"):
        raise PermissionError("Stage 2 opens after you lock Stage 1: references stay hidden until then")
    if store.locked(annotator, stage):
        raise PermissionError(f"your {stage} is locked: its labels are final")
    saved = store.labels(None if stage == "adjudication" else annotator, stage)
    mine = {i: lab for (a, _, i), lab in saved.items() if stage == "adjudication" or a == annotator}
    if sid not in mine:
        raise PermissionError(f"{sid}: you have no {stage} label to change")
    return {"done": False, "item": item_view(store, annotator, stage, sid), "label": mine[sid]}


def item_view(store: LabelStore, annotator: str, stage: str, sid: str) -> dict[str, Any]:
    """What ``stage`` may show of one item (Stage 1: id, question, response; Stage 2 adds the person's locked
    commitment, the reference and the anonymous candidates; adjudication adds the two annotators' labels)."""
    row = store.sample[sid]
    item: dict[str, Any] = {"sample_id": sid, "question": row["question"], "response": row["response"]}
    if stage == "stage2":
        item["commitment"] = store.labels(annotator, "stage1")[(annotator, "stage1", sid)]
        item["reference"] = row["reference"]
        item["candidates"] = store.candidates(sid)
    if stage == "adjudication":
        item["reference"] = row["reference"]
        s1, s2 = store.labels(stage="stage1"), store.labels(stage="stage2")
        item["labels"] = [{**s1.get((a, "stage1", sid), {}), **{k: v for k, v in s2.get((a, "stage2", sid), {}).items()
                                                               if k in ("correctness", "reference_flag", "review", "note")}}
                          for a in store.annotators()[:2]]
    return item


class LabelHandler(LocalPageHandler):
    """The page and its JSON API over one label store (``make_handler`` binds the store)."""

    store: LabelStore
    writing: threading.Lock  # one writer of the store at a time
    headers_sent = security_headers(PAGE.read_text())

    def _body(self) -> dict[str, Any]:
        raw_length = self.headers.get("Content-Length")
        # isdigit() alone admits "²" and other Unicode digits that int() refuses
        if raw_length is None or not (raw_length.isascii() and raw_length.isdigit()):
            raise BadRequest(411 if raw_length is None else 400, f"Content-Length {raw_length!r} is not a length")
        length = int(raw_length)
        if length > MAX_BODY:
            raise BadRequest(413, f"a body of {length} bytes is over the limit of {MAX_BODY}")
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8") or "{}")
        except UnicodeDecodeError:
            raise BadRequest(400, "the body is not UTF-8 text") from None
        except json.JSONDecodeError as err:
            raise BadRequest(400, f"the body is not JSON ({err.msg})") from None
        if not isinstance(body, dict):
            raise BadRequest(400, f"the body must be a JSON object, got {type(body).__name__}")
        for key in ("annotator", "stage", "sample_id", "token"):
            if not isinstance(body.get(key, ""), str):
                raise BadRequest(400, f"field '{key}' must be text")
        if not isinstance(body.get("label", {}), dict):
            raise BadRequest(400, "field 'label' must be a JSON object")
        return body

    def _person(self, token: str | None, typed: str, stage: str) -> str:
        """Who asks: with declared roles, the token's person (a typed name that differs is refused) and only
        for a stage of their role; without roles (a store built in code: annotate refuses to serve one),
        the typed name."""
        if self.store.roles is None:
            return typed
        name = self.store.roles.name_of(token)
        if name is None:
            raise BadRequest(403, "no such link: open the page from your own link (token)")
        if typed and typed != name:
            raise BadRequest(403, f"this link is {name}'s; it cannot read or write {typed}'s labels")
        if stage and not self.store.roles.may(name, stage):
            raise BadRequest(403, f"{name} has no {stage} role in this calibration")
        return name

    def do_GET(self) -> None:
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            self._check_origin()
            if url.path in ("/", "/index.html"):
                self._send(200, PAGE.read_text(), "text/html; charset=utf-8")
            elif url.path == "/api/next":
                stage = q.get("stage", "stage1")
                who = self._person(q.get("token"), q.get("annotator", ""), stage)
                with self.writing:
                    self._send(200, next_item(self.store, who, stage))
            elif url.path == "/api/item":
                stage = q.get("stage", "stage1")
                who = self._person(q.get("token"), q.get("annotator", ""), stage)
                with self.writing:
                    self._send(200, labelled_item(self.store, who, stage, q.get("sample_id", "")))
            elif url.path == "/api/whoami":
                who = self._person(q.get("token"), "", "")
                role = "adjudicator" if self.store.roles and who in self.store.roles.adjudicators else "annotator"
                self._send(200, {"name": who, "role": role, "declared": self.store.roles is not None})
            else:
                self._send(404, {"error": f"no such page {url.path}"})
        except PermissionError as err:
            self._send(409, {"error": str(err)})
        except BadRequest as err:
            self._send(err.code, {"error": str(err)})

    def do_POST(self) -> None:
        url = urlparse(self.path)
        try:
            self._check_origin()
            body = self._body()
            who = self._person(body.get("token"), body.get("annotator", ""), body.get("stage", ""))
            with self.writing:
                if url.path == "/api/label":
                    label = self.store.put(who, body.get("stage", ""), body.get("sample_id", ""),
                                      body.get("label", {}), where="label")
                    self._send(200, {"saved": label})
                elif url.path == "/api/lock":
                    self.store.lock(who, body.get("stage", ""))
                    self._send(200, {"locked": True})
                else:
                    self._send(404, {"error": f"no such endpoint {url.path}"})
        except BadRequest as err:
            self._send(err.code, {"error": str(err)})
        except LabelError as err:
            self._send(409, {"error": str(err)})


def make_handler(store: LabelStore) -> type[BaseHTTPRequestHandler]:
    """A handler class serving ``store`` (http.server makes one handler object per request)."""
    return type("Handler", (LabelHandler,), {"store": store, "writing": threading.Lock()})


class Server(ThreadingHTTPServer):
    """The standard threading server with a listen backlog of 64 (socketserver's default of 5 reset the
    connections of a burst of simultaneous saves, which the page showed as "server unreachable")."""

    request_queue_size = 64


def serve(store: LabelStore, host: str = "127.0.0.1", port: int = 8765, allow_remote: bool = False
          ) -> ThreadingHTTPServer:
    if host not in LOOPBACK and not allow_remote:
        raise PermissionError(f"--host {host} serves the labels beyond this machine; pass --allow-remote to mean it")
    server = Server((host, port), make_handler(store))
    server.daemon_threads = True
    return server
