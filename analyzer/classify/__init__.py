"""Classification: the stage and role of every range, of the GPU work launched inside it, the
dimension of every collective, the pool of every rank, the steps and the placement (one module
per product group: :mod:`.profile`, :mod:`.ranges`, :mod:`.steps`, :mod:`.timeline`, :mod:`.pools`,
:mod:`.classified`, :mod:`.dims`, :mod:`.placement`; :mod:`.infer` infers stage ranges).

Products (schemas in ``analyzer/model/frames.py``):

* ``profile`` — the framework profile detected from the run's names (or named with
  ``--framework``), the version assumed and why; ``--rules`` puts a user's rules first.
* ``ranges`` — every annotation range on the aligned clock with its class (stage, role,
  relation), plus the ranges :mod:`analyzer.infer` infers on ranks without stage annotations.
* ``stage_ranges`` — the ranges that name a stage, with their step. Composite timers (OpenRLHF
  ``make_experience``: several stages, not split) are not stage ranges; the generic fallback's
  ranges (``Optimizer.step#…``) count only where no framework range encloses them.
* ``stage_timeline`` — per rank, disjoint segments: at each time the innermost staged range
  decides (docs/analyses.md §1).
* ``pools`` — rollout / train / shared per rank, from the stages it runs.
* ``classified`` — the event table plus ``stage, role, dim, pool, inferred, confidence`` and
  ``step`` filled: GPU work takes the stage of the timeline segment at its launch (correlation
  → runtime call on the launching thread), else of the device's ``gpu_user_annotation``, else
  of its own start.
* ``collectives`` — one row per rank and collective call, matched into instances, with the
  dimension: process-group description, else pool-spanning group → ``weight_sync``, else rank
  layout, else kernel-name and pattern rules (``taxonomy/collectives.toml``).
* ``activity`` — a rank's device work (or, on CPU-only ranks, its outermost host ops and host
  collective calls) with stage and step.
"""
