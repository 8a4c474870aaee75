"""The training loop: epochs of optimisation steps, validation and model selection, checkpoints.

Determinism and resuming:
- the order of the training batches of epoch ``e`` depends only on ``(seed, e)``
  (``PairBatchSampler`` draws its permutation from ``[seed, epoch]`` and each item's
  augmentation from a per-item seed);
- every optimisation step ``t`` first reseeds the torch / numpy / Python RNGs from
  ``(seed, t)``, so dropout does not depend on what ran before, and reseeds torch from
  ``(seed, t, 1)`` just before the loss, so sampled losses (PCME's J samples) draw the same
  samples whatever the number of processes;
- a checkpoint stores the weights, optimizer state, RNG states and the position
  ``(epoch, step_in_epoch, global_step)``; resuming skips the batches already done.

A run killed at any moment (``kill -9`` included) and resumed with ``--resume``
therefore performs exactly the same steps as an uninterrupted run.

Several processes (``torchrun``; see :mod:`pcmr.train.distributed`): every process
trains on its shard of the global batch, the loss sees the whole batch, DDP averages
the gradients. Rank 0 alone writes the log, the checkpoints, the run summary and the
models, and validates; the others wait for it.

Preemption: SIGTERM or SIGINT lets the current step finish; then (all processes agree
on the step) rank 0 writes a checkpoint and every process raises
:class:`TrainingInterrupted`, whose message is the command that resumes the run.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from pcmr.atomic import DISK_FULL_ERRNOS, FolderWriteError
from pcmr.config import ConfigError
from pcmr.data.batching import FinishBatch, finish_batch, train_loader
from pcmr.encode.inputs import image_input_size, image_input_transform
from pcmr.evaluation.columns import MEAN_R_PRECISION, RSUM
from pcmr.hub import Model
from pcmr.progress import progress_bar, progress_enabled, write_line
from pcmr.train.checkpoint import (
    CheckpointError,
    capture_rng_state,
    load_newest_valid_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from pcmr.train.config import RunConfig
from pcmr.train.distributed import (
    DistributedContext,
    TrainStep,
    any_flag,
    broadcast_object,
    init_distributed,
    wrap_ddp,
)
from pcmr.train.faults import NonFiniteGuard
from pcmr.train.feature_cache import attach_feature_caches, loader_augments
from pcmr.train.global_batchnorm import convert_global_batchnorm
from pcmr.train.guards import ProgressLines, check_steps_per_epoch, note_image_size, small_validation_note
from pcmr.train.loggers import JsonlLog, RunLog, open_run_log
from pcmr.train.precision import autocast_factory, grad_scaler
from pcmr.train.preemption import StopRequest, TrainingInterrupted, resume_command
from pcmr.train.run import (
    CHECKPOINT_DIR,
    LOG_FILE,
    MODEL_DIR,
    MODEL_LAST_DIR,
    RUN_FILE,
    SIMILARITY_OPTIONS_FILE,
    RunParts,
    build_parts,
    write_json,
)
from pcmr.train.schedules import (
    build_optimizer,
    learning_rate_factor,
    loss_ramp_factor,
    optimizer_name,
    parameter_counts,
    set_learning_rate,
    trainable_backbone_parameters,
)
from pcmr.train.seeds import loader_settings, loss_seed, seed_everything, torch_seed
from pcmr.train.state import TrainingProgress
from pcmr.train.validation import FALLBACK_SIMILARITY, validate_with, validation_evaluator

__all__ = ["Trainer", "TrainingInterrupted", "loader_settings", "resume_command", "seed_everything", "torch_seed"]


class _NoLog:
    """The log of processes other than rank 0: writes nothing."""

    def write(self, event: str, **fields: Any) -> None:
        """Discard the event (only rank 0 keeps the run's log)."""

    def close(self) -> None:
        """Nothing to close."""


class Trainer:
    """Train ``config``'s model with its loss on its data, writing everything into ``run_dir``.

    Args:
        config: the resolved run configuration.
        run_dir: the run folder (created by the caller, holding ``config.yaml``).
        parts: pre-built data/model/loss (default: :func:`pcmr.train.run.build_parts`).
        resume: continue from the newest complete checkpoint in ``run_dir`` if any.
        context: the process group (default: :func:`pcmr.train.distributed.init_distributed`,
            which joins the group ``torchrun`` set up, or is a single process).
    """

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        parts: RunParts | None = None,
        *,
        resume: bool = False,
        context: DistributedContext | None = None,
    ):
        self.config = config
        self.run_dir = Path(run_dir)
        self.resume = resume
        train = config.train
        if train.deterministic:
            torch.use_deterministic_algorithms(True)
        self.context = context if context is not None else init_distributed(train.device)
        seed_everything(train.seed)
        self.device = self.context.device
        self.parts = parts if parts is not None else build_parts(config, self.run_dir)
        self.model = self.parts.model.to(self.device)
        if self.context.enabled:  # batch statistics over the global batch, on every device
            self.model = convert_global_batchnorm(self.model)
        self.loss_fn = self.parts.loss.to(self.device)
        self.optimizer = build_optimizer(train, [*self.model.parameters(), *self.loss_fn.parameters()])
        self.scaler = grad_scaler(train.precision, self.device)
        self.backbone = trainable_backbone_parameters(self.model)
        self.loader_settings = loader_settings(config.data.num_workers, self.device, self.context.world_size)
        self.loader = train_loader(
            self.parts.train_split,
            self.parts.vocab,
            config.data.batch_size,
            seed=train.seed,
            num_replicas=self.context.world_size,
            rank=self.context.rank,
            **self.loader_settings,
            **config.data.loader_options,
        )
        check_steps_per_epoch(self.loader.batch_sampler, config.data.batch_size)
        if self.context.is_main:
            note_image_size(self.parts.train_split, config.data.options)
        self.cached_towers: list[str] = []
        if train.cache_frozen_features:
            image_augmented, caption_augmented = loader_augments(config.data.loader_options)
            try:
                self.cached_towers = attach_feature_caches(
                    self.model, image_augmented=image_augmented, caption_augmented=caption_augmented)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        relation = self.parts.train_split.relevance
        self.train_step = TrainStep(
            self.model,
            self.loss_fn,
            self.context,
            relevance=lambda images, captions: torch.from_numpy(relation.submatrix(images.numpy(), captions.numpy())),
            autocast=autocast_factory(train.precision, self.device),
        )
        self._ddp: torch.nn.Module | None = None
        self._ddp_key: tuple[bool, ...] | None = None
        self._saved_step: int | None = None
        self.similarity = train.select_similarity or self.loss_fn.similarity_name
        self.nonfinite = NonFiniteGuard(train.max_nonfinite_steps, self.run_dir)
        self.stop = StopRequest()
        self.log: _NoLog | RunLog = _NoLog()
        self.progress = TrainingProgress()
        self.epoch_times = {"data_seconds": 0.0, "compute_seconds": 0.0}  # the current epoch's, summed over steps
        self._phase: str | None = None

    # ------------------------------------------------------------------ state
    def _weights(self) -> dict[str, torch.Tensor]:
        weights = {f"model.{k}": v for k, v in self.model.state_dict().items()}
        weights.update({f"loss.{k}": v for k, v in self.loss_fn.state_dict().items()})
        return weights

    def _save_checkpoint(self) -> None:
        """Rank 0 writes the checkpoint; the other processes wait until it is complete."""
        if self.context.is_main:
            state = {
                "progress": self.progress.to_dict(),
                "scheduler": {"kind": self.config.train.schedule, "steps_per_epoch": self.steps_per_epoch},
                "rng": capture_rng_state(),
                "config": self.config.to_dict(),
                "world_size": self.context.world_size,
            }
            if self.scaler is not None:
                state["grad_scaler"] = self.scaler.state_dict()
            save_checkpoint(
                self.run_dir / CHECKPOINT_DIR,
                self.progress.global_step,
                weights=self._weights(),
                optimizer_state=self.optimizer.state_dict(),
                state=state,
                keep=self.config.train.keep_checkpoints,
            )
        self._saved_step = self.progress.global_step
        self.context.barrier()

    def _restore(self) -> bool:
        checkpoint = load_newest_valid_checkpoint(self.run_dir / CHECKPOINT_DIR)
        if checkpoint is None:
            return False
        model_state = {k[6:]: v for k, v in checkpoint.weights.items() if k.startswith("model.")}
        loss_state = {k[5:]: v for k, v in checkpoint.weights.items() if k.startswith("loss.")}
        try:
            self.model.load_state_dict(model_state)
            self.loss_fn.load_state_dict(loss_state)
            self.optimizer.load_state_dict(checkpoint.optimizer)
        except (RuntimeError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(
                f"checkpoint {checkpoint.path} does not match the model, loss or optimizer of "
                f"{self.run_dir / 'config.yaml'} (was the config edited?): {first}"
            ) from exc
        restore_rng_state(checkpoint.state["rng"])
        if self.scaler is not None and "grad_scaler" in checkpoint.state:
            self.scaler.load_state_dict(checkpoint.state["grad_scaler"])
        self.progress = TrainingProgress.from_dict(checkpoint.state["progress"])
        self.log.write(
            "resume", checkpoint=str(checkpoint.path), world_size=self.context.world_size, **self._position()
        )
        return True

    def _position(self) -> dict[str, int]:
        return self.progress.position()

    # ------------------------------------------------------------------ loop
    @property
    def steps_per_epoch(self) -> int:
        sampler: Any = self.loader.batch_sampler  # pcmr.data's PairBatchSampler (len, epoch)
        steps = len(sampler)
        limit = self.config.train.max_steps_per_epoch
        return min(steps, limit) if limit is not None else steps

    def _epoch_loader(self, epoch: int, skip: int) -> DataLoader:
        sampler: Any = self.loader.batch_sampler
        sampler.epoch = epoch  # PairBatchSampler draws epoch e's order from [seed, e]
        batches = list(sampler)[skip : self.steps_per_epoch]
        return DataLoader(
            self.loader.dataset,
            batch_sampler=batches,
            # images are normalised and erased in the step, on the training device; on the CPU with
            # workers, in the workers (the same operations either way)
            collate_fn=FinishBatch(finish=self.device.type == "cpu" and self.loader_settings["num_workers"] > 0),
            **self.loader_settings,
        )

    def _set_frozen(self, epoch: int) -> None:
        warmup = self.config.train.warmup_epoch_count()
        frozen = epoch < warmup
        for parameter in self.backbone:
            parameter.requires_grad_(not frozen)
        phase = "warmup" if frozen else "finetune" if warmup else "train"
        if phase != self._phase:  # once per phase (and again after a resume): what trains in it
            self._phase = phase
            self.log.write("phase", phase=phase, epoch=epoch + 1, **parameter_counts(self.model))

    def _step_module(self) -> torch.nn.Module:
        """The module a step calls: :class:`TrainStep`, wrapped in DDP under several processes
        (rebuilt when the set of trainable parameters changes, e.g. after a frozen warm-up)."""
        if not self.context.enabled:
            return self.train_step
        key = tuple(p.requires_grad for p in self.train_step.parameters())
        if self._ddp is None or key != self._ddp_key:
            self._ddp = wrap_ddp(self.train_step, self.context)
            self._ddp_key = key
        return self._ddp

    def _step(self, batch: dict[str, Any], epoch: int, step_in_epoch: int) -> dict[str, float]:
        train = self.config.train
        set_learning_rate(
            self.optimizer, learning_rate_factor(train, epoch, step_in_epoch, self.steps_per_epoch,
                                                 self.progress.history)
        )
        batch = finish_batch(batch, self.device, non_blocking=self.loader_settings["pin_memory"])
        self.nonfinite.snapshot((self.model, self.loss_fn))  # buffers put back if this step is skipped
        terms = self._step_module()(batch, loss_seed=loss_seed(train.seed, self.progress.global_step))
        loss = terms["loss"]
        # a non-finite loss or gradient norm: no update this step (pcmr.train.faults); every process
        # takes the same decision, so none waits for an all-reduce the others skipped
        position = {"epoch": epoch + 1, "step_in_epoch": step_in_epoch + 1,
                    "global_step": self.progress.global_step + 1}
        if any_flag(self.context, not bool(torch.isfinite(loss))):
            return self.nonfinite.skip("loss", loss, self.log, position)
        self.optimizer.zero_grad(set_to_none=True)
        if train.loss_ramp_epoch is not None:  # PCME++'s release: a linear ramp of the loss over one epoch
            loss = loss * loss_ramp_factor(train, epoch, step_in_epoch, self.steps_per_epoch)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
        else:
            loss.backward()
        if train.grad_clip is not None:
            clipped = self._clipped_parameters()
            norm = torch.nn.utils.clip_grad_norm_([p for p in clipped if p.grad is not None], train.grad_clip)
            inside = {id(p) for p in clipped}  # gradients left unclipped (the loss's, scope "model") must be finite too
            finite = bool(torch.isfinite(norm)) and all(
                bool(torch.isfinite(p.grad).all()) for p in self._trained_parameters()
                if p.grad is not None and id(p) not in inside)
            # with fp16 loss scaling an overflowing gradient is the scaler's business (it skips the
            # update and lowers the scale); it is not a non-finite step
            if self.scaler is None and any_flag(self.context, not finite):
                self.optimizer.zero_grad(set_to_none=True)
                return self.nonfinite.skip("gradient norm", norm, self.log, position)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.nonfinite.good_step()
        return {name: float(value.detach()) for name, value in terms.items() if value.numel() == 1}

    def _trained_parameters(self) -> list[torch.nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _clipped_parameters(self) -> list[torch.nn.Parameter]:
        """What gradient clipping covers: every trained parameter, or the model's only
        (``train.grad_clip_scope: model``, the PCME release, which leaves the loss's a and b out)."""
        if self.config.train.grad_clip_scope == "model":
            return list(self.model.parameters())
        return self._trained_parameters()

    def _restart_optimizer(self, epoch: int) -> None:
        """At the first step of the first epoch after the warm-up, with ``train.restart_optimizer``: a fresh
        optimizer (new moments), as the PCME release's fine-tune phase. A run resumed later in that epoch
        restores the fresh optimizer's state from its checkpoint instead."""
        train = self.config.train
        warmup = train.warmup_epoch_count()
        if train.restart_optimizer and warmup and epoch == warmup and self.progress.step_in_epoch == 0:
            self.optimizer = build_optimizer(train, [*self.model.parameters(), *self.loss_fn.parameters()])
            self.log.write("optimizer_restart", **self._position())

    def _check_stop(self) -> None:
        """After a complete step: if any process got SIGTERM / SIGINT, checkpoint and stop them all."""
        number = self.stop.signal_number
        if not any_flag(self.context, number is not None):
            return
        number = int(broadcast_object(self.context, number) or signal.SIGTERM)
        if self._saved_step != self.progress.global_step:
            self._save_checkpoint()
        name = signal.Signals(number).name
        self.log.write("interrupted", signal=name, **self._position())
        if self.context.is_main:
            self._write_summary("interrupted")
        self.context.barrier()
        raise TrainingInterrupted(number, self.run_dir, self.progress.global_step, self.context.world_size)

    def _run_epoch(self, epoch: int) -> dict[str, float]:
        train = self.config.train
        self._set_frozen(epoch)
        self._restart_optimizer(epoch)
        self.model.train()
        self.loss_fn.train()
        skip = self.progress.step_in_epoch
        loader = self._epoch_loader(epoch, skip)
        if skip == 0:
            self.progress.epoch_totals = {}
        totals = self.progress.epoch_totals  # sums over the epoch's steps
        count = 0
        bar = progress_bar(self.steps_per_epoch, f"epoch {epoch + 1}/{train.epochs}",
                           enabled=train.progress if self.context.is_main else False, initial=skip)
        iterator = iter(loader)
        world = self.context.world_size
        self.epoch_times = {"data_seconds": 0.0, "compute_seconds": 0.0}
        lines = ProgressLines(bar is None and train.progress is None and self.context.is_main,
                              f"epoch {epoch + 1}/{train.epochs}", self.steps_per_epoch)
        while True:
            seed_everything(train.seed, self.progress.global_step)
            start = time.perf_counter()
            batch = next(iterator, None)
            fetched = time.perf_counter()
            if batch is None:
                break
            terms = self._step(batch, epoch, self.progress.step_in_epoch)
            # the step ends with the loss terms read as floats, so a GPU has finished its work here
            done = time.perf_counter()
            elapsed = max(done - start, 1e-9)
            data_s, compute_s = fetched - start, done - fetched  # waiting for the batch; the step proper
            self.epoch_times["data_seconds"] += data_s
            self.epoch_times["compute_seconds"] += compute_s
            self.progress.step_in_epoch += 1
            self.progress.global_step += 1
            count += 1
            for name, value in terms.items():
                totals[name] = totals.get(name, 0.0) + value
            pairs_per_s = len(batch["captions"]) * world / elapsed  # the global batch
            images_per_s = len(batch["images"]) * world / elapsed
            if bar is not None:
                bar.update(1)
                shown = {k: f"{v:.4g}" for k, v in list(terms.items())[:4]}
                bar.set_postfix(**shown, pairs_s=f"{pairs_per_s:.0f}", data_ms=f"{1e3 * data_s:.1f}")
            else:
                lines.step(done, self.progress.step_in_epoch, terms, pairs_per_s)
            if train.log_every > 0 and self.progress.global_step % train.log_every == 0:
                lr = self.optimizer.param_groups[0]["lr"]
                self.log.write(
                    "step", **self._position(), lr=lr, pairs_per_s=pairs_per_s, images_per_s=images_per_s,
                    data_s=data_s, compute_s=compute_s, **terms
                )
            every = train.checkpoint_every_steps
            if (
                every > 0
                and self.progress.global_step % every == 0
                and skip + count < self.steps_per_epoch
            ):
                self._save_checkpoint()
            self._check_stop()
        if bar is not None:
            bar.close()
        steps = self.progress.step_in_epoch
        return {name: value / max(steps, 1) for name, value in totals.items()}

    def _validate_and_select(self, epoch: int) -> dict[str, float] | None:
        """Validation by rank 0 (on the whole split, as one process would), its result sent to all."""
        train = self.config.train
        last = epoch + 1 == train.epochs
        due = train.validate_every > 0 and ((epoch + 1) % train.validate_every == 0 or last)
        if not due or self.parts.val_split is None:
            return None
        evaluator = validation_evaluator(self.parts.val_split, self.similarity, seed=train.seed,
                                         batch_size=self.config.data.eval_batch_size,
                                         primary_metric=train.select_on)
        metrics = None
        if self.context.is_main:
            metrics = validate_with(self._trained_model(), evaluator)
        metrics = broadcast_object(self.context, metrics)
        value = evaluator.primary_value(metrics)  # selection reads the evaluator's metric and direction
        if evaluator.improves(value, self.progress.best_metric):
            self.progress.best_metric = value
            self.progress.best_epoch = epoch + 1
            self._save_selected("model", metrics)
        return metrics

    def _trained_model(self, metrics: dict[str, Any] | None = None) -> Model:
        """The network being trained as a :class:`pcmr.Model`: the vocabulary, the loss's trained score
        parameters and the test-time image transform of the training images (``metrics``: the card's)."""
        transform = image_input_transform(self.parts.train_split)
        return Model(self.model, self.parts.vocab, image_input_size(self.parts.train_split),
                     {self.loss_fn.similarity_name: self.loss_fn.similarity_options()},
                     {"validation": {"epoch": self.progress.best_epoch, **metrics}} if metrics else None, **transform)

    def _save_selected(self, which: str, metrics: dict[str, Any] | None = None) -> None:
        """Save the model (``which="model"``: selected; ``"last"``) through ``Model.save_pretrained``, the
        one writer of a model folder (written beside and swapped in whole), and its similarity options (rank 0)."""
        if not self.context.is_main:
            return
        model = self._trained_model(metrics)
        try:
            model.save_pretrained(self.run_dir / (MODEL_DIR if which == "model" else MODEL_LAST_DIR))
        except FolderWriteError as exc:  # e.g. a full disk: the hint is the resume command
            free = "free disk space and " if exc.errno in DISK_FULL_ERRNOS else ""
            raise FolderWriteError(exc.errno, f"{exc.detail}; {free}continue with: "
                                              f"{resume_command(self.run_dir, self.context.world_size)}") from exc
        if which == "model":
            write_json(self.run_dir / SIMILARITY_OPTIONS_FILE, model.similarity_options)

    def _mark_failed(self, exc: BaseException) -> None:
        """``run.json`` says ``failed`` with the error's first line (best effort: the disk may be full)."""
        if not self.context.is_main or not (self.run_dir / RUN_FILE).is_file():
            return
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        with contextlib.suppress(OSError):
            self._write_summary("failed", error=f"{type(exc).__name__}: {reason}")

    def _write_summary(self, status: str, error: str | None = None) -> None:
        if not self.context.is_main:
            return
        summary = {
            "status": status,
            **({"error": error} if error is not None else {}),
            "trained_similarity": self.loss_fn.similarity_name,
            "validation_similarity": self.similarity,
            "select_on": self.config.train.select_on,
            "optimizer": optimizer_name(self.optimizer),
            "optimizer_requested": self.config.train.optimizer,
            "epochs": self.config.train.epochs,
            "schedule": self.config.train.schedule_summary(),  # in epochs, fractions resolved
            "cached_features": self.cached_towers,  # towers whose frozen backbone output is cached
            "world_size": self.context.world_size,
            **self._position(),
            "best_metric": self.progress.best_metric,
            "best_epoch": self.progress.best_epoch,
            "history": self.progress.history,
        }
        write_json(self.run_dir / RUN_FILE, summary)

    def _print_epoch(self, record: dict[str, Any]) -> None:
        shown = ", ".join(f"{k} {v:.4g}" for k, v in list(record["train"].items())[:4])
        line = f"epoch {record['epoch']}/{self.config.train.epochs}: {shown} ({record['seconds']:.0f} s"
        if record["val"] is None:
            line += ")"
        else:
            val = record["val"]
            used = FALLBACK_SIMILARITY if val.get("fallback") else self.similarity  # degenerate: cosine
            line += (f" training, {record['val_seconds']:.0f} s validation); val {used}: "
                     f"rsum {val[RSUM]:.1f}, R-Precision {val[MEAN_R_PRECISION]:.1f}")
        data, compute = record.get("data_seconds", 0.0), record.get("compute_seconds", 0.0)
        share = 100.0 * data / max(data + compute, 1e-9)
        line += f"; steps: data wait {data:.2f} s ({share:.0f} %), compute {compute:.2f} s"
        write_line(line, bars=progress_enabled(self.config.train.progress))
        if not getattr(self, "_loss_noted", False):  # once per run: what "loss" and a small split's rsum are
            self._loss_noted = True
            for note in (f"loss is {self.loss_fn.scale_note}", small_validation_note(self.parts.val_split)):
                if note:
                    write_line(f"note: {note}", bars=progress_enabled(self.config.train.progress))

    def fit(self) -> dict[str, Any]:
        """Train to the last epoch (continuing a checkpoint when resuming); return the run summary.

        Raises:
            TrainingInterrupted: SIGTERM / SIGINT arrived; a checkpoint of the last complete step
                was written.
        """
        train = self.config.train
        self.log = _NoLog()
        if self.context.is_main:
            self.log = open_run_log(train.loggers, self.run_dir, lambda: JsonlLog(self.run_dir / LOG_FILE))
        try:
            with self.stop:
                self._fit(train)
        except TrainingInterrupted:
            raise
        except Exception as exc:  # a full disk, a non-finite loss ...: run.json must not stay at "running"
            self._mark_failed(exc)
            raise
        finally:
            self.log.close()
        self.context.barrier()
        return json.loads((self.run_dir / RUN_FILE).read_text())

    def _fit(self, train: Any) -> None:
        if not (self.resume and self._restore()):
            self.log.write(
                "start", epochs=train.epochs, steps_per_epoch=self.steps_per_epoch,
                world_size=self.context.world_size, precision=train.precision,
                optimizer=optimizer_name(self.optimizer), optimizer_requested=train.optimizer,
                cached_features=self.cached_towers,
            )
            if self.parts.word_vectors_found is not None:
                self.log.write("word_vectors", path=train.word_vectors, match=train.word_vectors_match,
                               found=self.parts.word_vectors_found, vocabulary=len(self.parts.vocab))
        self._write_summary("running")
        while self.progress.epoch < train.epochs:
            epoch = self.progress.epoch
            start = time.perf_counter()
            averages = self._run_epoch(epoch)
            seconds = time.perf_counter() - start
            metrics = self._validate_and_select(epoch)
            val_seconds = time.perf_counter() - start - seconds
            record = {"epoch": epoch + 1, "train": averages, "val": metrics, "seconds": seconds,
                      "val_seconds": val_seconds if metrics is not None else 0.0, **self.epoch_times}
            self.progress.history.append(record)
            self.progress.epoch = epoch + 1
            self.progress.step_in_epoch = 0
            self._save_checkpoint()
            self.log.write("epoch", **record)
            if train.progress is not False and self.context.is_main:  # bars or not, one plain line per epoch
                self._print_epoch(record)
            self._write_summary("running")
            if self.progress.epoch < train.epochs:
                self._check_stop()
        if self.progress.best_epoch is None:  # no validation: the last model is the selected one
            self._save_selected("model")
        self._save_selected("last")
        self._write_summary("finished")
        self.log.write("finished", **self._position(), best_metric=self.progress.best_metric)
