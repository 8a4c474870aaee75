"use strict";
// The page of `pcmr serve`: text query -> grid of images; click an image -> its nearest captions.

const $ = (id) => document.getElementById(id);

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

async function getJSON(url, options) {
  const response = await fetch(url, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function uncertaintyBar(level, value) {
  const bar = document.createElement("div");
  bar.className = "bar";
  bar.title = value === null ? "no uncertainty (point embedding)" : `uncertainty ${value.toFixed(3)}`;
  const fill = document.createElement("div");
  fill.style.width = `${Math.round(100 * (level ?? 0))}%`;
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
  meta.innerHTML = `<span>#${hit.rank}</span><span class="score">${hit.score.toFixed(4)}</span>`;
  card.appendChild(meta);
  card.appendChild(uncertaintyBar(hit.uncertainty_level, hit.uncertainty));
  const labels = (hit.metadata && hit.metadata.labels) || [];
  if (labels.length) {
    const text = document.createElement("div");
    text.className = "labels";
    text.textContent = labels.join(", ");
    card.appendChild(text);
  }
  card.addEventListener("click", () => showImage(hit.index));
  return card;
}

function captionRows(captions) {
  const box = document.createElement("div");
  for (const hit of captions) {
    const row = document.createElement("div");
    row.className = "caption-row";
    row.textContent = `${hit.rank}. ${hit.text}  (${hit.score.toFixed(4)})`;
    row.appendChild(uncertaintyBar(hit.uncertainty_level, hit.uncertainty));
    box.appendChild(row);
  }
  return box;
}

async function showImage(index) {
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

async function search(event) {
  event.preventDefault();
  const text = $("query").value;
  const k = $("k").value;
  try {
    const data = await getJSON(`/api/search?text=${encodeURIComponent(text)}&k=${encodeURIComponent(k)}`);
    const grid = $("results");
    grid.innerHTML = "";
    for (const hit of data.results) grid.appendChild(imageCard(hit));
    grid.dataset.query = data.query;
    showError("");
  } catch (err) {
    showError(err.message);
  }
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
    body.innerHTML = `<h2>captions for ${file.name}</h2>`;
    body.appendChild(captionRows(data.results));
    $("detail").hidden = false;
    showError("");
  } catch (err) {
    showError(err.message);
  }
}

async function init() {
  $("query-form").addEventListener("submit", search);
  $("image-form").addEventListener("submit", searchImage);
  $("close-detail").addEventListener("click", () => { $("detail").hidden = true; });
  try {
    const health = await getJSON("/api/health");
    $("status").textContent = `${health.images} images, ${health.captions} captions; ` +
      `${health.similarity}/${health.rerank}, ${health.backend.image}`;
  } catch (err) {
    showError(err.message);
  }
}

init();
