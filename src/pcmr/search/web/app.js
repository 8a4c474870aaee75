"use strict";
// The page of `pcmr serve`: text query -> grid of images; click an image -> its nearest captions.
// The query and k live in the URL (?q=...&k=...), so a result page can be shared and the back
// button returns to the previous query.

const $ = (id) => document.getElementById(id);

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

function showWarnings(warnings) {
  const list = warnings || [];
  $("warning").textContent = list.join(" ");
  $("warning").hidden = list.length === 0;
}

async function getJSON(url, options) {
  let response;
  try {
    response = await fetch(url, options);
  } catch (err) {
    throw new Error("could not reach the search server; is pcmr serve still running?");
  }
  let body = null;
  try {
    body = await response.json();
  } catch (err) {
    body = null;
  }
  if (!response.ok) {
    const detail = body && body.error ? body.error : `the server answered with status ${response.status}`;
    throw new Error(detail);
  }
  return body;
}

function ordinal(value) {
  const n = Math.round(value);
  const suffix = (n % 100 >= 10 && n % 100 <= 20) ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th");
  return `${n}${suffix}`;
}

function uncertaintyBar(hit) {
  const bar = document.createElement("div");
  bar.className = "bar";
  if (hit.uncertainty === null || hit.uncertainty === undefined) {
    bar.title = "no uncertainty (point embedding)";
    bar.classList.add("empty");
  } else {
    const pct = hit.uncertainty_percentile;
    bar.title = `uncertainty: ${pct === null ? "?" : ordinal(pct)} percentile of the gallery ` +
      `(raw value ${hit.uncertainty.toFixed(3)})`;
  }
  const fill = document.createElement("div");
  fill.style.width = `${Math.round(hit.uncertainty_percentile ?? 0)}%`;
  bar.appendChild(fill);
  return bar;
}

function imageCard(hit) {
  const card = document.createElement("div");
  card.className = "card";
  card.dataset.index = hit.index;
  let picture;
  if (hit.image_url) {
    picture = document.createElement("img");
    picture.src = hit.image_url;
    picture.alt = `image ${hit.id}`;
  } else {
    picture = document.createElement("div");
    picture.className = "noimage";
    picture.textContent = `image ${hit.id}`;
  }
  card.appendChild(picture);
  const meta = document.createElement("div");
  meta.className = "meta";
  const rank = document.createElement("span");
  rank.textContent = `#${hit.rank}`;
  const score = document.createElement("span");
  score.className = "score";
  score.textContent = hit.score.toFixed(4);
  meta.append(rank, score);
  card.appendChild(meta);
  card.appendChild(uncertaintyBar(hit));
  const file = hit.metadata && hit.metadata.file;
  if (file) {  // your own images: the file name and the caption written for it
    const name = document.createElement("div");
    name.className = "file";
    name.textContent = file;
    card.appendChild(name);
    const captions = hit.metadata.captions || [];
    if (captions.length) {
      const caption = document.createElement("div");
      caption.className = "labels";
      caption.textContent = captions[0];
      caption.title = captions.join("\n");
      card.appendChild(caption);
    }
  }
  const labels = (hit.metadata && hit.metadata.labels) || [];
  if (labels.length) {
    const text = document.createElement("div");
    text.className = "labels";
    text.textContent = labels.join(", ");
    card.appendChild(text);
  }
  card.addEventListener("click", () => showImage(hit.index, hit.metadata));
  return card;
}

function captionRows(captions) {
  const box = document.createElement("div");
  for (const hit of captions) {
    const row = document.createElement("div");
    row.className = "caption-row";
    row.textContent = `${hit.rank}. ${hit.text}  (${hit.score.toFixed(4)})`;
    if (hit.count > 1) {
      const times = document.createElement("span");
      times.className = "count";
      times.textContent = ` ×${hit.count}`;
      times.title = `${hit.count} captions with this text (ids ${hit.ids.join(", ")})`;
      row.appendChild(times);
    }
    row.appendChild(uncertaintyBar(hit));
    box.appendChild(row);
  }
  return box;
}

async function showImage(index, metadata) {
  try {
    const item = await getJSON(`/api/images/${index}?k=5`);
    const body = $("detail-body");
    body.innerHTML = "";
    const title = document.createElement("h2");
    title.textContent = `image ${item.id}`;
    body.appendChild(title);
    if (item.image_url) {
      const img = document.createElement("img");
      img.src = item.image_url;
      img.alt = title.textContent;
      body.appendChild(img);
    }
    const written = (metadata && metadata.captions) || [];
    if (written.length) {  // your own images: the captions written for this file
      const mine = document.createElement("h3");
      mine.textContent = "its captions";
      body.appendChild(mine);
      for (const text of written) {
        const row = document.createElement("div");
        row.className = "caption-row";
        row.textContent = text;
        body.appendChild(row);
      }
    }
    const heading = document.createElement("h3");
    heading.textContent = "nearest captions";
    body.appendChild(heading);
    body.appendChild(captionRows(item.captions));
    $("detail").hidden = false;
    showError("");
  } catch (err) {
    showError(err.message);
  }
}

function showScoreNote(note) {  // what the number on each result is (the server's words)
  if (note) $("score-note").textContent = note;
}

async function runSearch(text, k) {
  try {
    const data = await getJSON(`/api/search?text=${encodeURIComponent(text)}&k=${encodeURIComponent(k)}`);
    const grid = $("results");
    grid.innerHTML = "";
    for (const hit of data.results) grid.appendChild(imageCard(hit));
    grid.dataset.query = data.query;
    showScoreNote(data.score_note);
    showWarnings(data.warnings);
    showError("");
  } catch (err) {
    showWarnings([]);
    showError(err.message);
  }
}

function queryFromURL() {
  const params = new URLSearchParams(window.location.search);
  return { text: params.get("q") || "", k: params.get("k") || "" };
}

async function applyURL() {
  const { text, k } = queryFromURL();
  if (k) $("k").value = k;
  $("query").value = text;
  if (text.trim()) {
    await runSearch(text, $("k").value);
  } else {
    $("results").innerHTML = "";
    delete $("results").dataset.query;
    showWarnings([]);
    showError("");
  }
}

async function search(event) {
  event.preventDefault();
  const text = $("query").value;
  const k = $("k").value;
  const url = `?q=${encodeURIComponent(text)}&k=${encodeURIComponent(k)}`;
  if (url !== window.location.search) history.pushState({ text, k }, "", url);
  await runSearch(text, k);
}

function previewUpload() {
  const file = $("image-file").files[0];
  const preview = $("upload-preview");
  if (preview.src) URL.revokeObjectURL(preview.src);
  if (!file) {
    preview.hidden = true;
    preview.removeAttribute("src");
    return;
  }
  preview.src = URL.createObjectURL(file);
  preview.alt = `preview of ${file.name}`;
  preview.hidden = false;
}

async function searchImage(event) {
  event.preventDefault();
  const file = $("image-file").files[0];
  if (!file) return showError("choose an image file first");
  const form = new FormData();
  form.append("file", file);
  try {
    const data = await getJSON("/api/search/image?k=5", { method: "POST", body: form });
    const body = $("detail-body");
    body.innerHTML = "";
    const title = document.createElement("h2");
    title.textContent = `captions for ${file.name}`;
    body.appendChild(title);
    body.appendChild(captionRows(data.results));
    $("detail").hidden = false;
    showScoreNote(data.score_note);
    showWarnings(data.warnings);
    showError("");
  } catch (err) {
    showError(err.message);
  }
}

async function init() {
  $("query-form").addEventListener("submit", search);
  $("image-form").addEventListener("submit", searchImage);
  $("image-file").addEventListener("change", previewUpload);
  $("close-detail").addEventListener("click", () => { $("detail").hidden = true; });
  window.addEventListener("popstate", applyURL);
  try {
    const health = await getJSON("/api/health");
    $("status").textContent = `${health.images} images, ${health.captions} captions; ` +
      `${health.similarity}/${health.rerank}, ${health.backend.image}`;
    showScoreNote(health.score_note);
  } catch (err) {
    showError(err.message);
  }
  await applyURL();
  document.body.dataset.ready = "true";
}

init();
