"""The parser of ``pcmr serve`` (the run side: :mod:`pcmr.cli.serve`)."""

from __future__ import annotations

import argparse

from pcmr.catalog import COMMANDS, DEFAULT_CANDIDATES, REGISTERED, REQUEST_TIMEOUT_S, RESCORE_ALL_MAX

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve",
        help=COMMANDS["serve"][1],
        description="Serve a gallery index (pcmr search --build) over HTTP: a page at / (query box, result "
        "grid with score and uncertainty, click an image for its captions) and a JSON API under /api. "
        "Needs the 'search' extra. See docs/search.md.",
    )
    parser.add_argument("index", metavar="INDEX", help="index folder (written by `pcmr search INDEX --build ...`)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1, loopback)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--similarity", default=None,
                        help="similarity of every query that names none (default: the one the index's model was "
                        "trained with, e.g. match_prob with its trained a and b for PCME; cosine when unknown)")
    parser.add_argument("--rerank", default="nns", help="re-ranker of every query (default nns)")
    parser.add_argument("--backend", default="auto", choices=list(REGISTERED["backends"]),
                        help="search backend (default auto: the index's candidate source, faiss or milvus, if any)")
    parser.add_argument("--candidates", type=int, default=None,
                        help=f"faiss/milvus backend: candidates per query re-scored exactly (default {DEFAULT_CANDIDATES}; "
                        f"is/csls: every item of a gallery of up to {RESCORE_ALL_MAX:,})")
    parser.add_argument("--device", default=None, help="torch device (default cpu)")
    parser.add_argument("--images", default=None, metavar="DIR",
                        help="folder the gallery's image files are served from (each item's path is relative to "
                        "it; the index records where they were, e.g. data/coco/images). Without it no image file "
                        "is served: the folder is never taken from the index")
    parser.add_argument("--trusted-proxy", default=None, metavar="ADDRESS",
                        help="address(es) of a reverse proxy (comma-separated) whose X-Forwarded-For header gives the "
                        "client address in the access log (default: none; the connection's own address is logged)")
    parser.add_argument("--no-access-log", dest="access_log", action="store_false",
                        help="do not print one line per request on stderr (default: print them)")
    parser.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT_S, metavar="SECONDS",
                        help="close a connection whose request (headers and body) has not arrived in full within "
                        f"SECONDS (default {REQUEST_TIMEOUT_S:g})")
    return parser
