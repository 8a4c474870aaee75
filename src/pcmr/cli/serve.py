"""``pcmr serve INDEX``: a web page and JSON API over a gallery index (FastAPI + uvicorn).

    pcmr serve idx/shapes-test                       # http://127.0.0.1:8000/
    pcmr serve idx/big --similarity wasserstein --port 9000
    pcmr serve idx/coco-test --images data/coco/images   # image files served only from this folder

Loopback only unless ``--host`` says otherwise. Endpoints: see ``pcmr.search.service`` and docs/search.md.
"""

from __future__ import annotations

import argparse
import socket
import sys

from pcmr.arguments import checked_name
from pcmr.inference import get_reranker
from pcmr.search.compose import search_notes
from pcmr.search.image_files import image_root, serving_folder
from pcmr.search.service import ServiceLimits, create_app
from pcmr.search.session import SearchSession
from pcmr.similarity import get_similarity

__all__ = ["run"]


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; ValueError in plain words when the port is taken or the
    address is not local, so nothing claims to be serving before the port is really held."""

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # reuse TIME_WAIT ports, never a live one
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        reason = "is already in use (another pcmr serve, or another program)" if err.errno in (98, 48) else (
            f"cannot be opened: {err.strerror or err}")
        raise ValueError(f"port {port} on {host} {reason}; choose another with --port") from None
    sock.set_inheritable(True)
    return sock


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    if not args.request_timeout > 0:
        raise ValueError(f"--request-timeout must be a positive number of seconds, got {args.request_timeout}")
    if args.similarity is not None:  # (None: the index's trained score)
        checked_name("--similarity", args.similarity, get_similarity)
    checked_name("--rerank", args.rerank, get_reranker)
    try:
        import uvicorn

        from pcmr.search.server import server_config
    except ImportError as err:
        raise ValueError("pcmr serve needs the 'search' extra: pip install 'pcmr[search]'") from err

    folder = serving_folder(args.images) if args.images is not None else None  # checked before the index loads
    session = SearchSession.open(args.index, device=args.device, similarity=args.similarity, rerank=args.rerank,
                                 backend=args.backend, candidates=args.candidates)
    index = session.index
    limits = ServiceLimits(request_timeout_s=args.request_timeout)
    app = create_app(session, limits=limits, access_log=sys.stderr if args.access_log else None,
                     image_folder=folder)
    for note in search_notes(index, args.rerank, backend=args.backend, candidates=args.candidates):
        print(f"warning: {note}", file=sys.stderr)
    names_files = any("path" in (m or {}) for m in index.image_metadata or [])
    if names_files and folder is None:
        recorded = image_root(index.meta, index.image_metadata)
        print("warning: the index names image files but no --images DIR was given, so no image file will be "
              "served" + (f"; the index records them under {recorded} (pass --images {recorded} to serve them)"
                          if recorded is not None else ""), file=sys.stderr)
    sock = bind_socket(args.host, args.port)
    shown_host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"serving {args.index} ({index.images.num} images, {index.captions.num} captions) on "
          f"http://{shown_host}:{args.port}/ (Ctrl+C to stop)", flush=True)
    server = uvicorn.Server(server_config(app, limits, trusted_proxy=args.trusted_proxy, log_level="warning",
                                          access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    return 0
