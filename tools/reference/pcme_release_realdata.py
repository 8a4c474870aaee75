"""Fixture of PCME's official release (github.com/naver-ai/pcme): what its real-data training sets up.

Usage (from the repository root, with a checkout of the release at PATH)::

    PYTHONPATH=src python tools/reference/pcme_release_realdata.py --checkout PATH --commit HASH \
        --out tests/fixtures/reference/pcme_realdata.safetensors

Four parts, each run by the release's own code:

- ``glove/``: ``models/caption_encoder.py: EncoderText`` built with ``wemb_type: glove`` over a small
  vocabulary and the committed word-vector file ``tests/fixtures/glove/glove.tiny.6d.txt``: its word
  embedding before and after ``init_weights`` (which rows the release fills, with what).
- ``phases/``: which parameters train in each phase. ``train_coco.py`` / ``train_cub.py`` set
  ``img_finetune`` and ``txt_finetune`` to False for the warm-up and to True for the fine-tune;
  ``EncoderImage`` (``models/image_encoder.py:38-39``) and ``EncoderText`` (``caption_encoder.py:37``)
  turn them into ``requires_grad`` of the CNN and of the word embedding. Recorded: the flags of the
  CNN's, the word embedding's and the caption GRU's parameters in each phase.
- ``cub/`` (in the JSON sidecar): ``datasets/cub.py: CUBCaption`` as ``datasets/_dataloader.py``
  builds its ``train`` (trainval classes, ``omit_ids`` = seen test images), ``val`` (test classes)
  and ``val_in`` (``ids`` = seen test images) datasets, on a toy CUB folder made here (its layout is
  in the sidecar, so a test rebuilds it): the image files each one reads.
- ``scale/``: ``criterions/probemb.py: MCSoftContrastiveLoss`` (its ``shift`` and ``negative_scale``)
  trained by AdamP (the release's optimizer, ``adamp`` package) for ``SCALE_STEPS`` steps on fixed
  sampled embeddings (recorded): the two parameters after every step.

Plumbing stubs (never computation): ``torchvision.models`` gets a stand-in CNN (a linear layer on a
``[B, C, 7, 7]`` grid; only its parameters' flags are read); ``torchtext.vocab.GloVe`` is a stand-in
that reads the word-vector file as torchtext's ``Vectors`` does (``stoi``: the last row of a repeated
word; ``vectors``: one row per line); configs are ``_fixture.AttrDict`` (the release uses munch).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _fixture import AttrDict, add_checkout, release_args, stub_module, write_fixture  # noqa: E402

REPOSITORY = "https://github.com/naver-ai/pcme"
GLOVE_FILE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "glove" / "glove.tiny.6d.txt"
#: the vocabulary of the GloVe part: exact hits, the release's fallbacks (- . ' /), a repeated word,
#: case, and misses
VOCABULARY = ["<pad>", "<start>", "<end>", "<unk>", "the", "bird", "t-shirt", "dog's", "grey/gray", "e.g.",
              "Bird", "red", "zebra", "wing.", "black-and-white", "yellow"]
FEATURE, EMBED, WORD = 10, 8, 6
SCALE_STEPS, SCALE_LR = 300, 1e-2
#: the toy CUB folder: class folders (200-class ids), images per class, seen-test entries, class splits
CUB_CLASSES = ["001.Black_footed_Albatross", "002.Laysan_Albatross", "003.Sooty_Albatross", "004.Groove_billed_Ani",
               "005.Crested_Auklet"]
CUB_IMAGES_PER_CLASS = (3, 4, 2, 3, 2)
CUB_TRAINVAL = CUB_CLASSES[:3]
CUB_TEST = CUB_CLASSES[3:]
CUB_SEEN_TEST = ["001.Black_footed_Albatross/Black_footed_Albatross_0001.jpg",
                 "002.Laysan_Albatross/Laysan_Albatross_0002.jpg",
                 "002.Laysan_Albatross/Laysan_Albatross_0003.jpg",
                 "004.Groove_billed_Ani/Groove_billed_Ani_0000.jpg"]  # a test-class entry: ignored by train


class GridStandIn(nn.Module):
    """Stand-in for torchvision's ResNet as EncoderImage leaves it: a ``[B, C, 7, 7]`` grid in, flat out."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.fc = nn.Linear(channels, 2)  # .in_features is read; the release replaces it
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.conv = nn.Conv2d(channels, channels, 1)  # the CNN's own weights, frozen or trained by phase

    def forward(self, grid: torch.Tensor) -> torch.Tensor:
        return self.conv(grid).flatten(1)


class TorchtextVectors:
    """Stand-in for ``torchtext.vocab.GloVe``: ``stoi`` and ``vectors`` read as torchtext's ``Vectors``
    reads a text file (one ``word v_1 ... v_d`` per line; a repeated word's last row is its ``stoi``)."""

    def __init__(self, cache=None, **_: object) -> None:
        itos, rows = [], []
        for line in GLOVE_FILE.read_text(encoding="utf-8").splitlines():
            entries = line.rstrip().split(" ")
            itos.append(entries[0])
            rows.append([float(x) for x in entries[1:]])
        self.itos = itos
        self.stoi = {word: i for i, word in enumerate(itos)}
        self.vectors = torch.tensor(rows)


def model_config(finetune: bool, wemb_type: str | None) -> AttrDict:
    return AttrDict(name="pcme", embed_dim=EMBED, cnn_type="resnet_stand_in", wemb_type=wemb_type, word_dim=WORD,
                    cache_dir=None, img_attention=True, txt_attention=True, img_finetune=finetune,
                    txt_finetune=finetune, img_probemb=True, txt_probemb=True, no_sigma_ln=True,
                    n_samples_inference=0)


def glove_part(caption_encoder) -> dict[str, torch.Tensor]:
    word2idx = {word: i for i, word in enumerate(VOCABULARY)}
    torch.manual_seed(0)
    initial = nn.Embedding(len(word2idx), WORD).weight.detach().clone()  # the same draw EncoderText makes first
    torch.manual_seed(0)
    encoder = caption_encoder.EncoderText(word2idx, model_config(False, "glove"))
    weight = encoder.embed.weight.detach().clone()
    return {"glove/initial": initial, "glove/weight": weight, "glove/filled": (weight != initial).any(dim=1)}


def phases_part(image_encoder, caption_encoder) -> dict[str, torch.Tensor]:
    word2idx = {word: i for i, word in enumerate(VOCABULARY)}
    out = {}
    for phase, finetune in (("warmup", False), ("finetune", True)):  # train_*.py: pretrain, then finetune
        image = image_encoder.EncoderImage(model_config(finetune, None))
        text = caption_encoder.EncoderText(word2idx, model_config(finetune, None))
        flags = {"cnn": [p.requires_grad for p in image.cnn.parameters()],
                 "image_heads": [p.requires_grad for n, p in image.named_parameters() if not n.startswith("cnn.")],
                 "word_embedding": [text.embed.weight.requires_grad],
                 "caption_gru": [p.requires_grad for p in text.rnn.parameters()]}
        for part, values in flags.items():
            out[f"phases/{phase}/{part}"] = torch.tensor(values)
    return out


def cub_part(cub) -> dict:
    """The image files of the release's three CUB datasets on a toy folder (layout returned too)."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        images, captions = root / "images", root / "text_c10"
        layout = {}
        for directory, count in zip(CUB_CLASSES, CUB_IMAGES_PER_CLASS):
            stem = directory.split(".", 1)[1]
            names = [f"{stem}_{n:04d}.jpg" for n in range(count)]
            layout[directory] = names
            (images / directory).mkdir(parents=True)
            (captions / directory).mkdir(parents=True)
            for name in names:
                (images / directory / name).write_bytes(b"")  # CUBCaption lists files; it opens none here
                (captions / directory / name.replace("jpg", "txt")).write_text(
                    f"a {stem.lower()} bird\nit has wings\n")
        for name, lines in (("trainval.txt", CUB_TRAINVAL), ("test.txt", CUB_TEST), ("seen.txt", CUB_SEEN_TEST)):
            (root / name).write_text("".join(f"{line}\n" for line in lines))
        built = {
            "train": cub.CUBCaption(str(images), str(captions), str(root / "trainval.txt"),
                                    omit_ids=str(root / "seen.txt")),
            "val": cub.CUBCaption(str(images), str(captions), str(root / "test.txt")),
            "val_in": cub.CUBCaption(str(images), str(captions), str(root / "trainval.txt"), ids=str(root / "seen.txt")),
        }
        files = {split: sorted({os.path.relpath(path, images) for path, _ in dataset.targets})
                 for split, dataset in built.items()}
    return {"layout": layout, "trainvalclasses": CUB_TRAINVAL, "testclasses": CUB_TEST,
            "seen_test_images": CUB_SEEN_TEST, "image_files": files}


def scale_part(probemb) -> dict[str, torch.Tensor]:
    from adamp import AdamP

    torch.manual_seed(3)
    images = torch.nn.functional.normalize(torch.randn(4, 3, EMBED), dim=-1)  # [N, K, D] fixed samples
    captions = torch.nn.functional.normalize(torch.randn(4, 3, EMBED), dim=-1)
    config = AttrDict(init_shift=5.0, init_negative_scale=5.0, num_samples=3, uniform_lambda=0, vib_beta=0)
    criterion = probemb.MCSoftContrastiveLoss(config)
    optimizer = AdamP(criterion.parameters(), lr=SCALE_LR, weight_decay=0.0)
    trajectory = []
    for _ in range(SCALE_STEPS):
        loss, _ = criterion(images, captions, None, None)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trajectory.append([float(criterion.negative_scale), float(criterion.shift)])
    return {"scale/image_samples": images, "scale/caption_samples": captions,
            "scale/trajectory": torch.tensor(trajectory, dtype=torch.float64)}


def main() -> None:
    args, commit = release_args(__doc__)
    add_checkout(args.checkout)
    stub_module("torchvision.models", resnet_stand_in=lambda pretrained=True: GridStandIn(FEATURE))
    stub_module("torchtext.vocab", GloVe=TorchtextVectors, FastText=TorchtextVectors)
    image_encoder = importlib.import_module("models.image_encoder")
    caption_encoder = importlib.import_module("models.caption_encoder")
    probemb = importlib.import_module("criterions.probemb")
    spec = importlib.util.spec_from_file_location("release_cub", args.checkout / "datasets" / "cub.py")
    cub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cub)
    tensors = {**glove_part(caption_encoder), **phases_part(image_encoder, caption_encoder), **scale_part(probemb)}
    provenance = {
        "repository": REPOSITORY, "commit": commit,
        "files": ["models/caption_encoder.py", "models/image_encoder.py", "datasets/cub.py", "criterions/probemb.py"],
        "functions": ["EncoderText.__init__/init_weights (wemb_type glove)", "EncoderImage.__init__ (img_finetune)",
                      "CUBCaption (omit_ids, ids)", "MCSoftContrastiveLoss + adamp.AdamP"],
        "glove_file": "tests/fixtures/glove/glove.tiny.6d.txt", "vocabulary": VOCABULARY,
        "scale": {"steps": SCALE_STEPS, "lr": SCALE_LR, "init_negative_scale": 5.0, "init_shift": 5.0},
        "cub": cub_part(cub),
        "stubs": ["torchvision.models.resnet_stand_in (a 1x1 conv on the grid)",
                  "torchtext.vocab.GloVe (reads the text file as torchtext's Vectors)"],
        "dtype": "float32",
    }
    write_fixture(args.out, tensors, provenance)


if __name__ == "__main__":
    main()
