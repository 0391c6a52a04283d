"""``crossed-view RUN_DIR``: a study's, an audit's, a crossed-eval or a re-scoring folder in the browser, read-only.

    crossed-view runs/smoke                 # http://127.0.0.1:8766/ : the crossed grid, each cell's responses,
                                            # and any two cells item by item
    crossed-view runs/smoke --port 0        # any free port (the first line says which)

On a cluster node, forward the port from your own machine (the second line prints the command).
"""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

from crossed_rlvr.interrupt import stops_cleanly
from crossed_rlvr.limits import Parser, add_number

DEFAULT_PORT = 8766  # the annotation page's is 8765: both can run at once


def parser() -> Parser:
    p = Parser(prog="crossed-view", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", help="a study's, an audit's, a crossed-eval or a re-scoring folder (with scores.parquet)")
    add_number(p, "--port", 0, 65_535, default=DEFAULT_PORT, why="0: any free port")
    p.add_argument("--host", default="127.0.0.1", help="the address to serve on (default: this machine only)")
    p.add_argument("--allow-remote", action="store_true", help="let --host be an address other machines reach")
    return p


@stops_cleanly("crossed-view")
def main(argv: list[str] | None = None) -> int:
    from crossed_rlvr.view.data import RunData, ViewError, find_sources
    from crossed_rlvr.view.server import serve

    args = parser().parse_args(argv)
    data = RunData(find_sources(Path(args.run_dir)))  # a folder it cannot show: one line, exit 2 (stops_cleanly)
    try:
        server = serve(data, args.host, args.port, args.allow_remote)
    except PermissionError as err:
        raise ViewError(str(err)) from None
    port = server.server_port
    print(f"crossed-view: http://{args.host}:{port}/  ({data.grid['responses']:,} responses of "
          f"{len(data.cells)} cells; read-only; Ctrl-C stops)", flush=True)
    print(f"from another machine: ssh -N -L {port}:127.0.0.1:{port} {socket.gethostname()}  then open "
          f"http://127.0.0.1:{port}/", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
