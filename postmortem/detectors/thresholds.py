"""Every tunable of the detectors, one frozen dataclass per family of findings.

Each field cites where its default comes from (docs/diagnoses.md has the same table, and which
sample-run families informed each default). A variant is `dataclasses.replace(Thresholds(),
gradients=replace(GradientThresholds(), vanishing_rms=1e-8))`; `Thresholds()` is the default.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..onset import BreakThresholds
from ..ranking import RankingThresholds

__all__ = [
    "ActivationThresholds",
    "BreakThresholds",
    "DivergenceThresholds",
    "GradientThresholds",
    "InitThresholds",
    "InputThresholds",
    "OutcomeThresholds",
    "RankingThresholds",
    "RootCauseThresholds",
    "Thresholds",
    "UpdateThresholds",
]


@dataclass(frozen=True)
class OutcomeThresholds:
    """Did the run learn, by its own yardstick (postmortem.detectors.outcome)."""

    min_steps: int = 10  # fewer loss points say nothing about progress (our choice)
    start_steps: int = 10  # where the loss began: the median of its first 10 points, the untrained model's level (our choice, session 26: loss_rose_back)
    plateau_improvement: float = 0.01  # SageMaker LossNotDecreasing: < 1 % first → last quarter
    noise_sigmas: float = 2.0  # the improvement must exceed 2 robust σ of the loss's own step noise
    spike_factor: float = 10.0  # Megatron-LM loss-spike check: 10× the recent level
    spike_recovered: float = 2.0  # back below 2× the level before the spike (our choice)
    spike_window: int = 20  # the recent level: rolling median of the 20 previous losses (Megatron-LM)
    recovered_factor: float = 1.1  # came back: the loss returns to, and ends, within 10 % of its level before
    recovered_within: float = 0.5  # ...within the first half of the steps after the onset (our choice, docs/diagnoses.md)
    ran_away_factor: float = 2.0  # a finite loss that ends ≥ 2× where it began ran away (Megatron-LM's "back below 2×", as spike_recovered; session 14 on round 14's word2vec at lr ×100, 4.16 → 12)
    recovered_mean_factor: float = 2.0  # ...and the mean of its last losses is back below 2× that level (Megatron-LM's "back below 2×", as spike_recovered; session 8, helper 12m, on weight_scale-mixer-s1: median 0, mean 3.4×)
    settling_steps: int = 3  # the objective may settle over the run's first 3 steps (a queue of K = 2B keys fills in 2: MoCo, round 34)
    settling_rise: float = 1.5  # ...if the loss rose ≥ ×1.5 above its first value by then (our choice: under accumulation MoCo's first loss pools micro-batches of a filling queue, 2.8 then 4.8, ×1.7; round 34)...
    settling_update_ratio: float = 1e-3  # ...while the weights had moved at most CS231n's healthy 1e-3 of their norm a step (median over weights): no step that small makes a loss ×1.5 (session 31, benchmarks/settling.py: round 34's MoCo 6.6e-5 to 1.7e-4; the lr_too_high runs whose loss rose as early 1.1e-2 to 12, MoCo's at ×100 its lr the lowest)
    still_weights_path: float = 0.01  # weights that moved ≤ 1 % of their norm over the whole run (path: mean update/param ratio × steps) learned nothing, so no metric judges it: a held-out metric moving then measures BatchNorm's running statistics (round 35's swa_gc at lr ×1e-4: path 1e-8, val_top1 23 → 27 %, val_loss -1.2 %; session 29's deeplab missing_step: pixel accuracy 0.025 → 0.066); on session 31's 222 runs the 93 healthy ones travelled ≥ 0.058, the 65 at ≤ 0.01 are all not-learning truths


@dataclass(frozen=True)
class DivergenceThresholds:
    """diverged, exploding_gradient, lr_too_high, recovered_incident (divergence)."""

    min_healthy_steps: int = 10  # detectors read the healthy phase when it lasts this long
    sharp_update_jump: float = 10.0  # an update ×10 in one step while its gradient stays put
    grad_jump_share: float = 1 / 3  # ...its gradient did not jump ≥ ×(10/3)
    update_ratio_high: float = 1e-1  # CS231n target 1e-3 ×100: the first updates were far too big
    update_ratio_erases_init: float = 0.5  # CS231n 1e-3 ×500: an early update is half the weights (init erased in two steps)
    erases_init_within: int = 5  # ...within each weight's first 5 recorded updates (median over weights of their largest); session 9 (helper 12p): ConvNeXt at lr ×100 reads 0.40 on its first step, 6.6–7.2 within five (its blocks, behind a layer scale of 1e-6, wake up); healthy runs ≤ 0.1 over their first 20
    erased_init_still_learns: float = 0.85  # ...yet a loss that fell ≥ 85 % (first → last quarter) learned regardless: a warning, not a verdict (session 29, on the 96 lr_too_high runs on disk, benchmarks/early_update_ratio.py: not-learning truths fell ≤ 68 %, the healthy truths it read not learning — round 33's deq ×3, round 16's byol — 88-97 %)
    from_start_steps: int = 3  # a divergence starting in the first 3 steps: the step size from the start
    precursor_steps: int = 3  # a break up to 3 steps before the earliest sharp one belongs to the same onset (an update jumping with the lr a step before the parameters follow); exploding_gradient dates only gradient breaks that close to the onset (cnn_domain_shift-s0)


@dataclass(frozen=True)
class RootCauseThresholds:
    """Direct causes at the onset (postmortem.detectors.root_causes)."""

    window: int = 3  # a cause counts up to 3 steps after the fitted onset (DivergenceThresholds.precursor_steps: a break may lead by noise)
    lookback: int = 40  # ...and up to 40 before (≤ 200: tensors are read that far around the onset)
    hp_change_factor: float = 2.0  # a hyperparameter ×2 (or ÷2) between two records
    hp_beyond_history: float = 2.0  # ...and ×2 beyond its largest step-to-step change before
    param_jump_factor: float = 2.0  # a parameter norm ×2 (or ÷2) in one step
    outside_update_ratio: float = 0.5  # ...with an update at least half the parameter (a rescale)
    update_over_grad_jump: float = 10 / 3  # ...its update jumped ×3.3 more than its gradient (lr_too_high's 10 vs 3.3)
    adaptive_step_margin: float = 3.0  # ...or, under Adam (a group with betas), an update beyond 3× the most its step can be, lr·(1 − β1)/√(1 − β2) an element (Kingma & Ba 2015, §2.1), over √numel elements: whatever its gradient did (round 37)
    state_jump_factor: float = 10.0  # an optimizer state norm ÷10 in one step (an EMA decays by β at most)
    state_reset_explains: float = 1.5  # a second moment ÷1.5 in one step (impossible for β2 ≥ 0.67) explains its tensor's update jump: not weights changed outside the optimizer (issue 12h: in adam_state-gpt-s1 the refilled states fell ÷1.8–÷19, only 3 past ÷10)
    batch_range_factor: float = 10.0  # a batch 10× outside the range of every batch before it (the chain's unusual-batch factor; the story and the ranking read it too)
    robust_floor: float = 0.05  # decades: floor of a tensor's robust σ when ranking jumps
    learned_after: float = 0.1  # the loss's 10-step rolling median fell ≥ 10 % below its level before a fitted onset: the run kept learning (SageMaker LossNotDecreasing's idea; our choice)
    rise_after_best: float = 2.0  # ...until it rose ×2 above that best level: the incident starts there (Megatron-LM's "back below 2×", as OutcomeThresholds.spike_recovered)


@dataclass(frozen=True)
class GradientThresholds:
    """no_gradient, zero_gradient_tensor, stale_gradients, vanishing_gradient."""

    vanishing_rms: float = 1e-7  # SageMaker Debugger VanishingGradient threshold (mean |grad|)
    vanishing_layer_ratio: float = 1e-3  # first/last layer grad RMS (AUTOTRAINER layer ratio)
    vanishing_monotone_share: float = 0.7  # ≥ 70 % of layer-to-layer steps shrink toward the input...
    vanishing_step_tolerance: float = 2.0  # ...or stay within ×2 (a floor reached in the first layers)
    silent_min_steps: int = 5  # a final stretch of zero/missing values at least this long...
    silent_min_share: float = 0.1  # ...and at least this share of the run
    cut_off_still_learns: float = 0.01  # loss ≥ 1 % lower since a layer's gradient stopped: the run still learns, by its own yardstick (OutcomeThresholds.plateau_improvement's 1 %), so the cut is a warning (session 19: 20 % until then, docs/diagnoses.md)
    stale_growth: float = 5.0  # the accumulated gradient ends ≥ 5× the healthy norm
    stale_rising: float = 0.65  # share of climbing steps where the norm does not decrease
    stale_max_ratio: float = 3.0  # a step multiplying the norm by more ends the accumulation
    stale_loss_improvement: float = 0.1  # the loss got no more than 10 % better meanwhile
    stale_step_size: float = 2.0  # median |step change| ≤ 2× the norm before (one fresh gradient)
    stale_min_climb: int = 5  # steps of climb before any explosion
    stale_earlier_bends: int = 2  # a bend whose climb fails the checks: search up to 2 more times before it (a sharper later bend outscores the start; issue 12h, missing_zero_grad-lstm-s1/tcn-s0)
    stale_exploded: float = 100.0  # ×100 the calm norm: exploded (BreakThresholds.divergence_decades)
    stale_loss_jump: float = 1.2  # a finite accumulation diverged only if a loss within 10 steps of t0 is ≥ 1.2× the 10 before (the truths' jump, sample_runs/training.broke_against); from every step of the bend's interval (issue 12h)
    stale_jump_window: int = 10  # ...those 10 steps
    # The recorder's grad_carried_over (runs from session 11 on; issue 12z, read on the informed missing_zero_grad runs):
    carried_share: float = 0.25  # a record carries gradients over when ≥ a quarter of the parameters reached held one (our choice: a GAN whose generator alone misses zero_grad)
    carried_min_steps: int = 3  # ...3 records in a row start it (one skipped zero_grad is an accident; our choice)
    carried_persist: float = 0.9  # ...and ≥ 90 % of the records from there on carry (the fault persists; our choice)
    carried_still_learns: float = 0.0  # ...a note where the loss still ended lower than before t0 (our choice; on the 84 informed missing_zero_grad runs, healthy by their twins +4 % to +87 %, the others −14 % and below)


@dataclass(frozen=True)
class UpdateThresholds:
    """no_update, lr_too_low (updates / learning rate)."""

    ratio_target: float = 1e-3  # CS231n: update/param ratio ≈ 1e-3
    ratio_low: float = 1e-4  # 10× below the CS231n target
    slow_min_improvement: float = 0.02  # below this the loss is flat (loss_plateau)
    slow_max_improvement: float = 0.5  # the loss did not even halve
    slow_pace_kept: float = 0.5  # late slope within ×2 of the early one: no sign of converging
    slow_linear_r2: float = 0.99  # a straight descent (seed 002 full-batch: r² ≥ 0.997), not minibatch learning (an LM: 0.94–0.97)
    started_near_zero_growth: float = 2.0  # a norm ≥ 2× its start began near 0 (LoRA's B); a matrix from a normal init moves by a fraction of its norm (our choice, round 13)


@dataclass(frozen=True)
class ActivationThresholds:
    """dead_units, saturated_units, log_of_zero."""

    dead_zero_frac: float = 0.9  # SageMaker DeadRelu: most units inactive (ReLU gives ~50 % zeros)
    saturated_frac: float = 0.5  # SageMaker SaturatedActivation threshold_layer = 50 %
    log0_margin: float = 1e-6  # a sigmoid output within 1e-6 of 1 (8 float32 ulps): log(1 − y) one rounding from log(0)


@dataclass(frozen=True)
class InputThresholds:
    """nonfinite_input, unscaled_inputs."""

    unscaled_max_abs: float = 100.0  # two orders of magnitude beyond [-1, 1] (seed 002: 0–3600 s)
    unscaled_abs_mean: float = 10.0  # seed 002: "si la media es 500.0 en lugar de cerca de 0.0"


@dataclass(frozen=True)
class InitThresholds:
    """poor_init."""

    scale_range: tuple[float, float] = (0.05, 10.0)  # std·sqrt(fan_in); PyTorch default 0.58, Kaiming 1.41
    model_share: float = 0.5  # a bad init explains a run that does not learn when it is half the weight matrices or more (seed 003: every layer), not one head scaled on purpose (CleanRL's actor at gain 0.01; session 14)


@dataclass(frozen=True)
class Thresholds:
    """All detector thresholds; `Thresholds()` are the defaults. `breaks` (one series' fitted
    break: credible, diverging, amplified) and `ranking` (which breaks make the run diverged)
    are defined beside the code that reads them, postmortem.onset and postmortem.ranking, which
    the detectors import."""

    outcome: OutcomeThresholds = field(default_factory=OutcomeThresholds)
    divergence: DivergenceThresholds = field(default_factory=DivergenceThresholds)
    root_causes: RootCauseThresholds = field(default_factory=RootCauseThresholds)
    gradients: GradientThresholds = field(default_factory=GradientThresholds)
    updates: UpdateThresholds = field(default_factory=UpdateThresholds)
    activations: ActivationThresholds = field(default_factory=ActivationThresholds)
    inputs: InputThresholds = field(default_factory=InputThresholds)
    init: InitThresholds = field(default_factory=InitThresholds)
    breaks: BreakThresholds = field(default_factory=BreakThresholds)
    ranking: RankingThresholds = field(default_factory=RankingThresholds)
