"""The web service behind ``pcmr serve``: a JSON API and a page over a :class:`pcmr.search.GalleryIndex`.

Endpoints (every error is a 4xx JSON object ``{"error": "..."}``):

- ``GET /api/health``: sizes, backend, whether text/image queries can be encoded;
- ``GET /api/search?text=...&k=10``: caption text -> images;
- ``POST /api/search/image?k=5`` (multipart field ``file``): uploaded image -> captions;
- ``GET /api/images/{index}?k=5``: one gallery image with its nearest captions;
- ``GET /api/captions/{index}``: one gallery caption;
- ``GET /images/{index}``: the image itself (shapes scenes are rendered; file datasets serve their file,
  only from the folder given when the server starts, ``image_folder``: :mod:`pcmr.search.image_files`);
- ``GET /``: the page (``pcmr/search/web``).

The three search endpoints take ``similarity=`` and ``rerank=`` to override the server's settings for
one query. Uploads are read at most :attr:`ServiceLimits.max_upload_bytes` (plus the form's framing)
before a 413, and an image's pixel count is checked from its header before it is decoded; decoding
runs outside the lock that serialises the searches (:mod:`pcmr.search.uploads`). Every query is one
:class:`~pcmr.search.session.SearchRequest` answered by the server's
:class:`~pcmr.search.session.SearchSession`: this module validates the HTTP request and serialises the
answer.

Needs the ``search`` extra (FastAPI, uvicorn, python-multipart).
"""

import io
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, TextIO, cast

from PIL import Image

from pcmr.data.images import ArrayImages
from pcmr.data.registry import load_dataset, renders_images
from pcmr.gaussian import DEFAULT_UNCERTAINTY_MEASURE
from pcmr.search.compose import DEFAULT_TOP_K
from pcmr.search.gallery import GalleryIndex
from pcmr.search.image_files import confined_file, public_metadata, serving_folder
from pcmr.search.presentation import score_note, uncertainty_percentile
from pcmr.search.session import SearchRequest, SearchSession
from pcmr.search.uploads import FORM_OVERHEAD_BYTES, DecodeBudget, RequestRefused, decode_upload, read_upload

__all__ = ["DecodeBudget", "FORM_OVERHEAD_BYTES", "ServiceLimits", "access_line", "create_app", "log_safe"]




@dataclass(frozen=True)
class ServiceLimits:
    """Request limits: results per query, text length, upload size (bytes), pixels of an uploaded image
    (checked from its header, before decoding), uploads decoded at once and their pixels in total (a
    decode waits for room, at most ``request_timeout_s``, then 503), seconds to receive a whole request once a connection
    is open (headers and body; ``pcmr serve``'s server closes slower connections) and seconds an idle
    kept-alive connection is held."""

    max_k: int = 100
    max_text_chars: int = 1000
    max_upload_bytes: int = 8 * 2**20
    max_image_pixels: int = 40_000_000
    request_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0
    #: uploads decoded at once, and their pixels in total (the default: one image at the cap): a decode
    #: takes about 8 bytes per pixel, so these bound the server's memory however many uploads arrive
    max_concurrent_decodes: int = 2
    max_decode_pixels: int = 40_000_000


class _Images:
    """Image bytes of gallery items: re-rendered shapes scenes or the files named in the metadata."""

    def __init__(self, index: Any, folder: str | os.PathLike[str] | None) -> None:
        self.index = index
        self.source = index.meta.get("image_source") or {}
        # only the folder given when the server starts, resolved once; never one the manifest names
        self.root = serving_folder(folder)  # None: no image file is ever served
        self._pixels: Any = None
        self._lock = threading.Lock()

    def available(self) -> bool:
        if self._rendered():
            return True
        return self.root is not None and bool(self.index.image_metadata) and "path" in (
            self.index.image_metadata[0] or {})

    def metadata(self, i: int) -> dict[str, Any]:
        """Item ``i``'s metadata as shown: its path relative to the image folder, never a server path."""
        return public_metadata(self.index.image_metadata[i] if self.index.image_metadata else None, self.root)

    def _rendered(self) -> bool:
        """Whether the gallery's images are rendered by its dataset (``DatasetSpec.renders_images``)."""
        return renders_images(str(self.source.get("kind")))

    def _rendered_pixels(self) -> Any:
        with self._lock:
            if self._pixels is None:
                # deterministic generator: re-rendered in memory, nothing written by the server
                split = load_dataset(self.source["kind"], self.source["split"],
                                     **{**self.source.get("config", {}), "cache": False})
                self._pixels = cast(ArrayImages, split.images).pixels  # uint8 [N, H, W, 3]: shapes are in memory
        return self._pixels

    def response(self, i: int) -> Any:
        from fastapi.responses import FileResponse, Response

        if self._rendered():
            pixels = self._rendered_pixels()
            if i >= len(pixels):
                raise RequestRefused(404, f"image {i} is not in the rendered shapes split")
            buffer = io.BytesIO()
            Image.fromarray(pixels[i]).save(buffer, format="PNG")
            return Response(buffer.getvalue(), media_type="image/png")
        path = (self.index.image_metadata[i] or {}).get("path") if self.index.image_metadata else None
        file = confined_file(self.root, path)
        if file is None:  # no file, or one outside the gallery's image folder: never sent
            raise RequestRefused(404, f"image {i} has no image file to serve")
        return FileResponse(file)


def log_safe(text: str) -> str:
    """``text`` with every control or non-printable character, ``"`` and ``\\`` written as an escape
    (``\\n``, ``\\x1b``, ``\\"``), so a request can never write a line break or a forged field into the log."""
    return "".join(c if c.isprintable() and c not in '"\\' else
                   (f"\\{c}" if c in '"\\' else c.encode("unicode_escape").decode("ascii")) for c in text)


def access_line(client: str, method: str, target: str, status: int, seconds: float) -> str:
    """One access-log line: UTC time, client address, request, status and duration (fields escaped by
    :func:`log_safe`)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"{stamp} {log_safe(client)} \"{log_safe(method)} {log_safe(target)}\" {status} {1000 * seconds:.1f} ms"


def _request_target(scope: Mapping[str, Any]) -> str:
    """The request target as the client sent it (still percent-encoded: ``%0A`` stays three characters)."""
    raw = scope.get("raw_path") or scope.get("path", "").encode("utf-8")
    query = scope.get("query_string") or b""
    return raw.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")


def create_app(index: GalleryIndex | SearchSession, *, similarity: str | None = None, rerank: str = "nns",
               backend: str = "auto", candidates: int | None = None, limits: ServiceLimits | None = None,
               access_log: TextIO | None = None, image_folder: str | os.PathLike[str] | None = None) -> Any:
    """A FastAPI application serving ``index`` (module docstring): a gallery index, searched by a
    :class:`~pcmr.search.session.SearchSession` with ``similarity``/``rerank``/``backend``/``candidates``
    as the settings of every query (``similarity`` None: the one the index's model was trained with,
    :func:`pcmr.search.compose.trained_similarity`; a query may override similarity and re-ranker), or
    such a session itself (its settings then). With ``access_log`` (a text stream, e.g. stderr) every
    request writes one :func:`access_line` to it. Image files are served only from ``image_folder``
    (resolved once; None: none are), each item's ``path`` relative to it (:mod:`pcmr.search.image_files`)."""
    from fastapi import FastAPI

    session = index if isinstance(index, SearchSession) else SearchSession(
        index, similarity=similarity, rerank=rerank, backend=backend, candidates=candidates)
    session.check_settings()  # an unknown name, or what an on-disk index cannot answer: ValueError before serving
    limits = limits or ServiceLimits()
    app = FastAPI(title="pcmr search", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.decoding = DecodeBudget(limits.max_concurrent_decodes, limits.max_decode_pixels,
                                      limits.request_timeout_s)
    if access_log is not None:
        _add_access_log(app, access_log)
    _add_error_handlers(app)
    images = _Images(session.index, image_folder)
    _add_search_routes(app, session, images, limits)
    _add_item_routes(app, session, images, limits)
    return app


def _add_access_log(app: Any, access_log: TextIO) -> None:
    from fastapi import Request

    @app.middleware("http")
    async def _log_request(request: Request, call_next: Any) -> Any:
        started = time.perf_counter()
        status = 500
        try:
            response = await call_next(request)
            status = response.status_code
            return response
        finally:
            target = _request_target(request.scope)
            client = request.client.host if request.client else "-"
            print(access_line(client, request.method, target, status, time.perf_counter() - started),
                  file=access_log, flush=True)


def _add_error_handlers(app: Any) -> None:
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(RequestRefused)
    async def _bad(request: Request, exc: RequestRefused) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": "; ".join(_plain_validation(e) for e in exc.errors()) or "invalid request"},
                            status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)


def _check_k(session: SearchSession, limits: ServiceLimits, k: int, modality: str) -> int:
    top = min(limits.max_k, session.index.gallery(modality).num)
    if not 1 <= k <= top:
        raise RequestRefused(400, f"k must be an integer in [1, {top}], got {k}")
    return k


def _settings(session: SearchSession, similarity: str | None, rerank: str | None) -> tuple[str, str]:
    """The similarity and re-ranker of one query: the server's unless the query string names others."""
    try:
        return session.settings(similarity, rerank)
    except ValueError as err:
        raise RequestRefused(400, str(err)) from None


def _answer(session: SearchSession, images: _Images, request: SearchRequest, modality: str) -> dict[str, Any]:
    """The result lines and warnings of a one-query request: ``k`` distinct lines when the gallery holds
    them (``modality``: of the gallery searched), warnings about the query, the search's notes, and one when
    fewer than ``k`` lines remain."""
    try:
        found = session.search(request).queries[0]
    except ValueError as err:
        raise RequestRefused(400, str(err)) from None
    return {"results": [_hit_json(images, line, modality) for line in found.lines],
            "warnings": found.warnings + found.notes + ([found.fewer] if found.fewer else [])}


def _hit_json(images: _Images, entry: dict[str, Any], modality: str) -> dict[str, Any]:
    """A shown result line (pcmr.search.presentation.shown_entries) for the page."""
    out = dict(entry)  # its uncertainty_percentile is the one rank the API gives
    if modality == "image":
        out.pop("text", None)
        out["metadata"] = images.metadata(entry["index"])
        out["image_url"] = f"/images/{entry['index']}" if images.available() else None
    else:
        out.pop("metadata", None)
    return out


def _require_encoder(session: SearchSession) -> None:
    if session.index.model is None:
        raise RequestRefused(409, "this index holds no model, so it cannot encode queries")


def _add_search_routes(app: Any, session: SearchSession, images: _Images, limits: ServiceLimits) -> None:
    from fastapi import Query, Request
    from starlette.concurrency import run_in_threadpool

    index = session.index

    @app.get("/api/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "images": index.images.num, "captions": index.captions.num,
                "dim": index.images.dim, "similarity": session.similarity, "rerank": session.rerank,
                "backend": {m: (f"{a.engine}/{a.index_type}" if a is not None else "exact")
                            for m, a in [(m, index.ann.get(m)) for m in ("image", "caption")]},
                "text_queries": index.model is not None, "images_served": images.available(),
                "score_note": score_note(session.similarity, session.rerank)}

    @app.get("/api/search")
    def search_text(text: Annotated[str, Query(description="caption query")], k: int = DEFAULT_TOP_K,
                    similarity: str | None = None, rerank: str | None = None) -> dict[str, Any]:
        if not text.strip():
            raise RequestRefused(400, "text must be a non-empty caption")
        if len(text) > limits.max_text_chars:
            raise RequestRefused(400, f"text is longer than {limits.max_text_chars} characters")
        _require_encoder(session)
        _check_k(session, limits, k, "image")
        chosen = _settings(session, similarity, rerank)
        found = _answer(session, images, SearchRequest(texts=[text], k=k, similarity=chosen[0], rerank=chosen[1]),
                        "image")
        return {"query": text, "similarity": chosen[0], "rerank": chosen[1], **found,
                "score_note": score_note(*chosen)}

    @app.post("/api/search/image")
    async def search_image(request: Request, k: int = 5, similarity: str | None = None,
                           rerank: str | None = None) -> dict[str, Any]:
        _require_encoder(session)
        _check_k(session, limits, k, "caption")
        chosen = _settings(session, similarity, rerank)
        filename, data = await read_upload(request, limits.max_upload_bytes)
        assert index.model is not None
        image_size = index.model.image_size
        if image_size is None:
            raise RequestRefused(400, "this model reads precomputed image features, not pixels; image queries need a "
                                   "model trained on pixel images")
        pixels = await run_in_threadpool(decode_upload, data, limits.max_image_pixels, int(image_size),
                                         app.state.decoding)
        query = SearchRequest(pixels=pixels[None], k=k, similarity=chosen[0], rerank=chosen[1])
        found = await run_in_threadpool(_answer, session, images, query, "caption")
        return {"query": filename, "similarity": chosen[0], "rerank": chosen[1], **found,
                "score_note": score_note(*chosen)}


def _add_item_routes(app: Any, session: SearchSession, images: _Images, limits: ServiceLimits) -> None:
    from fastapi.responses import HTMLResponse, Response

    index = session.index
    measure = index.meta.get("uncertainty_measure", DEFAULT_UNCERTAINTY_MEASURE)

    def percentile(modality: str, value: float | None) -> float | None:
        """The one uncertainty rank of the API: an item's percentile among its gallery's items (0-100)."""
        gallery = None if index.gallery(modality).is_point else index.item_uncertainty(modality)
        return uncertainty_percentile(value, gallery)

    def check_item(item: int, modality: str) -> None:
        n = index.gallery(modality).num
        if not 0 <= item < n:
            raise RequestRefused(404, f"unknown {modality} {item}: the gallery has {n} {modality}s (0..{n - 1})")

    @app.get("/api/images/{item}")
    def image_item(item: int, k: int = 5, similarity: str | None = None,
                   rerank: str | None = None) -> dict[str, Any]:
        check_item(item, "image")
        unc = None if index.images.is_point else float(index.item("image", item).uncertainty(measure))
        out = {"index": item, "id": index.image_ids[item], "metadata": images.metadata(item),
               "uncertainty": unc, "uncertainty_percentile": percentile("image", unc),
               "image_url": f"/images/{item}" if images.available() else None, "captions": []}
        if index.captions.num:
            _check_k(session, limits, k, "caption")
            chosen = _settings(session, similarity, rerank)
            found = _answer(session, images, SearchRequest(gaussian=index.item("image", item), modality="image",
                                                           k=k, similarity=chosen[0], rerank=chosen[1]),
                            "caption")
            out["captions"], out["warnings"] = found["results"], found["warnings"]
        return out

    @app.get("/api/captions/{item}")
    def caption_item(item: int) -> dict[str, Any]:
        check_item(item, "caption")
        unc = None if index.captions.is_point else float(index.item("caption", item).uncertainty(measure))
        return {"index": item, "id": index.caption_ids[item], "text": index.caption_texts[item],
                "uncertainty": unc, "uncertainty_percentile": percentile("caption", unc)}

    @app.get("/images/{item}")
    def image_file(item: int) -> Response:
        check_item(item, "image")
        return images.response(item)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return _asset("index.html")

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        types = {"app.js": "text/javascript", "style.css": "text/css"}
        if name not in types:
            raise RequestRefused(404, f"no static file {name!r}")
        return Response(_asset(name), media_type=types[name])


def _plain_validation(error: dict[str, Any]) -> str:
    """One request-validation error in plain words: ``k: input should be a valid integer (got 'ten')``
    (the field name without FastAPI's ``query.``/``body.`` prefix)."""
    location = [str(x) for x in error.get("loc", ()) if x not in ("query", "body", "path")]
    field = ".".join(location) or "request"
    message = str(error.get("msg", "invalid value"))
    message = message[:1].lower() + message[1:]
    given = error.get("input")
    shown = f" (got {given!r})" if isinstance(given, (str, int, float)) and len(str(given)) <= 40 else ""
    return f"{field}: {message}{shown}"


def _asset(name: str) -> str:
    return resources.files("pcmr.search").joinpath("web").joinpath(name).read_text(encoding="utf-8")
