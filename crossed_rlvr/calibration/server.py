"""The annotation page, served on localhost (``crossed-calibrate annotate``).

A single-threaded HTTP server (one writer to the SQLite store, so labels never interleave) with a
JSON API and one static page. What a stage may show is decided here, not in the page: Stage 1 items
carry only the anonymous id, question and response; Stage 2 items add the annotator's own locked
commitment, the reference and the permuted anonymous candidates; adjudication items add the two
annotators' labels. Model identity and reader scores are never sent.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from crossed_rlvr.calibration.labels import LabelError, LabelStore

PAGE = Path(__file__).with_name("page.html")


def next_item(store: LabelStore, annotator: str, stage: str) -> dict[str, Any]:
    """The annotator's next unlabelled item of ``stage`` (and progress), or ``done``."""
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
    sid = remaining[0]
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
                                                               if k == "correctness"}}
                          for a in store.annotators()[:2]]
    return {"done": False, "item": item, **progress}


def make_handler(store: LabelStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet: the page shows progress
            pass

        def _send(self, code: int, body: Any, kind: str = "application/json") -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path in ("/", "/index.html"):
                self._send(200, PAGE.read_text(), "text/html; charset=utf-8")
            elif url.path == "/api/next":
                try:
                    self._send(200, next_item(store, q.get("annotator", ""), q.get("stage", "stage1")))
                except PermissionError as err:
                    self._send(409, {"error": str(err)})
            else:
                self._send(404, {"error": f"no such page {url.path}"})

        def do_POST(self) -> None:
            url = urlparse(self.path)
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if url.path == "/api/label":
                    label = store.put(body.get("annotator", ""), body.get("stage", ""), body.get("sample_id", ""),
                                      body.get("label", {}), where="label")
                    self._send(200, {"saved": label})
                elif url.path == "/api/lock":
                    store.lock(body.get("annotator", ""), body.get("stage", ""))
                    self._send(200, {"locked": True})
                else:
                    self._send(404, {"error": f"no such endpoint {url.path}"})
            except (LabelError, json.JSONDecodeError) as err:
                self._send(409, {"error": str(err)})

    return Handler


def serve(store: LabelStore, host: str = "127.0.0.1", port: int = 8765) -> HTTPServer:
    return HTTPServer((host, port), make_handler(store))
