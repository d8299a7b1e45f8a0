"""Field-like sample runs: the models and training code people run, healthy and with faults injected.

A GPT-style causal LM, a `torch.nn.TransformerEncoder` classifier, a residual CNN with BatchNorm,
a GRU character LM, a timm-style ViT, a tied-embedding LSTM LM, an MLP-Mixer, a TCN, a LLaMA-style
LM, a conv autoencoder (MSE reconstruction), a DLRM-style click model (dict batches of sparse
IDs and dense features, BCE-with-logits), a sparse mixture-of-experts character LM (top-2 routing,
a load-balancing auxiliary loss), a VAE (BCE + KL), a U-Net segmenting generated shapes (per-pixel
cross-entropy), an `nn.Transformer` seq2seq model sorting sequences (padding masks, teacher
forcing, label smoothing), a hand-written GCN classifying the nodes of a stochastic block model
(full batch, a train mask), a SimCLR encoder (two augmented views, InfoNCE), a DDPM denoiser
(noise prediction at a random timestep, MSE, an EMA copy of the weights) and a CTC recogniser
(conv front-end and bidirectional LSTM over audio-like frames, variable lengths), a Mamba
selective state-space character LM, an FT-Transformer classifying rows of a table (numeric and
categorical feature tokens, a [CLS] token), a ConvNeXt classifying colour patterns (layer
scale, stochastic depth, label smoothing), Hugging Face's `BertForMaskedLM` (masked-LM on padded
word sequences, labels -100 off the masked positions), a SIREN fitting an image from its pixel
coordinates (sine activations, MSE), a PointNet classifying point clouds (an input T-net and
its orthogonality regulariser), Hugging Face's `T5ForConditionalGeneration` sorting sequences, a
CLIP-style two-tower contrastive model, a DenseNet-BC, a REINFORCE agent on CartPole, a WGAN-GP
on a ring of Gaussians, Hugging Face's `SwinForImageClassification`, a DQN agent on CartPole, a
student distilled from a frozen teacher, a BYOL encoder, a RealNVP normalizing flow, TransE
knowledge-graph embeddings, an M5 keyword spotter on raw waveforms, LoRA fine-tuning of a
pretrained GPT, a VQ-VAE with an EMA codebook, an N-BEATS forecaster, skip-gram word2vec with
negative sampling, a triplet-loss embedding net, a Wide ResNet trained with SAM, a PPO agent on
CartPole, a one-level FCOS object detector, a timm-style EfficientNet, a physics-informed network,
MAML on sinusoid tasks, pix2pix, a BiLSTM-CRF tagger, a PixelCNN, a neural ODE, a tiny NeRF, a
capsule network, a Soft Actor-Critic agent steering points to goals, a masked autoencoder, an
RWKV language model, a TabNet, a Perceiver, a WaveNet, a Set Transformer, a Conformer, a
graph attention network, a Conditional Neural Process, a Kolmogorov–Arnold Network, a static
hypernetwork, a Diffusion Transformer, a sparse autoencoder, an SN-GAN, an ELECTRA-style text
classifier, torchvision's DeepLabV3, Hugging Face's DecisionTransformerModel, PatchTST, a timm ResNet, a VGG pruned
gradually, a quantization-aware MobileNetV2, Hugging Face's ALBERT, a Deep Equilibrium model,
MoCo v2, a timm ResNet under activation checkpointing with Stochastic Weight Averaging, Tacotron 2, a
GraphSAGE link predictor, DINO, DETR and a DeepAR forecaster (`field_models`),
each trained by nanoGPT's loop (`training.train_field`) with its own loss:
AdamW with weight decay on matrices only, one param group pair per block, linear warm-up then
cosine decay, gradient clipping, an eval loop; the T5 by Hugging Face's `Trainer` and the CLIP
model by Lightning instead (`framework_loops`), the DenseNet with SGD (Nesterov) and a step
schedule; the agent by its own policy-gradient loop (`training.train_policy_gradient`), the
WGAN-GP by Lightning's manual optimisation, the Swin by the plain loop with mixup/cutmix, an EMA
copy and bf16; the DQN agent by the PyTorch DQN tutorial's loop (`training.train_dqn`), the
student by the plain loop with its teacher's logits in the loss, BYOL by the plain loop with its
EMA target network's projections in the loss, the flow by the plain loop with Adam on its negative
log-likelihood (nats per dimension, below 0 once it fits), TransE by the plain loop with plain SGD on
its margin loss and its entity rows renormalised after each step, the M5 by the plain loop under
fp16 autocast with a GradScaler, the LoRA model by the plain loop with only its LoRA matrices in
AdamW, the VQ-VAE by the plain loop with Adam (its codebook moved by its own EMA in the forward
pass), N-BEATS by the plain loop with Adam on sMAPE, clip 1.0 and ElementAI's lr halving,
word2vec by the plain loop with SparseAdam on its sparse embedding gradients, the triplet net by
the plain loop with Adam on batch-hard triplets of P × K batches, the Wide ResNet by davda54/sam's
two-pass loop (`training.train_sam`), the PPO agent by CleanRL's `ppo.py` loop
(`training.train_ppo`: one recorded step a minibatch update), the detector by the plain loop with
SGD (momentum 0.9), torchvision's warm-up and ×0.1 steps on its loss dict (focal + GIoU), the
EfficientNet by the plain loop with RMSprop, timm's warm-up and ×0.97 steps, label smoothing and
a `ModelEmaV2` updated after each step, the PINN by the plain loop with Adam on DeepXDE's loss
terms, MAML by the plain loop with Adam over meta-batches of tasks (the inner loop inside the
model's forward), pix2pix by junyanz's `optimize_parameters` (`training.train_pix2pix`: a D step,
then a G step, each its own Adam), the BiLSTM-CRF by the plain loop with the tutorial's SGD on its
CRF's sentence NLL, the PixelCNN by the plain loop with Adam on its per-pixel cross-entropy, the
neural ODE by the plain loop with RMSprop on the L1 error of its RK4 solutions (the solver's
steps inside the model's forward), the NeRF by the plain loop with Adam on the MSE of the colours
it renders along one view's rays, the capsule network by the plain loop with Adam on its margin and
reconstruction loss, the labels given to its forward (its decoder's mask), the SAC agent by
pranz24/pytorch-soft-actor-critic's loop (`training.train_sac`: a replay buffer, twin critics and
a Polyak-averaged target critic, the policy and the temperature each with its own Adam; one
recorded step an episode of its envs and an update after each env step), the masked autoencoder
by the plain loop with AdamW and mae's per-step warm-up and cosine on its masked-patch MSE, the
RWKV LM by the plain loop with RWKV's Adam (its per-parameter lr multipliers, no weight decay),
warm-up and exponential decay and its `L2Wrap`ped cross-entropy, the TabNet by the plain loop
with pytorch-tabnet's Adam, `StepLR` and gradient-norm clip on its cross-entropy plus the masks'
entropy, the Perceiver by the plain loop with perceiver-pytorch's train_cifar10 recipe (AdamW with
decay on every parameter, `OneCycleLR` with its cycled β1, clip 1.0),
the WaveNet by the plain loop with pytorch-wavenet's `WavenetTrainer` settings (Adam at
1e-3, no weight decay, no clipping, no schedule) on the next sample's cross-entropy, the Set
Transformer by the plain loop with set_transformer's max_regression_demo recipe (Adam at 1e-4, no
weight decay, no clipping, no schedule) on the L1 error of its predicted set maxima, the
Conformer by the plain loop with Gulati et al.'s Adam (β 0.9, 0.98, ε 1e-9) and transformer
warm-up schedule, openspeech's clip 5.0, on its CTC loss, the GAT by the plain loop with pyGAT's
train.py recipe (Adam at 5e-3, L2 5e-4 on every parameter, no clipping, no schedule) on the NLL
of its training nodes, full batch on the GCN's graph, the
Conditional Neural Process by the plain loop with the neural-processes notebook's Adam (its lr ×10,
no clipping, no schedule) on the Gaussian NLL of its target points, the KAN by the plain loop with
efficient-kan's MNIST example recipe (AdamW at 1e-3, decay 1e-4 on every parameter, ×0.8 an epoch,
no clipping) on its cross-entropy, the hypernetwork CNN by the plain loop with
g1910free/HyperNetworks' train.py recipe (Adam at 2e-3, L2 5e-4 on every parameter, no clipping, no
schedule in 150 steps) on cross-entropy, the DiT by the plain loop with facebookresearch/DiT's
train.py recipe (AdamW at weight decay 0, a constant lr, no clipping, its EMA's update_ema after
each step; lr ×10, batch 64) on the MSE of the noise it predicts at a uniform timestep, its class labels given
to its forward, the sparse autoencoder by the plain loop with openai/sparse_autoencoder's train.py
recipe (Adam, eps 6.25e-10, a constant lr, no clipping; the decoder's parallel gradient removed
before each step, its columns put back to unit norm after it; lr ×10) on the normalised MSE + λ ·
normalised L1 of toy-model activations, the SN-GAN by PyTorch-StudioGAN's D/G steps
(`training.train_sngan`: `SNGAN_N_DIS` hinge-loss discriminator updates, then one generator update,
each network its own Adam (β (0, 0.9); lr ×5 their 2e-4), a constant lr, no clipping), the ELECTRA
classifier by the plain loop with
google-research/electra's fine-tuning recipe (AdamW eps 1e-6 over layer-wise lr decay groups, two a
depth, linear warm-up and decay, clip 1.0; gradient checkpointing on every encoder layer; lr ×3.3) on
the cross-entropy of a synthetic marker task, DeepLabV3 by the plain loop with torchvision's
references/segmentation/train.py recipe (SGD momentum 0.9, weight decay 1e-4, the aux classifier's
group at lr ×10, linear warm-up then `PolynomialLR` power 0.9 per iteration) on its `criterion`
(cross-entropy ignoring the void label 255, out + 0.5 × aux) of VOC-like shapes, PatchTST by the
plain loop with yuqinie98/PatchTST's supervised recipe (Adam, `OneCycleLR` with `pct_start` 0.3 per
step, no clipping) on the MSE of standardised forecasts of an ETTh1-like series, the timm ResNet by
the plain loop with rwightman/pytorch-image-models' train.py recipe (timm's `Mixup` to soft
label-smoothed targets per batch, `SoftTargetCrossEntropy`, SGD with Nesterov momentum, weight
decay off biases and norms, a per-update cosine schedule after a linear warm-up, a `ModelEmaV2`
after each step, its top-1 and the EMA's evaluated) on the colour patterns, the pruned VGG by the
plain loop with Distiller's AGP recipe (SGD momentum 0.9, weight decay on every parameter, ×0.1
steps; Zhu & Gupta's cubic sparsity schedule to 87.5 % by `torch.nn.utils.prune.global_unstructured`
every 5 steps from 20 % to 70 % of the run, `before_step`) on the digits, the quantization-aware
MobileNetV2 by the plain loop with pytorch/vision's references/classification/train_quantization.py
recipe (eager-mode `prepare_qat` after `fuse_model(is_qat=True)`, the qnnpack QAT qconfig, SGD
momentum 0.9 with weight decay 1e-4 on every parameter, cross-entropy, `disable_observer` and
`freeze_bn_stats` at epoch boundaries by `before_eval`, the fake-quant model's and an int8 `convert`ed copy's top-1
each epoch) on the colour patterns, from a float model trained in-process first, the ALBERT
classifier (one layer group shared by all four applications, factorised embeddings) by the plain
loop with google-research/albert's run_classifier.py / HF run_glue.py recipe (AdamW eps 1e-6,
weight decay 0.01 off biases and LayerNorms, linear warm-up over 10 % then linear decay to 0, clip
1.0, batch 32; lr ×20-100) on the marker task in run_glue's dict batches, `labels` popped,
the Deep Equilibrium model by the plain loop with the "Deep Implicit Layers" tutorial's chapter-4 recipe
(its `DEQFixedPoint`: Anderson acceleration to the cell's fixed point under `no_grad`, the
implicit backward by a `register_hook` on z*; Adam at 1e-3, `CosineAnnealingLR` per step, no
clipping, cross-entropy; its top-1 each eval) on the 8×8 digits, the Wide ResNet under
DistributedDataParallel by the plain loop with pytorch/vision's references/classification/train.py
recipe (a single-process gloo group, `module.`-prefixed parameters, a `DistributedSampler` with
`set_epoch`, SGD with Nesterov momentum 0.9 and weight decay 5e-4 on every parameter,
cross-entropy, `ReduceLROnPlateau` on the eval loss each epoch, a checkpoint saved and resumed by
`load_state_dict` into the same objects at one epoch boundary) on the colour patterns,
MoCo v2 by the plain loop with
facebookresearch/moco's main_moco.py recipe (SGD lr 0.03, momentum 0.9, weight decay 1e-4 on every
query-encoder parameter, cosine to 0 per step, no warm-up, no clipping; the key encoder moved by the
momentum update and the queue of keys rolled inside the model's training forward, as builder.py does,
no optimizer touching either; the demo's kNN top-1 each eval) on two augmented views of the colour
patterns, the checkpointed ResNet with SWA by the plain loop with the `torch.optim.swa_utils`
docstring's recipe (SGD momentum 0.9, weight decay 5e-4 on every parameter, `CosineAnnealingLR`
stepped once an epoch until `swa_start`, then `swa_model.update_parameters(model)` and
`SWALR(anneal_strategy="cos")` once an epoch; `update_bn` over the training loader before each
evaluation of the averaged model; cross-entropy) on the colour patterns, Tacotron 2 by the plain loop with NVIDIA/tacotron2's train.py / hparams.py recipe (Adam
eps 1e-6, weight decay 1e-6 as L2 on every parameter, a constant lr ×10 upstream's, no warm-up,
`clip_grad_norm_` at `grad_clip_thresh` 1.0, batch 16; `Tacotron2Loss`; teacher-forced, its
`validate` the loop's eval loss) on synthetic character strings and their mel frames, padded
batches sorted by text length as `TextMelCollate` makes them, the GraphSAGE link predictor by the
plain loop with snap-stanford/ogb's examples/linkproppred/collab/gnn.py recipe (one Adam at a constant
lr over the encoder and the predictor, no weight decay, no warm-up, the encoder's and the predictor's
gradients each clipped to 1.0 before the step; mini-batches of positive training edges from a
shuffled `DataLoader` over their indices, as many negatives drawn uniformly by `torch.randint` each
batch, the whole graph encoded every step; its hand-written −log(pos) − log(1 − neg); its `test()`'s
Hits@50 on the fixed valid negatives once an epoch) on a stochastic block model's edges, DINO by the plain loop with
facebookresearch/dino's main_dino.py recipe (AdamW over get_params_groups' partition, the lr by
`cosine_scheduler` with a linear warm-up, the weight decay by `cosine_scheduler(0.04, 0.4)` on the
regularised groups each step, `clip_gradients` per parameter at 3.0 and `cancel_gradients_last_layer`
for the first epoch before each step, the teacher moved by an EMA at a cosine momentum schedule
after it, never by the optimizer; `DINOLoss` with its center; eval_knn.py's weighted kNN top-1 of
the teacher's backbone each step, which its truth reads) on multi-crop batches (2 global + 4 local
crops, `DataAugmentationDINO`) of synthetic class textures, DETR by the plain loop with
facebookresearch/detr's main.py and engine.py recipe (AdamW over main.py's two `param_dicts`, the
backbone's at a tenth of the rest's lr, weight decay 1e-4 on every parameter, `StepLR` ×0.1 at
`lr_drop`, no warm-up; `clip_grad_norm_` at `clip_max_norm` 0.1 before each step; the loss the sum of
`SetCriterion`'s weighted dict (Hungarian-matched CE with the no-object class at `eos_coef` 0.1, L1 ×5,
GIoU ×2, each decoder layer's auxiliary copies), each part recorded beside it; VOC AP50 of the held-out
images every 25 steps) on synthetic colour shapes with their boxes, DeepAR by Lightning
(`framework_loops.train_lightning`) with GluonTS's DeepAREstimator / DeepARLightningModule recipe
(Adam at 1e-3, weight decay 1e-8 as L2 on every parameter, the Trainer's `gradient_clip_val` 10,
`ReduceLROnPlateau(factor=0.5)` on the epoch's mean train_loss, batch 32; the Student's t NLL of the
scaled targets, teacher-forced; its validation_step's val_loss and the held-out day's mean weighted
quantile loss of 20 sample paths a series after every step, which its truth reads) on
`InstanceSplitter` windows of related hourly series. Faults
come from `faults.py`, at a step t0 and on a tensor drawn per (family, arch, seed); the truth
comes from the injection and from the losses the loop saw (a fault the run shrugs off is
recorded as healthy), never from the analyzer. A family
whose loss does not fall as it learns declares the metric its truth reads instead
(`OUTCOME_METRICS`: the agents' reward (the PPO agent's episodic return), the WGAN's sample distance, the flow's NLL less the data's
entropy, the triplet net's held-out recall@1, the PINN's held-out error to the exact solution, MAML's
post-adaptation loss on held-out tasks, pix2pix's held-out L1 error, the NeRF's held-out view's MSE,
the SAC agent's episodic return, the SN-GAN's sample distance, DeepAR's held-out weighted quantile loss).
"""
from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import faults
from .data import (
    TAGS,
    CAPTIONS,
    CARTPOLE,
    CLOUDS,
    DENSITY,
    EDGES,
    NERF_SCENE,
    POINT_MASS,
    POISSON,
    SINUSOIDS,
    SPIRAL,
    TAGGING,
    KEYWORDS,
    BOXES,
    KITCHEN_WORDS,
    KNOWLEDGE_GRAPH,
    MLM,
    TOPICS,
    PATTERNS,
    RING,
    SERIES,
    SIGNAL,
    SORT,
    SPEECH,
    MEL_SPEECH,
    T5_SORT,
    TABLE,
    WAVEFORMS,
    CartPole,
    Dataset,
    PointMass,
    batch_sampler,
    box_images,
    captioned_digits,
    char_corpus,
    class_balanced_sampler,
    click_data,
    corrupted_triples_sampler,
    ctc_batch_sampler,
    density_points,
    digits,
    digit_levels,
    edge_photo_pairs,
    nerf_rays_sampler,
    nerf_views,
    poisson_points_sampler,
    spiral_windows_sampler,
    tagged_sentences,
    sinusoid_tasks_sampler,
    forecast_windows_sampler,
    images_sampler,
    keyword_clips,
    knowledge_graph,
    lm_batch_sampler,
    masked_lm_sampler,
    noisy_digits,
    pattern_images,
    related_word_pairs,
    point_clouds,
    ring_points,
    sort_batch_sampler,
    sbm_graph,
    sbm_link_split,
    DETR_SHAPES,
    detr_shapes,
    RELATED_SERIES,
    related_series,
    shapes_data,
    VOC_SHAPES,
    voc_shapes,
    voc_train_sampler,
    POINT_REACH,
    decision_transformer_sampler,
    point_reach_state_stats,
    point_reach_trajectories,
    ETT_LIKE,
    ett_like_windows,
    signal_pixels,
    skipgram_sampler,
    t5_collate,
    t5_rows,
    table_data,
    two_views_sampler,
    waveform_clips,
    waveform_windows_sampler,
    max_set_chance,
    max_set_sampler,
    gp_curves_chance,
    gp_curves_floor,
    gp_curves_sampler,
)
from .expected import Expected
from .field_models import (
    CONTEXT,
    FIELD_ARCHS,
    build_field_model,
    KDTeacher,
    ModelEmaV2,
    SAM,
    batch_hard_triplet_loss,
    codebook_perplexity,
    clip_loss,
    ctc_loss,
    conformer_ctc_loss,
    cnp_nll,
    CNP_SIGMA_FLOOR,
    byol_ema_update,
    byol_loss,
    byol_target,
    ddpm_loss,
    dit_loss,
    dit_update_ema,
    DIT_EMA_DECAY,
    sae_loss,
    sae_toy_activations,
    sae_unit_norm_decoder_,
    sae_unit_norm_decoder_grad_adjustment_,
    ELECTRA_LAYER_DECAY,
    electra_accuracy,
    electra_collate,
    electra_param_groups_lrd,
    electra_rows,
    electra_sampler,
    albert_collate,
    albert_sampler,
    MUON_GPT_MUON_LR,
    muon_gpt_momentum,
    muon_gpt_optimizers,
    DEEPLAB_CLASSES,
    deeplab_criterion,
    deeplab_evaluate,
    deeplab_params_to_optimize,
    dt_action_loss,
    dt_random_return,
    dt_rollouts,
    patchtst_evaluate,
    timm_top1,
    MOCO_K,
    moco_knn_top1,
    moco_loss,
    DINO_LOCAL_CROPS,
    DINO_LOCAL_IMG,
    DINO_IMG,
    DINO_OUT_DIM,
    DINOLoss,
    dino_cancel_gradients_last_layer,
    dino_clip_gradients,
    dino_cosine_scheduler,
    dino_ema_update,
    dino_knn_top1,
    dino_teacher,
    DETR_QUERIES,
    DETR_LR_BACKBONE_SCALE,
    detr_box_cxcywh_to_xyxy,
    detr_evaluate_ap50,
    detr_generalized_box_iou,
    detr_loss,
    detr_weight_dict,
    swa_gc_top1,
    TACOTRON_CHARS,
    TACOTRON_MELS,
    shuffled_indices,
    tacotron2_loss,
    tacotron_collate,
    tacotron_mask_from_lengths,
    LINK_PRED_CLIP,
    link_pred_clip_,
    link_pred_hits,
    link_pred_loss,
    DeepAR,
    DEEPAR_PREDICTION_LENGTH,
    DEEPAR_CONTEXT_LENGTH,
    DEEPAR_LAGS,
    DEEPAR_SAMPLES,
    deepar_loss,
    deepar_sample_paths,
    mean_weighted_quantile_loss,
    deepar_time_features,
    agp_prune,
    global_sparsity,
    QAT_BACKEND,
    QatMobileNetV2,
    qat_int8_top1,
    qat_prepare,
    detection_iou,
    distillation_loss,
    fcos_loss,
    fcos_targets,
    flow_nll,
    sigmoid_focal_loss,
    hits_at_k,
    l2_relative_error,
    crf_nll,
    entity_f1,
    caps_loss,
    capsule_accuracy,
    margin_loss,
    CAPSNET_RECONSTRUCTION,
    mae_loss,
    MAE_PATCH,
    RWKV_LR,
    rwkv_loss,
    tabnet_loss,
    patchify,
    pinn_loss,
    trajectory_error,
    pix2pix_l1_error,
    info_nce_loss,
    keyword_nll_loss,
    mixup_cutmix,
    moe_lm_loss,
    nanogpt_init,
    pointnet_loss,
    recall_at_1,
    seq2seq_loss,
    sgns_loss,
    sliced_wasserstein,
    smape_2_loss,
    smooth_crossentropy,
    smoothed_cross_entropy,
    soft_target_cross_entropy,
    TRANSE_MARGIN,
    transe_margin_loss,
    vae_loss,
    vqvae_loss,
    word_similarity_spearman,
    WRNEpochLoader,
    ddp_wrap,
    gloo_process_group,
    wrn_evaluate,
)
from .models import TinyGPT
from .nanogpt import LoopConfig, lr_at
from .framework_loops import train_hf_trainer, train_lightning, train_lightning_wgan
from .training import (broke_against, stalled_against, token_cross_entropy, train_dqn, train_field,
                       train_muon_gpt, train_pix2pix, train_policy_gradient, train_ppo, train_sac, train_sam,
                       train_sngan)

__all__ = ["FIELD_ARCHS", "FIELD_FAMILIES", "field_run", "field_families"]

STEPS = 150
T0_RANGE = (40, 100)
CORPUS_CHARS = 20_000


@dataclass(frozen=True)
class Recipe:
    """How an architecture is trained when healthy: what a practitioner would write for it."""

    lr: float
    weight_decay: float
    batch: int
    accumulation: int = 1
    clip: float | None = 1.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup: int = 15
    ema: float | None = None
    """The decay of an EMA copy of the weights updated after each optimizer step (diffusion models)."""
    optimizer: str = "adamw"
    """`adamw`, `adam` (L2 weight decay in the gradient), `sgd` (Nesterov momentum 0.9), `plain_sgd`
    (no momentum: OpenKE's default), `sparse_adam` (`torch.optim.SparseAdam`) or `sam` (davda54's
    SAM around SGD with momentum 0.9, rho `SAM_RHO`), `cleanrl_adam` (Adam, eps 1e-5: CleanRL's),
    `momentum_sgd` (momentum 0.9, no Nesterov: torchvision's detection references) or `rmsprop_tf`
    (timm's `rmsproptf` settings on `torch.optim.RMSprop`), `transformer_adam` (Adam with ε 1e-9,
    its β the recipe's: the Conformer's), `muon_adam` (modded-nanogpt's Muon + Adam pair,
    `field_models.muon_gpt_optimizers`, built in `_train`); `OPTIMIZERS`."""
    schedule: str = "cosine"
    """`cosine` (nanoGPT's warm-up then cosine), `step` (÷10 at 50 % and 75 % of the steps:
    DenseNet's), `linear` (decay to 0 over the run: WGAN-GP's), `halving` (× 0.5 every third of
    the steps: ElementAI's N-BEATS), `annealing` (`CosineAnnealingLR` to 0 over the run, no
    warm-up: word2vec-pytorch's), `step_x0.2` (× 0.2 at 30 %, 60 % and 80 % of the steps: davda54/sam's
    `StepLR`), `warmup_multistep` (linear warm-up from 0.001×, then ×0.1 at 16/26 and 22/26 of the
    steps: torchvision's detection references), `warmup_exp` (linear warm-up, then ×0.97 every
    `EXP_DECAY_STEPS` steps: timm's `step` scheduler), `mae_cosine` (linear warm-up from 0, then a
    half cosine to 0: mae's `lr_sched.adjust_learning_rate`, per step), `rwkv_exp` (a warm-up
    from 0.2× to 1×, then exponential decay to `RWKV_LR_FINAL_RATIO`: RWKV-v4neo's trainer),
    `step_x0.9` (× 0.9 every `TABNET_LR_STEP` steps: pytorch-tabnet's `StepLR` example),
    `exp_x0.8` (× 0.8 every `KAN_EPOCH_STEPS` steps: efficient-kan's `ExponentialLR(gamma=0.8)`
    stepped once an epoch),
    `one_cycle` (torch's `OneCycleLR` at its defaults: a cosine rise from 1/25 of the lr over
    `warmup` steps, then a cosine fall to 1/25 × 1e-4 of it; β1 cycled 0.95 → 0.85 → 0.95 with it by
    `_one_cycle_momentum`: perceiver-pytorch's train_cifar10.py), `noam` (Vaswani et al.'s
    warm-up then inverse square root, peaking at the lr on step `warmup` − 1: min((s + 1)/w,
    √(w/(s + 1))); no warm-up is a warm-up of 1 step: the Conformer's) or
    `stable_decay` (modded-nanogpt's `get_lr`: 1, then linear to 0.1 over the last
    `MUON_GPT_COOLDOWN_FRAC` of the steps) or
    `dt_warmup` (kzl/decision-transformer's LambdaLR: min((step + 1) / warmup, 1), then constant) or
    `constant` (Stable-Baselines3's default)."""
    bf16: bool = False
    """Trained under CPU bf16 autocast (timm's `--amp` with bf16)."""
    amsgrad: bool = False
    """AdamW with AMSGrad (the PyTorch DQN tutorial's optimizer)."""
    fp16: bool = False
    """Trained under CPU float16 autocast with a `torch.amp.GradScaler("cpu")` (torch.amp's fp16
    recipe; `healthy_bf16` trains it under bf16 autocast without the scaler instead)."""


PPO_LR = 2.5e-3
"""The PPO agent's Adam lr: 10× CleanRL's 2.5e-4, which trains ~1000 rollouts where a run here has
~9 (at 2.5e-4 the return shortfall ended 0.96-0.97× its start, seeds 0 and 1; at 2.5e-3 0.11-0.46×)."""
EFFICIENTNET_LR = 1e-3
"""The EfficientNet's RMSprop lr: timm's .048 for 1536 images scaled linearly to batch 32."""
EXP_DECAY_STEPS = 10
"""Steps between timm's ×0.97 lr decays (`warmup_exp`; its 2.4 epochs, scaled to a 150-step run)."""
MODEL_EMA_DECAY = 0.999
"""The EfficientNet's `ModelEmaV2` decay (timm's `--model-ema-decay` 0.9998, lower for 150 steps)."""
PINN_LR = 3e-3
"""The PINN's Adam lr: 3× DeepXDE's 1e-3, which trains 10000 iterations where a run here has 150 (at
1e-3 the held-out l2 relative error went 0.74 -> 1.06, seed 0; at 3e-3 0.79 -> 0.12 and 0.81 -> 0.09)."""
MAML_LR = 3e-3
"""The MAML meta-optimizer's Adam lr: 3× tristandeleu/pytorch-maml's `--meta-lr` 1e-3, which meta-trains
for tens of thousands of batches (at 1e-3 the held-out post-adaptation loss ended 0.78× its start,
seed 0; at 3e-3 0.67× and 0.56×, seeds 0 and 1)."""
CRF_LR = 0.1
"""The BiLSTM-CRF's SGD lr: 10× the tutorial's 0.01, which trains 300 epochs of its sentences where a
run here has 150 batches (at 0.01 the sentence NLL went 14.93 -> 6.30, above the words-blind CRF's
5.44, and the held-out entity F1 0.07 -> 0.00, seed 0; at 0.1 the NLL ended 0.80, 1.22, 0.84 and the
F1 0.89, 0.80, 0.90, seeds 0-2)."""
PPO_ENVS = 4
"""CartPoles the PPO agent steps together (CleanRL's `num_envs`)."""
PPO_ROLLOUT = 128
"""Steps of each env a PPO rollout collects (CleanRL's `num_steps`)."""

SAC_LR = 3e-4
"""The SAC agent's Adam lr (pranz24's `--lr` 0.0003 for all three optimizers)."""
# pranz24's main.py steps one env and updates once per env step; here POINT_MASS.envs (32) envs
# step together and the agent updates once per vector step: one update per 32 transitions.
SAC_START_STEPS = 800
"""Transitions acted uniformly at random before the policy acts (pranz24's `--start_steps` 10000,
for a run of ~60k transitions here: the first two steps' episodes)."""
MAE_LR = 1.5e-3
"""The MAE's AdamW lr: mae's `--blr` 1.5e-4 × batch / 256 is 3.75e-5 at batch 64, for 400 epochs
where a run here has ~6."""

RWKV_LR_FINAL_RATIO = 1e-5 / 6e-4
"""`lr_final` / `lr_init` of v4neo's example (`--lr_init 6e-4 --lr_final 1e-5`)."""
RWKV_WARMUP = 10
"""RWKV's `--warmup_steps` (its later demo scripts' 10; v4neo's examples 0)."""

TABNET_LR_STEP = 15
"""Steps between `StepLR`'s ×0.9 for the TabNet: pytorch-tabnet's README example decays ×0.9 every
50 epochs (`step_size` 50, stepped once an epoch); a run here is 16 epochs of the table's 2400
training rows at batch 256, each ×0.9 here every 15 steps (1.6 epochs): 9 decays, ×0.39 by the end."""

ONE_CYCLE_DIV = 25.0
"""`OneCycleLR`'s `div_factor`: its first lr is max_lr / 25."""
ONE_CYCLE_FINAL_DIV = 1e4
"""`OneCycleLR`'s `final_div_factor`: its last lr is the first / 1e4."""
ONE_CYCLE_MOMENTUM = (0.85, 0.95)
"""`OneCycleLR`'s (`base_momentum`, `max_momentum`): Adam's β1 at the lr's peak and at its ends."""
PERCEIVER_LR = 3e-3
"""The Perceiver's OneCycleLR max_lr: 3× train_cifar10's 1e-3, which trains 20 epochs of CIFAR-10 at
batch 128 (7800 steps) where a run here has 150 (at 1e-3 loss 2.38 -> 2.28, chance ln 10 = 2.30,
seed 0; at 3e-3 with a cross head of 64 on the normalised digits see the healthy test)."""
CONFORMER_LR = 0.05 / math.sqrt(32)
"""The Conformer's peak lr: Gulati et al.'s 0.05/√d at its d 32 (8.8e-3)."""
NP_LR = 1e-3
"""The Conditional Neural Process's lr: the notebook's Adam 1e-4 trains 2e5 iterations; here 150
steps, at ×10 (held-out NLL less its floor 1.68 -> 1.23, seed 0; 3e-3 and 5e-4 end alike: 150 steps
learn each function's scale from its context, not yet its shape)."""
CONFORMER_WARMUP = 25
"""The Conformer's warm-up: the paper's 10k steps of a run of hundreds of thousands, here 25 of 150
(then the inverse square root: ×0.41 by the last step)."""
HYPERNETWORK_LR = 2e-3
"""The hypernetwork's Adam lr: train.py's 0.002 (see its healthy test)."""
PERCEIVER_WARMUP = 45
"""The Perceiver's rising phase: `OneCycleLR`'s `pct_start` 0.3 of `STEPS` (its `float(pct_start ·
total_steps) − 1` = 44 is the last step of the rise)."""

KAN_LR = 3e-3
"""The KAN's AdamW lr: 3× efficient-kan's MNIST example's 1e-3, which trains 10 epochs of 938 batches
where a run here has 150 steps (at 1e-3 loss 2.30 -> 1.32, 2.28 -> 1.27, 2.27 -> 1.24, seeds 0-2,
first/last 10-step means, and lr_too_high's ×100 (0.1) learned best of all, 1.19 -> 0.004, seed 0;
at 3e-3 see the healthy test)."""
KAN_EPOCH_STEPS = 24
"""Steps of one epoch of the KAN's example (`exp_x0.8`): the 1500 training digits at batch 64 (its
DataLoader's ceil(1500 / 64) = 24 batches); its ExponentialLR(gamma=0.8) is stepped once an epoch,
6 decays in a 150-step run (×0.26 by the end)."""

DIT_LR = 1e-3
"""The DiT's AdamW lr: 10× train.py's constant 1e-4, which trains 400k steps of batch 256 where a run
here has 150 of 64 (at 1e-4, seeds 0-2, first/last 10-step means 0.997 -> 0.602, 0.992 -> 0.620,
0.992 -> 0.629, and lr_too_high's ×100 (1e-2) learned best of all, 0.537 -> 0.125 and 0.537 ->
0.135, seeds 0 and 1: no lr_too_high truth could be a fault; at 1e-3 see the healthy test, its ×100
ends 0.38-0.70 against the healthy 0.15)."""
DIT_BATCH = 64
"""The DiT's batch: 64 where train.py's `--global-batch-size` is 256 (a run here is ~6 epochs of the
1500 training digits; at 256, with widths 64 / depth 4, a run cost 3.3× this one's and still ended at
0.28 at lr 1e-4, seed 0)."""

SAE_LR = 1e-3
"""The SAE's Adam lr: 10× openai/sparse_autoencoder's train.py 1e-4, which trains for millions of
vectors where a run here has 150 batches of 256: at 1e-4, seeds 0-2, first/last 10-step means
0.851 -> 0.270, 0.702 -> 0.268, 0.478 -> 0.207, and lr_too_high's ×100 (1e-2) learned best of all,
0.335 -> 0.051, 0.307 -> 0.049, 0.235 -> 0.047: no lr_too_high truth could be a fault. At 1e-3
healthy 0.556 -> 0.084, 0.484 -> 0.081, 0.339 -> 0.073; its ×100 (0.1) ends 0.27 / 0.18 / 0.24
(chance 0.603). The healthy run's last batch still fires ~60 of 128 latents (L1 has not yet won
in 150 steps: λ 0.1 gives 46 at a final loss 0.42, seed 0, before the mean offset; `SAE_L1_COEF`)."""
SAE_BATCH = 256
"""The SAE's batch of activation vectors (openai's train.py reads 131072 a batch; 8192 toy training
vectors here, a run ~4.7 epochs)."""

SNGAN_N_DIS = 2
"""The SN-GAN's discriminator updates per generator update (StudioGAN's `d_updates_per_step`;
Miyato et al. use 1 to 5 by setting, 5 with β (0, 0.9) at 2e-4 on their ResNets): 2, as the brief
of round 27 allowed, to fit 150 steps of a 2-core CPU."""
SNGAN_LR = 1e-3
"""The SN-GAN's Adam lr for each network: 5× the 2e-4 of Miyato et al.'s hinge / ResNet setting
(StudioGAN's SNGAN configs, christiancosgrove's default), within the paper's own Table 1 (settings D-F
train at α = 1e-3, with β1 0.5 or 0.9, n_dis 5: where SN-GAN held up and the other GANs did not).
Measured, seeds 0-2, the sample distance's first/last 10-step means: at 2e-4 healthy 0.630 -> 0.258,
0.577 -> 0.286, 0.472 -> 0.208 (seed 0's 10-step means bottom at 0.180 by step 60, then climb back
to 0.258: 150 steps are the start of a GAN's training), and lr_too_high's ×100 (2e-2) ends 0.245 /
0.195 / 0.237, as well as or better than the healthy run: no lr_too_high truth could be a fault. At
1e-3 healthy 0.453 -> 0.182, 0.509 -> 0.147, 0.360 -> 0.185, falling to the end; its ×100 (0.1)
ends 0.44 / 0.45 / 0.94 (chance 0.44: the training digits' mean image)."""
SNGAN_BATCH = 64
"""The SN-GAN's batch of real digits a discriminator update (StudioGAN's and christiancosgrove's 64)."""
DEEPLAB_LR = 0.02
"""DeepLab's lr: train.py's DeepLabV3 recipe's 0.02, kept (no departure). Measured on the healthy
loop, unrecorded, seeds 0-2, first/last 10-step loss means 1.898 -> 0.463, 1.612 -> 0.425, 1.887 ->
0.416, held-out mIoU 0.014 / 0.006 / 0.012 at step 0 -> 0.400 / 0.306 / 0.396 at step 125 (0.18 is
background everywhere). The departures are of size, not of the recipe: a backbone trained from its
init (train.py's `--weights-backbone` is ImageNet's), (1, 1, 2, 2) blocks at widths 8-64 ×4, head
width 64, rates `DEEPLAB_RATES`, 48-pixel images and 40-pixel crops, no `RandomResize`, batch
`DEEPLAB_BATCH`, a 15-step warm-up (train.py's `--lr-warmup-epochs` defaults to 0)."""
DEEPLAB_BATCH = 16
"""DeepLab's batch (train.py's 4 images a GPU on 8 GPUs, 32; half here, for a 2-core CPU)."""
TIMM_MIXUP_LR = 0.1
"""The timm ResNet's SGD lr (timm's `--lr-base` 0.1 at 256 images, here at batch `TIMM_MIXUP_BATCH`
without the linear scaling to 0.0125 that `--lr-base-scale linear` would apply: 150 steps)."""
TIMM_MIXUP_BATCH = 64
"""The timm ResNet's batch."""
TIMM_MIXUP_WARMUP = 10
"""The timm ResNet's warm-up updates (`--warmup-epochs`, in updates: `CosineLRScheduler` stepped
per update, `t_in_epochs=False`)."""
TIMM_WARMUP_LR_RATIO = 1e-5 / TIMM_MIXUP_LR
"""timm's `--warmup-lr` 1e-5 as a factor on the recipe's lr (the schedule is a factor on each
group's base lr)."""
TIMM_EMA_DECAY = 0.99
"""The timm ResNet's `ModelEmaV2` decay (timm's `--model-ema-decay` 0.9998 averages over ~5000
updates; 0.99 over ~100, for a 150-step run)."""
TIMM_MIXUP_OFF = None
"""The step from which mixup is off (timm's `--mixup-off-epoch`; its default 0: never off)."""
AGP_LR = 0.1
"""The pruned VGG's SGD lr: Distiller's compress_classifier.py CIFAR runs' `--lr 0.1` (its AGP
examples' commands), kept."""
AGP_BATCH = 64
"""The pruned VGG's batch (compress_classifier.py's `-b` 128 at CIFAR's 50k images; half here, for a
2-core CPU and 1600 training patterns)."""
QAT_LR = 5e-3
"""The QAT MobileNetV2's SGD lr: 50× train_quantization.py's `--lr` 1e-4, which fine-tunes for ~10
ImageNet epochs (tens of thousands of steps) where a run here has 150, from a float model trained
in-process (`qat_float_base`: no pretrained weights can be downloaded). Measured on the healthy
loop, unrecorded, seeds 0-2, first/last 10-step loss means: 0.227 -> 0.028, 0.188 -> 0.012, 0.186 ->
0.004, the int8 copy's top-1 93-98 % after the first epoch, 100 % by the end. At the reference's
1e-4 the loss fell 0.238 -> 0.127, 0.191 -> 0.133, 0.205 -> 0.107, but with every lr at 0 it fell
0.238 -> 0.185 too (seed 0: the BN statistics and observers settling on the fused model, then the
BN freeze), so 1e-4 would leave the healthy check telling little learning from calibration. At 1e-2 seed 1
ended 0.185 -> 0.276 (top-1 26 % at step 105, after the BN freeze); QAT from scratch (lr 0.05, no
float model) stalled or diverged once BN statistics froze at step 60 (1.38 -> 1.39 / 2.54)."""
QAT_BATCH = 32
"""The QAT MobileNetV2's batch (train_quantization.py's `--batch-size` 32 a GPU)."""
QAT_FLOAT_LR = 0.045
"""The float MobileNetV2's SGD lr before QAT (torchvision's classification recipe for it)."""
QAT_FLOAT_STEPS = 40
"""Steps of the float model's training before the recorded QAT run (`qat_float_base`)."""
QAT_EPOCH_STEPS = 15
"""Steps of one QAT "epoch": the reference's README says QAT converges in about 10 epochs; a run
here is 10 of 15 steps (480 of the 1600 training patterns each, not a pass over them)."""
DDP_WRN_LR = 0.1
"""The DDP Wide ResNet's SGD lr: the WRN paper's 0.1 (torchvision train.py's `--lr` default too), as
it is, at batch `DDP_WRN_BATCH`; no warm-up (train.py's `--lr-warmup-epochs` 0)."""
DDP_WRN_BATCH = 64
"""The DDP Wide ResNet's batch a process (train.py's `-b`; the WRN paper's 128, half here for a
2-core CPU): 1600 patterns are `DDP_WRN_EPOCH_STEPS` steps an epoch at world size 1."""
DDP_WRN_EPOCH_STEPS = 25
"""Steps of one epoch: the 1600 training patterns at batch 64 on one rank (6 epochs a run)."""
DDP_WRN_PLATEAU = {"mode": "min", "factor": 0.2, "patience": 0}
"""`torch.optim.lr_scheduler.ReduceLROnPlateau` on the epoch's eval loss: factor 0.2 (the WRN
paper's drop factor), patience 0 (the lr drops after any epoch whose eval loss did not improve;
its default 10 would never fire in a run of 5 evaluations),
threshold 1e-4 relative and cooldown 0 (torch's defaults). train.py's own `--lr-scheduler` choices
are steplr / cosineannealinglr / exponentiallr; the plateau scheduler on its evaluate()'s loss is
the departure this family makes, stepped where train.py steps its scheduler (once an epoch)."""
DDP_WRN_RESUME_STEP = 75
"""The epoch boundary (after epoch 2 of 0-5, its eval and the plateau's step) at which the loop
saves train.py's checkpoint (`model_without_ddp.state_dict()`, optimizer, lr_scheduler, epoch,
args) with `torch.save` to a temporary file and resumes from it as `--resume` does: `torch.load`,
then `load_state_dict` into the same model, optimizer and scheduler objects."""
QAT_OBSERVER_EPOCHS = 4
"""train_quantization.py's `--num-observer-update-epochs`: after the epoch whose index is ≥ 4 ends
(from step 5 × `QAT_EPOCH_STEPS`, 75), `model.apply(disable_observer)`: scales and zero points frozen."""
QAT_BN_EPOCHS = 3
"""train_quantization.py's `--num-batch-norm-update-epochs`: after the epoch whose index is ≥ 3 ends
(from step 60), `model.apply(freeze_bn_stats)`: the fused BNs normalise by their running statistics."""
DEQ_LR = 1e-3
"""The DEQ's Adam lr: the "Deep Implicit Layers" tutorial's (chapter 4, `optim.Adam(model.parameters(),
lr=1e-3)`), as it is. Measured on the healthy loop (unrecorded, seeds 0-2, first/last 10-step loss
means): 2.120 -> 0.373, 2.229 -> 0.380, 2.161 -> 0.339; held-out top-1 88.6 / 88.9 / 88.9 % at the
last eval (step 125); 10-12 s a run on one thread. The forward solver meets its tolerance in ~12-16
iterations; the backward's adjoint solve never does (relative residual ~0.05 at its 23rd mixing
step: every backward runs to `max_iter`)."""
MOCO_LR = 0.03
"""MoCo's SGD lr: main_moco.py's `--lr` 0.03 at batch 256 as it is, at batch `MOCO_BATCH` (the linear
scaling rule would give 0.0075; main_moco.py's README sets 0.03 for 8 GPUs and does not rescale it, the
demo 0.06 at 512). Measured on the healthy loop (unrecorded, seeds 0-2, first/last 10-step loss
means): 4.317 -> 3.106, 4.274 -> 3.287, 4.226 -> 3.029 (0.72 / 0.77 / 0.72×); kNN top-1 85.2 / 81.8 /
84.0 % at step 0 -> 93.8 / 98.8 / 92.0 % at step 125; ~9-10 s a run on one shared thread. lr 0.1 on
seed 0 (K 128): 4.24 -> 3.15, no better; on the digits lr 0.3 and 1.0 collapsed q to one point
(loss back to ln(1 + K), the MLP head's ReLUs dying)."""
MOCO_BATCH = 64
"""MoCo's batch (main_moco.py's `-b` 256, the demo's 512; 64 here, for a 2-core CPU)."""
SWA_GC_LR = 0.1
"""The checkpointed ResNet's SGD lr (the SWA blog's CIFAR ResNets' 0.1; the `swa_utils` docstring's
`CosineAnnealingLR` from it). Measured on the healthy loop (unrecorded, seeds 0-2, first/last 10-step
loss means): 1.166 -> 0.028, 1.195 -> 0.026, 1.277 -> 0.035; held-out `val_top1` 23.3 / 32.7 / 24.8 % at
step 0 -> 100 % at step 145 (the SWA model's, 7 models averaged); ~10-11 s a run unrecorded on one
shared thread, 22 s recorded."""
SWA_GC_BATCH = 64
"""Its batch (the SWA paper's CIFAR runs' 128, half here for a 2-core CPU)."""
SWA_GC_EPOCH_STEPS = 5
"""Steps of one "epoch" of the SWA recipe (where its schedulers step and `update_parameters` runs):
5 batches of 64 of the 1600 training patterns, not a pass over them (as QAT's epoch), 30 a run."""
SWA_GC_EPOCHS = STEPS // SWA_GC_EPOCH_STEPS
"""Epochs a run (30): `CosineAnnealingLR(optimizer, T_max=SWA_GC_EPOCHS)`, the docstring's T_max the run's epochs."""
SWA_GC_START = 21
"""`swa_start`, an epoch index: after each epoch i > 21 (75 % of 30 is 22.5), i.e. at the top of steps
115, 120, ..., 145, `swa_model.update_parameters(model)` and `swa_scheduler.step()` (the docstring's
`if i > swa_start`); `scheduler.step()` after epochs 0-21 (steps 5-110). 7 models averaged by step 145."""
SWA_GC_SWA_LR = 0.05
"""`SWALR`'s `swa_lr` at lr `SWA_GC_LR` (the docstring's and the SWA blog's 0.05); a scenario's lr
factor (lr_too_high, lr_too_low) scales it with the lr, the one lr setting a user got wrong."""
SWA_GC_ANNEAL_EPOCHS = 3
"""`SWALR`'s `anneal_epochs` (cos strategy): from the cosine's lr at swa_start to `swa_lr` over 3 epochs."""
TACOTRON_LR = 1e-2
"""Tacotron 2's Adam lr: 10× hparams.py's `learning_rate` 1e-3, which trains for hundreds of
thousands of iterations where a run here has 150. Measured on the healthy loop (unrecorded, seed 0,
first/last 10-step loss means; chance `_tacotron_chance` 1.27): at 1e-3 (RNNs 128) 2.83 -> 1.31,
val_loss 1.46 -> 1.07 (the frames' marginal, barely below); at 1e-3 (RNNs 64) 2.82 -> 1.45; at 3e-3
2.70 -> 1.03; at 1e-2 2.52 -> 0.83, val_loss 1.44 -> 0.74; batch 32 at 5e-3 2.50 -> 0.84."""
TACOTRON_BATCH = 16
"""Tacotron 2's batch: hparams.py's `batch_size` 64 cut to 16 for a 2-core CPU (each step decodes up
to `TACOTRON_MAX_CHARS` × 3 frames one LSTMCell pair at a time)."""
TACOTRON_MAX_CHARS = 10
LINK_PRED_LR = 1e-3
"""The link predictor's Adam lr: gnn.py's `--lr` 0.001 as it is. Measured on the healthy loop
(unrecorded, seeds 0-2, first/last 10-step loss means; chance 2 ln 2 = 1.386): 1.378 -> 0.486,
1.375 -> 0.490, 1.380 -> 0.495 (0.35-0.36×); val_loss 1.39 at step 0, 1.02-1.10 at its lowest, 1.18
/ 1.17 / 1.35 at step 140 (confident misses cost up to −log 1e-15 each); val_hits (Hits@50) 0.040 /
0.061 / 0.035 at step 0 -> 0.439 / 0.581 / 0.561 at step 140; 3-4 s a run on one shared thread.
At 1e-2 (hidden 64, 10 blocks of 100 nodes) val_loss climbed back above chance by step 150."""
LINK_PRED_BATCH = 256
"""Positive training edges a mini-batch (gnn.py's `--batch_size` 64 × 1024 over ogbl-collab's 1.18M
training edges: ~18 batches an epoch; 256 over this graph's 3 381: 14, the last one 53)."""
LINK_PRED_EPOCH_STEPS = 14
"""Steps an epoch (⌈3 381 / `LINK_PRED_BATCH`⌉): gnn.py's `--eval_steps` 1 runs `test()` once an epoch."""
LINK_PRED_HITS_K = 50
"""The K of the Hits@K recorded as `val_hits`: ogbl-collab's metric, Hits@50 (gnn.py logs 10, 50 and 100)."""
"""The longest synthetic text (characters); texts are 4-10 characters, their mels 4-30 frames."""
DINO_LR = 2e-3
"""DINO's peak lr (main_dino.py's `--lr` 0.0005 "at batch size 256", linearly scaled there: 6.25e-5 at
batch `DINO_BATCH`; ×32 that here, for a 150-step run). Measured on the healthy loop (unrecorded,
seeds 0-2, first/last 10-step loss means; ln 256 = 5.545): 6.064 -> 5.255, 5.940 -> 5.374, 6.131 ->
5.180 (0.87 / 0.90 / 0.85×); the teacher's kNN top-1 61.75 / 69.0 / 65.0 % at step 0 -> 84.25 / 83.75 /
86.5 % at step 125; ~11 s a run on one free thread. At 5e-4 (seed 0) the kNN rose less (62 -> 75)."""
DINO_BATCH = 32
"""DINO's `--batch_size_per_gpu` (64 upstream; 32 images here, each 2 global + `DINO_LOCAL_CROPS` local crops)."""
DINO_EPOCH_STEPS = 10
"""Steps of one DINO "epoch" (where `teacher_temp_schedule` and `freeze_last_layer` read the epoch):
10 batches of 32 of the 1600 training patterns, not a pass over them; 15 a run."""
DINO_EPOCHS = STEPS // DINO_EPOCH_STEPS
"""Epochs a run (15): `cosine_scheduler(..., args.epochs, len(data_loader))`'s epochs."""
DINO_WARMUP_EPOCHS = 1
"""`--warmup_epochs` of the lr (10 of 100 upstream; 1 of 15 here: 10 steps)."""
DINO_MIN_LR = 1e-6
"""`--min_lr`, the cosine's end."""
DINO_WEIGHT_DECAY = (0.04, 0.4)
"""`--weight_decay` → `--weight_decay_end`: the cosine schedule set on the regularised group each step."""
DINO_MOMENTUM_TEACHER = 0.99
"""`--momentum_teacher` (0.996 upstream over 300 epochs of ImageNet): the teacher's EMA momentum, cosine
to 1 over the run (`momentum_schedule`). At 0.996 a 150-step run's teacher moves about 1 − Π m ≈ 26 %
of the way to the student, at 0.99 about 53 % (MoCo's demo-sized 0.99 likewise)."""
DINO_TEACHER_TEMP = (0.04, 0.04)
"""`--warmup_teacher_temp` → `--teacher_temp`: main_dino.py's argparse defaults (0.04 and 0.04, no
warm-up), not the README's ViT-S 0.04 → 0.07 over 30 epochs: with that warm-up over the first 5 of 15
epochs here the teacher's entropy climbed to ~5.3 and the student's to ~5.5 (of ln 256 = 5.545; seeds
0-2 ended 5.50 / 5.52 / 5.48, 0.91 / 0.93 / 0.89× their start: the loss read as a collapsed run's while
the kNN rose 62-69 -> 81-83 %)."""
DINO_WARMUP_TEACHER_TEMP_EPOCHS = 0
"""`--warmup_teacher_temp_epochs` (main_dino.py's default 0; the schedule is `DINOLoss`'s all the same)."""
DINO_GLOBAL_CROPS_SCALE = (0.4, 1.0)
"""`--global_crops_scale` (main_dino.py's default (0.4, 1.))."""
DINO_LOCAL_CROPS_SCALE = (0.05, 0.4)
"""`--local_crops_scale` (main_dino.py's default (0.05, 0.4))."""
DINO_CLIP = 3.0
"""`--clip_grad` 3.0: `utils.clip_gradients`, each parameter's gradient to norm ≤ 3 on its own."""
DINO_FREEZE_LAST_LAYER = 1
"""`--freeze_last_layer` 1: the head's last layer gets no gradient during the first epoch."""
DETR_LR = 1e-3
"""DETR's `--lr` (1e-4 upstream, for a pretrained ResNet-50 over 300 or 500 COCO epochs; ×10 here for
a 150-step run from scratch); the backbone's group at `DETR_LR_BACKBONE_SCALE` × this (`--lr_backbone`
1e-5 upstream, 1e-4 here). Measured on the healthy loop (unrecorded; seeds 0 / 2, first/last 10-step
loss means; chance 11.40 / 11.28): 11.16 -> 7.04, 10.98 -> 6.96 (0.63×); held-out AP50 0.007 / 0.002 at
step 0 -> 0.167 / 0.149 at step 125; val_loss 11.9 / 11.7 -> 6.9 / 7.4. On the same model with its
own seed's held-out images, seed 1: AP50 0.001 -> 0.095 at step 149. Earlier, with 2 encoder and 3
decoder layers (seed 0, step 149): the backbone at the same lr, AP50 0.10 at 5e-4, 0.17 at 1e-3, 0.03
at 5e-3; at 1e-3 with the backbone at a tenth, 0.024."""
DETR_BATCH = 16
"""`--batch_size` (2 a GPU × 8-16 GPUs upstream): 16 images a step."""
DETR_LR_DROP = 100
"""`--lr_drop` 200 of `--epochs` 300 (StepLR's step_size, gamma 0.1 by default), stepped once an epoch
upstream: here at step 100 of 150, the same two thirds of the run."""
DETR_CLIP = 0.1
"""`--clip_max_norm` 0.1: engine.py's `torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)`."""
DETR_HELD_OUT_SEED = 0
"""The held-out split every run is evaluated on: seed 0's `DETR_SHAPES.held_out` images (one
validation set, as COCO's val2017; each run's training images are its own seed's)."""
DEQ_BATCH = 32
"""The DEQ's batch: the tutorial's `DataLoader(..., batch_size=100)` cut to 32 for a 2-core CPU
(each step runs up to 25 cell calls forward and 23 vector-Jacobian products backward)."""
PATCHTST_LR = 1e-3
"""PatchTST's OneCycle peak lr: 10× its ETTh1 script's 1e-4, which trains 100 epochs (~6700 steps)
where a run here has 150. Measured on the healthy loop (unrecorded, seeds 0-2, first/last 10-step
loss means): at 1e-4 1.352 -> 0.805, 1.259 -> 0.700, 1.545 -> 0.874 (held-out MSE 1.25 -> 0.70 at
step 125, still falling); at 1e-3 1.332 -> 0.200, 1.237 -> 0.205, 1.520 -> 0.200 (held-out MSE
1.25 / 1.16 / 1.39 -> 0.143 / 0.145 / 0.145)."""
PATCHTST_BATCH = 32
"""PatchTST's batch: a quarter of its ETTh1 script's 128 windows (× 7 channels: 224 sequences a
step), for a 2-core CPU (at 128 a 150-step run took ~28 s)."""
PATCHTST_WARMUP = 45
"""PatchTST's rising phase: its scripts' `--pct_start 0.3` of `STEPS` (`OneCycleLR`'s last rising
step `float(pct_start · total_steps) − 1` = 44), as the Perceiver's."""
ELECTRA_LR = 1e-3
"""The ELECTRA classifier's peak lr: 3.3× configure_finetuning.py's 3e-4 for ELECTRA-small, which
fine-tunes a pre-trained encoder where this one starts from its seeded init (no checkpoint can be
downloaded): at 3e-4 healthy seed 0 stayed at chance, first/last 10-step means 1.386 -> 1.382 (val
accuracy 0.26); at 1e-3 1.386 -> 0.050, 1.388 -> 0.047, 1.387 -> 0.081 (seeds 0-2, val accuracy 1.0),
and lr_too_high's ×100 (0.1) 9.03 -> 1.386 (chance, val accuracy 0.27, seed 0)."""

ALBERT_LR = 1e-3
"""ALBERT's peak lr: the ALBERT paper's GLUE fine-tuning lrs are 1e-5 to 5e-5 (its appendix A.4, by
task) for a pre-trained albert-base; this one starts from its seeded init (no checkpoint can be
downloaded), so ×20-100, as `ELECTRA_LR` for the same task. Measured on the healthy loop
(unrecorded, seeds 0-2, first/last 10-step loss means): 1.385 -> 0.301, 1.395 -> 0.247, 1.389 ->
0.316, val accuracy 0.23-0.26 at step 0, 1.0 at step 125 (4 applications of the shared layer;
with 6: 1.385 -> 0.127, 1.395 -> 0.148, 1.389 -> 0.296, ~1.4× the time a run)."""

DT_LR = 1e-4
"""The Decision Transformer's lr: the gym experiment's `--learning_rate` 1e-4."""

MUON_GPT_COOLDOWN_FRAC = 0.4
"""The share of the run over which modded-nanogpt's lr cools down (`cooldown_frac`, its Jan 2025
records' 0.4; `stable_decay`)."""
MUON_GPT_MOMENTUM_WARMUP = 32
"""Steps of Muon's momentum warm-up 0.85 -> 0.95 (`muon_gpt_momentum`): modded-nanogpt's 300 of its
1393 iterations, the same share of 150 steps."""
DEEPAR_LR = 1e-3
"""DeepAR's Adam lr: `DeepARLightningModule`'s default 1e-3, as it is."""
DEEPAR_BATCH = 32
"""DeepAR's `batch_size` (GluonTS's default 32 windows)."""
DEEPAR_CLIP = 10.0
"""`gradient_clip_val` 10.0 in the Lightning `Trainer`: GluonTS's `PyTorchLightningEstimator` default
`trainer_kwargs`; Lightning's norm clip over every parameter, after the closure's backward."""
DEEPAR_BATCHES_PER_EPOCH = 10
"""`num_batches_per_epoch` (GluonTS's 50; 10 here: 15 epochs a run, so that the plateau scheduler
(its monitor the epoch's mean train_loss) sees epochs at all in 150 steps)."""
DEEPAR_PLATEAU = {"mode": "min", "factor": 0.5, "patience": 3}
"""`DeepARLightningModule.configure_optimizers`'s `ReduceLROnPlateau(mode="min", factor=0.5,
patience=self.patience)` on `train_loss` once an epoch; patience 3 epochs of 10 batches (GluonTS's
default 10 epochs of 50 batches would never fire in 150 steps)."""
DEEPAR_EVAL_SEED = 37
"""The seed of the sample paths each validation draws (`torch.random.fork_rng`: the same draws every
validation, the training's random state untouched)."""

RECIPES = {
    "gpt": Recipe(lr=3e-3, weight_decay=0.1, batch=8, accumulation=2, betas=(0.9, 0.95)),
    "transformer": Recipe(lr=2e-3, weight_decay=0.01, batch=32),
    "resnet": Recipe(lr=3e-3, weight_decay=5e-4, batch=32, clip=None),
    "gru": Recipe(lr=5e-3, weight_decay=0.0, batch=16, clip=0.25),
    "vit": Recipe(lr=5e-3, weight_decay=0.05, batch=32),
    "lstm_lm": Recipe(lr=1e-2, weight_decay=0.0, batch=16, clip=0.25, betas=(0.9, 0.98)),
    "mixer": Recipe(lr=3e-3, weight_decay=0.05, batch=32),
    "tcn": Recipe(lr=3e-3, weight_decay=1e-4, batch=32, clip=None),
    "llama": Recipe(lr=3e-3, weight_decay=0.1, batch=16, betas=(0.9, 0.95)),
    "autoencoder": Recipe(lr=3e-3, weight_decay=0.0, batch=32, clip=None),
    "recsys": Recipe(lr=3e-3, weight_decay=0.0, batch=64, clip=None),
    "moe": Recipe(lr=3e-3, weight_decay=0.1, batch=16, betas=(0.9, 0.95)),
    "vae": Recipe(lr=5e-3, weight_decay=0.0, batch=32, clip=None),
    "unet": Recipe(lr=3e-3, weight_decay=1e-4, batch=16),
    "seq2seq": Recipe(lr=3e-3, weight_decay=0.01, batch=32, betas=(0.9, 0.98)),
    "gnn": Recipe(lr=1e-2, weight_decay=5e-4, batch=400, clip=None, warmup=0),
    "simclr": Recipe(lr=3e-3, weight_decay=1e-4, batch=32, clip=None),
    "ddpm": Recipe(lr=2e-3, weight_decay=0.01, batch=32, ema=0.995),
    "ctc": Recipe(lr=3e-3, weight_decay=0.0, batch=16, clip=None),
    "mamba": Recipe(lr=3e-3, weight_decay=0.1, batch=16, betas=(0.9, 0.95)),
    "fttransformer": Recipe(lr=1e-3, weight_decay=1e-5, batch=64, clip=None, warmup=0),
    "convnext": Recipe(lr=4e-3, weight_decay=0.05, batch=32, clip=None),
    "bert_mlm": Recipe(lr=5e-3, weight_decay=0.01, batch=32),
    "siren": Recipe(lr=1e-4, weight_decay=0.0, batch=SIGNAL.size ** 2, clip=None, warmup=0),  # the whole image
    "pointnet": Recipe(lr=3e-3, weight_decay=0.0, batch=32, clip=None, warmup=0),
    "t5": Recipe(lr=3e-3, weight_decay=0.01, batch=32),
    "clip": Recipe(lr=2e-3, weight_decay=0.1, batch=32, betas=(0.9, 0.98)),
    "densenet": Recipe(lr=0.1, weight_decay=1e-4, batch=32, clip=None, warmup=0, optimizer="sgd", schedule="step"),
    "reinforce": Recipe(lr=1e-3, weight_decay=0.0, batch=CARTPOLE.envs, clip=0.5, warmup=0, optimizer="adam",
                        schedule="constant"),
    "wgan_gp": Recipe(lr=2e-3, weight_decay=0.0, batch=RING.batch, clip=None, betas=(0.0, 0.9), warmup=0,
                      optimizer="adam", schedule="linear"),
    "swin": Recipe(lr=2e-3, weight_decay=0.05, batch=32, clip=5.0, ema=0.99, bf16=True),
    # The DQN tutorial's AdamW (AMSGrad, default weight decay), batch 128 and clip_grad_value_ 100;
    # lr 2.3e-3, RL Zoo's tuned CartPole DQN value (the tutorial's 1e-4 learns nothing in 150 steps
    # of 4 updates; at 1e-3 one healthy seed of three ended at 0.90x its first reward shortfall).
    "dqn": Recipe(lr=2.3e-3, weight_decay=0.01, batch=128, clip=100.0, warmup=0, schedule="constant", amsgrad=True),
    "distil": Recipe(lr=5e-3, weight_decay=0.01, batch=32, warmup=10),
    "byol": Recipe(lr=3e-3, weight_decay=1e-4, batch=32, clip=None),
    # Chris Chute's real-nvp: Adam at 1e-3, max_grad_norm 100; a constant lr (its warm-up spans
    # 500k samples, beyond this run), no weight decay.
    "realnvp": Recipe(lr=1e-3, weight_decay=0.0, batch=256, clip=100.0, warmup=0, optimizer="adam",
                      schedule="constant"),
    # OpenKE's TransE examples: plain SGD (its default `opt_method`) at a constant lr on the mean
    # margin loss, no clipping, no weight decay.
    "transe": Recipe(lr=1.0, weight_decay=0.0, batch=128, clip=None, warmup=0, optimizer="plain_sgd",
                     schedule="constant"),
    # The torchaudio tutorial's Adam (lr 0.01, weight decay 1e-4) and StepLR (÷10 steps here),
    # batch 32 for a CPU; fp16 autocast with a GradScaler and clip 1.0 after unscale_.
    "kws": Recipe(lr=1e-2, weight_decay=1e-4, batch=32, clip=1.0, warmup=0, optimizer="adam", schedule="step",
                  fp16=True),
    # A nanoGPT-style fine-tune of the LoRA matrices only: AdamW, warm-up + cosine, clip 1.0.
    "lora": Recipe(lr=3e-3, weight_decay=0.01, batch=16, betas=(0.9, 0.95)),
    # zalandoresearch/pytorch-vq-vae: Adam at 1e-3 (amsgrad off), no clipping, no schedule.
    "vqvae": Recipe(lr=1e-3, weight_decay=0.0, batch=32, clip=None, warmup=0, optimizer="adam",
                    schedule="constant"),
    # ElementAI's N-BEATS trainer: Adam at 1e-3, clip_grad_norm_ 1.0, lr halved every third of the run.
    "nbeats": Recipe(lr=1e-3, weight_decay=0.0, batch=256, clip=1.0, warmup=0, optimizer="adam",
                     schedule="halving"),
    # Andras7/word2vec-pytorch: SparseAdam, CosineAnnealingLR, no clipping; lr 0.03 and 512 pairs a
    # batch where it takes 0.001 and 32 over millions of pairs (at 0.001 the loss fell 4.16 -> 3.76
    # in 150 steps, the word similarities' rho stayed at -0.06; at 0.03: 2.12 and 0.84).
    "word2vec": Recipe(lr=0.03, weight_decay=0.0, batch=512, clip=None, warmup=0, optimizer="sparse_adam",
                       schedule="annealing"),
    # pytorch-metric-learning's examples: Adam (their MNIST notebook's 0.01; 3e-3 learned more in
    # 150 steps: held-out recall@1 0.78 / 0.75 against 0.72 / 0.73), no clipping, a constant lr;
    # P × K = 8 classes × 4 images.
    "triplet": Recipe(lr=3e-3, weight_decay=0.0, batch=32, clip=None, warmup=0, optimizer="adam",
                      schedule="constant"),
    # davda54/sam's example: SGD lr 0.1, momentum 0.9, weight decay 5e-4, its StepLR; batch 32 (its 128).
    "sam": Recipe(lr=0.1, weight_decay=5e-4, batch=32, clip=None, warmup=0, optimizer="sam", schedule="step_x0.2"),
    # CleanRL's ppo.py: Adam (eps 1e-5), lr annealed linearly to 0, clip_grad_norm_ 0.5, at PPO_LR;
    # batch: its minibatch (4 envs x 128 steps in 4 minibatches).
    "ppo": Recipe(lr=PPO_LR, weight_decay=0.0, batch=128, clip=0.5, warmup=0, optimizer="cleanrl_adam",
                  schedule="linear"),
    # torchvision's detection references (RetinaNet/FCOS): SGD momentum 0.9, weight decay 1e-4, lr
    # 0.01 for 16 images, linear warm-up from 0.001x then x0.1 at epochs 16 and 22 of 26; no clipping.
    "detector": Recipe(lr=0.01, weight_decay=1e-4, batch=16, clip=None, warmup=15, optimizer="momentum_sgd",
                       schedule="warmup_multistep"),
    # timm's EfficientNet-B0 recipe (rmsproptf, eps 1e-3, weight decay 1e-5, warm-up, x0.97 steps,
    # label smoothing 0.1, drop-path 0.2, model EMA), its lr .048 for 1536 images at batch 32:
    # EFFICIENTNET_LR.
    "efficientnet": Recipe(lr=EFFICIENTNET_LR, weight_decay=1e-5, batch=32, clip=None, warmup=15,
                           optimizer="rmsprop_tf", schedule="warmup_exp"),
    # DeepXDE's Poisson example: model.compile("adam", lr=1e-3), no decay, no clipping, no schedule;
    # POISSON.domain collocation points a batch.
    "pinn": Recipe(lr=PINN_LR, weight_decay=0.0, batch=POISSON.domain, clip=None, warmup=0, optimizer="adam",
                   schedule="constant"),
    # tristandeleu/pytorch-maml: Adam meta-optimizer at 1e-3, no clipping, no schedule; a meta-batch of tasks.
    "maml": Recipe(lr=MAML_LR, weight_decay=0.0, batch=16, clip=None, warmup=0, optimizer="adam",
                   schedule="constant"),
    # pix2pix's train options: Adam lr 2e-4, beta1 0.5, its `linear` policy (constant, then linear
    # decay to 0 over the second half); batch 8 (its 1).
    "pix2pix": Recipe(lr=2e-4, weight_decay=0.0, batch=8, clip=None, betas=(0.5, 0.999), warmup=0, optimizer="adam",
                      schedule="constant_then_linear"),
    # The PyTorch BiLSTM-CRF tutorial: optim.SGD(lr=0.01, weight_decay=1e-4), no clipping, no
    # schedule, one sentence a step; CRF_LR and a batch of 32 sentences here.
    "bilstm_crf": Recipe(lr=CRF_LR, weight_decay=1e-4, batch=32, clip=None, warmup=0, optimizer="plain_sgd",
                         schedule="constant"),
    # PixelCNN code's optim.Adam at its default lr, no clipping, no schedule.
    "pixelcnn": Recipe(lr=1e-3, weight_decay=0.0, batch=32, clip=None, warmup=0, optimizer="adam",
                       schedule="constant"),
    # torchdiffeq's ode_demo.py: optim.RMSprop(lr=1e-3), batch_size 20 windows, no clipping, no schedule.
    "neural_ode": Recipe(lr=1e-3, weight_decay=0.0, batch=20, clip=None, warmup=0, optimizer="rmsprop",
                         schedule="constant"),
    # tiny_nerf.ipynb: tf.keras.optimizers.Adam(5e-4), one image's rays a step, no clipping, no
    # schedule. Its 5e-4 kept: at 2e-3 the density of seeds 0 and 2 died (relu'd to 0 everywhere,
    # seed 0 by step 20: the held-out view rendered black to the end, MSE 0.0485), at 1e-3 the
    # held-out MSE ended 0.022-0.027, at 5e-4 0.031-0.033 (the mean colour's 0.041), seeds 0-2.
    "nerf": Recipe(lr=5e-4, weight_decay=0.0, batch=NERF_SCENE.size ** 2, clip=None, warmup=0, optimizer="adam",
                   schedule="constant"),
    # XifengGuo/CapsNet-Pytorch: Adam(lr=0.001), no clipping; batch 32 (its 100); its ExponentialLR
    # (x0.9 an epoch) left out: a run here is ~3 epochs of the training digits.
    "capsnet": Recipe(lr=1e-3, weight_decay=0.0, batch=32, clip=None, warmup=0, optimizer="adam",
                      schedule="constant"),
    # pranz24/pytorch-soft-actor-critic: Adam(lr=0.0003) for the policy, the critic and log_alpha
    # alike, batch_size 256, no clipping, no schedule.
    "sac": Recipe(lr=SAC_LR, weight_decay=0.0, batch=256, clip=None, warmup=0, optimizer="adam", schedule="constant"),
    # facebookresearch/mae's main_pretrain.py: AdamW betas (0.9, 0.95), weight_decay 0.05 (timm's
    # add_weight_decay: none on biases and norms), no clipping, lr_sched's per-step warm-up from 0
    # over 10 % of the run (its 40 of 400 epochs) then a half cosine to min_lr 0; MAE_LR.
    "mae": Recipe(lr=MAE_LR, weight_decay=0.05, batch=64, clip=None, betas=(0.9, 0.95), warmup=15,
                  schedule="mae_cosine"),
    # BlinkDL/RWKV-LM's v4neo train.py: Adam (FusedAdam, adam_w_mode off, weight_decay 0) betas
    # (0.9, 0.99), eps 1e-8, gradient_clip_val 1.0, its warm-up then exponential lr decay; batch 16
    # (its micro_bsz 12) of CONTEXT tokens (its ctx_len 1024).
    "rwkv": Recipe(lr=RWKV_LR, weight_decay=0.0, batch=16, clip=1.0, betas=(0.9, 0.99), warmup=RWKV_WARMUP,
                   optimizer="adam", schedule="rwkv_exp"),
    # dreamquark-ai/tabnet's TabModel: Adam at optimizer_params lr 2e-2 (torch's betas, no weight
    # decay), clip_value 1 (clip_grad_norm_ of every parameter), its StepLR example (x0.9,
    # TABNET_LR_STEP); batch 256 (its batch_size 1024: the table has 2400 training rows).
    "tabnet": Recipe(lr=2e-2, weight_decay=0.0, batch=256, clip=1.0, warmup=0, optimizer="adam",
                     schedule="step_x0.9"),
    # lucidrains/perceiver-pytorch's train_cifar10.py: AdamW(model.parameters(), lr 1e-3, weight
    # decay 1e-4) on every parameter, OneCycleLR(max_lr=lr) over the run (β1 starts at its
    # max_momentum 0.95), clip_grad_norm_ 1.0, batch 128.
    "perceiver": Recipe(lr=PERCEIVER_LR, weight_decay=1e-4, batch=128, clip=1.0, betas=(ONE_CYCLE_MOMENTUM[1], 0.999),
                        warmup=PERCEIVER_WARMUP, schedule="one_cycle"),
    # vincentherrmann/pytorch-wavenet's WavenetTrainer: optim.Adam at its lr 0.001 (golbin/WaveNet's
    # model default 0.002), weight_decay 0, gradient_clipping None, no schedule; batch 16 windows
    # (its train script's batch_size 16; 64 outputs a window where it takes output_length 16).
    "wavenet": Recipe(lr=1e-3, weight_decay=0.0, batch=16, clip=None, warmup=0, optimizer="adam",
                      schedule="constant"),
    # juho-lee/set_transformer's max_regression_demo: torch.optim.Adam(model.parameters(), lr=1e-4),
    # nn.L1Loss, no clipping, no schedule, batch 256 sets (its 2 ** 10) for 150 steps (its 500).
    "set_transformer": Recipe(lr=1e-4, weight_decay=0.0, batch=256, clip=None, warmup=0, optimizer="adam",
                              schedule="constant"),
    # Gulati et al. (sooftware/conformer's README has no recipe; it trains in openspeech): Adam
    # β 0.9, 0.98, ε 1e-9, the transformer schedule (warm-up, then 1/√step) to a peak 0.05/√d,
    # L2 1e-6 (Adam's weight_decay, matrices only); openspeech's gradient_clip_val 5.0 and
    # batch_size 32.
    "conformer": Recipe(lr=CONFORMER_LR, weight_decay=1e-6, batch=32, clip=5.0, betas=(0.9, 0.98),
                        warmup=CONFORMER_WARMUP, optimizer="transformer_adam", schedule="noam"),
    # Diego999/pyGAT's train.py: optim.Adam(model.parameters(), lr 5e-3, weight_decay 5e-4) (L2 on
    # every parameter), F.nll_loss on the training nodes, full batch (the whole graph a step), no
    # clipping, no schedule; 150 steps (its up to 10000 epochs with patience 100).
    "gat": Recipe(lr=5e-3, weight_decay=5e-4, batch=400, clip=None, warmup=0, optimizer="adam",
                  schedule="constant"),
    # deepmind/neural-processes' conditional_neural_process.ipynb: tf.train.AdamOptimizer(1e-4) on
    # −mean log p, batch 64 functions, no clipping, no schedule, for 2e5 iterations; here 150
    # steps, so lr NP_LR (x10 the notebook's), the one departure.
    "neural_process": Recipe(lr=NP_LR, weight_decay=0.0, batch=64, clip=None, warmup=0, optimizer="adam",
                             schedule="constant"),
    # Blealtan/efficient-kan's examples/mnist.py: optim.AdamW(model.parameters(), lr=1e-3,
    # weight_decay=1e-4) (every parameter decays), ExponentialLR(gamma=0.8) once an epoch,
    # nn.CrossEntropyLoss, batch 64, no clipping, no warm-up; no grid updates, no regularization
    # loss; lr KAN_LR (x3 the example's), the one departure.
    "kan": Recipe(lr=KAN_LR, weight_decay=1e-4, batch=64, clip=None, warmup=0, optimizer="adamw",
                  schedule="exp_x0.8"),
    # g1910free/HyperNetworks' train.py: optim.Adam(net.parameters(), lr 0.002, weight_decay 0.0005)
    # (L2 on every parameter: decay_everything), nn.CrossEntropyLoss, no clipping, its MultiStepLR
    # (x0.5 from step 168000) never reached in 150 steps: constant; batch 128 as its loader's; its
    # transforms.Normalize (the training digits' mean and std here), no random crops or flips.
    "hypernetwork": Recipe(lr=HYPERNETWORK_LR, weight_decay=5e-4, batch=128, clip=None, warmup=0, optimizer="adam",
                           schedule="constant"),
    # facebookresearch/DiT's train.py: torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0)
    # (betas the default (0.9, 0.999)), a constant lr, no warm-up, no clipping, global batch 256;
    # t uniform on the 1000 steps, the MSE on the predicted noise; its EMA (update_ema, decay
    # 0.9999) after each step, in `_train`, not the recipe's `ema` (torch's AveragedModel).
    # lr DIT_LR (x10) and batch DIT_BATCH (/4), the departures (their docstrings).
    "dit": Recipe(lr=DIT_LR, weight_decay=0.0, batch=DIT_BATCH, clip=None, warmup=0, optimizer="adamw",
                  schedule="constant"),
    # openai/sparse_autoencoder's train.py: Adam (eps 6.25e-10, betas (0.9, 0.999)), a constant lr, no
    # warm-up, no clipping, no weight decay; unit_norm_decoder_grad_adjustment_ before each step and
    # unit_norm_decoder_ after it (in `_train`). lr SAE_LR and batch SAE_BATCH, the departures.
    "sae": Recipe(lr=SAE_LR, weight_decay=0.0, batch=SAE_BATCH, clip=None, warmup=0, optimizer="sae_adam",
                  schedule="constant"),
    # SN-GAN (Miyato et al.'s hinge setting; StudioGAN's / christiancosgrove's main.py): Adam, betas
    # (0.0, 0.9), for each network (`NETWORKS`), no weight decay, no clipping, no warm-up, a
    # constant lr (christiancosgrove's ExponentialLR(0.99) an epoch would be ×0.94 over these ~13
    # epochs of the 1500 digits: left out); `SNGAN_N_DIS` D updates per G update (`_train`). lr
    # SNGAN_LR (×5 their 2e-4), the departure (its docstring).
    "sngan": Recipe(lr=SNGAN_LR, weight_decay=0.0, batch=SNGAN_BATCH, clip=None, betas=(0.0, 0.9), warmup=0,
                    optimizer="adam", schedule="constant"),
    # google-research/electra's configure_finetuning.py (and Hugging Face's Trainer on an ELECTRA /
    # DeBERTa / BEiT fine-tune): AdamW (eps 1e-6, betas (0.9, 0.999)), weight decay 0.01 off biases and
    # LayerNorms, layer-wise lr decay 0.8 (`electra_param_groups_lrd`, built in `_train`), linear warm-up
    # over 10 % of the steps then linear decay to 0, clip 1.0, batch 32. lr ELECTRA_LR, the departure.
    "electra_ft": Recipe(lr=ELECTRA_LR, weight_decay=0.01, batch=32, clip=1.0, warmup=15, optimizer="electra_adamw",
                         schedule="linear_warmup"),
    # google-research/albert's run_classifier.py (optimization.create_optimizer(optimizer="adamw"):
    # AdamWeightDecayOptimizer, betas (0.9, 0.999), eps 1e-6, weight decay 0.01 except "LayerNorm",
    # "layer_norm" and "bias"; warm-up then polynomial decay power 1 to 0; clip_by_global_norm 1.0),
    # HF's run_glue.py the same through the Trainer (AdamW, linear schedule with warm-up,
    # max_grad_norm 1.0, no decay on biases and LayerNorm weights): warm-up 10 % (the paper's
    # SST-2 1256 of 20935 steps, ~6 %; MNLI 1000 of 10000), batch 32 (SST-2's; MNLI 128). torch's
    # AdamW is bias-corrected where TF's AdamWeightDecayOptimizer is not (HF's is). Embeddings
    # decay (they are neither LayerNorm nor bias), as `_param_groups` gives matrices decay. The
    # shared layer group is one unit: one group pair, as its parameters are one set. lr ALBERT_LR,
    # the departure.
    "albert": Recipe(lr=ALBERT_LR, weight_decay=0.01, batch=32, clip=1.0, warmup=15, optimizer="electra_adamw",
                     schedule="linear_warmup"),
    # KellerJordan/modded-nanogpt's train_gpt.py: Muon (lr 0.05, Nesterov momentum warmed up 0.85 ->
    # 0.95, 5 Newton-Schulz steps, no weight decay) on the blocks' matrices and Adam (betas (0.8, 0.95),
    # eps 1e-10; embed 0.6, head 0.008, scalars 0.04) on the rest (`muon_gpt_optimizers`, built in
    # `_train`), no warm-up, constant lr then a linear cooldown to 0.1x over the last 40 %, no clipping;
    # lr is Muon's (the Adam groups' follow it, `muon_gpt_optimizers`).
    "muon_gpt": Recipe(lr=MUON_GPT_MUON_LR, weight_decay=0.0, batch=16, clip=None, betas=(0.8, 0.95), warmup=0,
                       optimizer="muon_adam", schedule="stable_decay"),
    # torchvision's references/segmentation/train.py (its DeepLabV3 recipe: --lr 0.02 --aux-loss, wd
    # 1e-4): SGD momentum 0.9 (no Nesterov) over `params_to_optimize` (backbone, classifier, and the
    # aux classifier at lr x10; `deeplab_params_to_optimize`, built in `_train`), weight decay on every
    # parameter, no clipping; `--lr-warmup-epochs` as LinearLR from `--lr-warmup-decay` 0.01 over 15
    # steps, then PolynomialLR (power 0.9) per iteration over the rest. Batch DEEPLAB_BATCH.
    "deeplab": Recipe(lr=DEEPLAB_LR, weight_decay=1e-4, batch=DEEPLAB_BATCH, clip=None, warmup=15,
                      optimizer="momentum_sgd", schedule="warmup_poly"),
    # kzl/decision-transformer's gym experiment.py: AdamW(model.parameters(), lr 1e-4, weight_decay
    # 1e-4) over every parameter (the model's `decay_everything`; one group a unit here, the same
    # updates, so that an lr spike can hit one unit), LambdaLR min((step + 1) / warmup_steps, 1) (its
    # 10 000 warm-up steps of 100 000, the same 10 % of 150), clip_grad_norm_ 0.25, batch 64.
    "decision_transformer": Recipe(lr=DT_LR, weight_decay=1e-4, batch=64, clip=0.25, warmup=15,
                                   schedule="dt_warmup"),
    # yuqinie98/PatchTST's exp_main.py: `optim.Adam(model.parameters(), lr)` (no weight decay), MSE,
    # no clipping, `lradj="TST"`: `OneCycleLR(max_lr=lr, pct_start=0.3)` stepped every batch (its
    # defaults: div 25, final div 1e4, cos, `cycle_momentum` β1 0.95 -> 0.85 -> 0.95); batch PATCHTST_BATCH
    # (its ETTh1 script's 128 / 4). Split one group pair a unit (both at weight decay 0: the same Adam updates)
    # so that an lr spike can hit one encoder layer. lr PATCHTST_LR, the departure.
    "patchtst": Recipe(lr=PATCHTST_LR, weight_decay=0.0, batch=PATCHTST_BATCH, clip=None, betas=(ONE_CYCLE_MOMENTUM[1], 0.999),
                       warmup=PATCHTST_WARMUP, optimizer="adam", schedule="one_cycle"),
    # rwightman/pytorch-image-models' train.py: `--opt sgd` (momentum 0.9, Nesterov: timm's
    # optimizer factory's "sgd" is Nesterov), `--weight-decay 5e-5` through
    # `param_groups_weight_decay` (no decay on 1-d parameters and biases: the zoo's `_param_groups`
    # rule), here one decay / no-decay pair a unit (the same SGD updates) so that an lr spike can hit
    # one block; `--sched cosine` stepped per update (`CosineLRScheduler`, `t_in_epochs=False`) after
    # a linear warm-up from `--warmup-lr` 1e-5, to lr-min 0; no clipping (`--clip-grad` None);
    # `Mixup` (mixup 0.8, cutmix 1.0, switch 0.5, smoothing 0.1) in `_train`, a `ModelEmaV2` there too.
    "timm_mixup": Recipe(lr=TIMM_MIXUP_LR, weight_decay=5e-5, batch=TIMM_MIXUP_BATCH, clip=None,
                         warmup=TIMM_MIXUP_WARMUP, optimizer="sgd", schedule="timm_cosine"),
    # IntelLabs/distiller's compress_classifier.py as its AGP examples run it: `torch.optim.SGD(
    # model.parameters(), lr, momentum=0.9, weight_decay=1e-4)` (no Nesterov; decay on every
    # parameter: the model's `decay_everything`, one group a unit, the same updates), no clipping,
    # no warm-up, the lr ×0.1 at 50 % and 75 % of the run (a MultiStepLR; the zoo's `step`, as the
    # DenseNet's); the pruning events (`field_models.agp_prune`) in `_train`, by `before_step`.
    "gradual_pruning": Recipe(lr=AGP_LR, weight_decay=1e-4, batch=AGP_BATCH, clip=None, warmup=0,
                              optimizer="momentum_sgd", schedule="step"),
    # pytorch/vision's references/classification/train_quantization.py: SGD(model.parameters(),
    # momentum 0.9, weight decay 1e-4: every parameter, `decay_everything`), here one group a unit (the
    # same SGD updates) so that an lr spike can hit one block; `StepLR(step_size=30, gamma=0.1)` per
    # epoch, which never fires in the 10 epochs QAT takes (`QAT_EPOCH_STEPS`): a constant lr, no
    # warm-up; no clipping (`--clip-grad-norm` None); `nn.CrossEntropyLoss()`. lr QAT_LR, the departure.
    "qat": Recipe(lr=QAT_LR, weight_decay=1e-4, batch=QAT_BATCH, clip=None, warmup=0,
                  optimizer="momentum_sgd", schedule="constant"),
    # The "Deep Implicit Layers" tutorial, chapter 4: `optim.Adam(model.parameters(), lr=1e-3)` (no
    # weight decay), `CosineAnnealingLR(opt, max_epochs * len(train_loader), eta_min=1e-6)` stepped
    # after every batch (here to 0 over the run: 1e-6 is 0.1 % of the lr), no warm-up, no clipping,
    # `nn.CrossEntropyLoss()`; one group pair a unit (the same Adam updates) so that an lr spike can
    # hit the stem or the DEQ cell.
    # pytorch/vision's references/classification/train.py under DDP: `--opt sgd_nesterov` (SGD,
    # momentum 0.9, Nesterov), `--wd 5e-4` (the WRN paper's) on every parameter (`--norm-weight-decay`
    # None: `decay_everything`), here one group a unit (the same SGD updates) so that an lr spike
    # can hit one block; no warm-up, no clipping (`--clip-grad-norm` None), `nn.CrossEntropyLoss()`
    # (label smoothing 0); the lr factor is held at 1 and `ReduceLROnPlateau` (`DDP_WRN_PLATEAU`)
    # moves it in `_train`, where the DDP wrap, the sampler and the checkpoint resume live too.
    "ddp_wrn": Recipe(lr=DDP_WRN_LR, weight_decay=5e-4, batch=DDP_WRN_BATCH, clip=None, warmup=0,
                      optimizer="sgd", schedule="constant"),
    "deq": Recipe(lr=DEQ_LR, weight_decay=0.0, batch=DEQ_BATCH, clip=None, warmup=0,
                  optimizer="adam", schedule="annealing"),
    # facebookresearch/moco main_moco.py (MoCo v2: --mlp --moco-t 0.2 --aug-plus --cos):
    # `torch.optim.SGD(model.parameters(), lr, momentum=0.9, weight_decay=1e-4)` (decay on every
    # parameter: `decay_everything`; main_moco.py's model.parameters() also holds encoder_k's, which
    # have requires_grad False and never a gradient, so SGD skips them: here they are in no group),
    # `adjust_learning_rate`'s cosine to 0 (per epoch there, per step here), no warm-up, no clipping,
    # `nn.CrossEntropyLoss()` against label 0 (`moco_loss`); one group a unit (the same SGD updates)
    # so that an lr spike can hit one block of the query encoder.
    "moco": Recipe(lr=MOCO_LR, weight_decay=1e-4, batch=MOCO_BATCH, clip=None, warmup=0,
                   optimizer="momentum_sgd", schedule="annealing"),
    # torch.optim.swa_utils' docstring recipe: `SGD(model.parameters(), lr, momentum=0.9,
    # weight_decay=5e-4)` (decay on every parameter: `decay_everything`; the SWA blog's CIFAR runs'
    # 5e-4), one group a unit (the same SGD updates) so that an lr spike can hit one block; no
    # warm-up, no clipping, `nn.CrossEntropyLoss()`; the lr factor held at 1 and the real
    # `CosineAnnealingLR` / `SWALR` pair moving each group's lr once an epoch in `_swa_gc_hooks`.
    "swa_gc": Recipe(lr=SWA_GC_LR, weight_decay=5e-4, batch=SWA_GC_BATCH, clip=None, warmup=0,
                     optimizer="momentum_sgd", schedule="constant"),
    # facebookresearch/dino main_dino.py: `torch.optim.AdamW(utils.get_params_groups(student))` (betas
    # the default), one group pair a unit (the same AdamW updates; get_params_groups' partition: no
    # decay on biases and 1-D parameters) so that an lr spike can hit one block; the lr by
    # `cosine_scheduler(lr, min_lr, epochs, niter, warmup_epochs)` per step (`dino_cosine`); the weight
    # decay by `cosine_scheduler(0.04, 0.4, ...)` on the regularised groups, set per step in
    # `_dino_hooks`; `clip_gradients` (per parameter, 3.0) and `cancel_gradients_last_layer` in a step
    # pre-hook (the loop's global-norm clip off); the teacher's EMA after each step; `DINOLoss`.
    "dino": Recipe(lr=DINO_LR, weight_decay=DINO_WEIGHT_DECAY[0], batch=DINO_BATCH, clip=None,
                   warmup=DINO_WARMUP_EPOCHS * DINO_EPOCH_STEPS, schedule="dino_cosine"),
    # NVIDIA/tacotron2 train.py / hparams.py: `torch.optim.Adam(model.parameters(), lr=1e-3,
    # weight_decay=1e-6)` with hparams' eps 1e-6 (L2 in the gradient, on every parameter:
    # `decay_everything`), betas (0.9, 0.999) (torch's default; hparams has no betas), no warm-up,
    # no lr schedule (train.py keeps `learning_rate` constant), `clip_grad_norm_(model.parameters(),
    # grad_clip_thresh=1.0)`, `Tacotron2Loss` (`tacotron2_loss`); one group a unit (the same Adam
    # updates) so that an lr spike can hit one block.
    "tacotron": Recipe(lr=TACOTRON_LR, weight_decay=1e-6, batch=TACOTRON_BATCH, clip=1.0, warmup=0,
                       optimizer="tacotron_adam", schedule="constant"),
    # facebookresearch/detr main.py: `param_dicts` (the parameters whose name holds "backbone" at
    # `args.lr_backbone`, the rest at `args.lr`: the model's `lr_scale`), `torch.optim.AdamW(param_dicts,
    # lr=args.lr, weight_decay=args.weight_decay)` (1e-4 on every parameter: `decay_everything`; betas
    # the default), `StepLR(optimizer, args.lr_drop)` (`detr_step`), no warm-up; engine.py's
    # `train_one_epoch`: `clip_grad_norm_(model.parameters(), 0.1)` before `optimizer.step()` (the
    # loop's global clip); the loss `sum(loss_dict[k] * weight_dict[k])` of `SetCriterion`
    # (`detr_loss`); one group pair a unit (the same AdamW updates) so that an lr spike can hit one layer.
    "detr": Recipe(lr=DETR_LR, weight_decay=1e-4, batch=DETR_BATCH, clip=DETR_CLIP, warmup=0,
                   optimizer="adamw", schedule="detr_step"),
    # snap-stanford/ogb examples/linkproppred/collab/gnn.py: `torch.optim.Adam(list(model.parameters())
    # + list(predictor.parameters()), lr=args.lr)` (no weight decay, betas (0.9, 0.999)), no lr
    # schedule, no warm-up; `train()` clips the encoder's and the predictor's gradients each to 1.0
    # (two `clip_grad_norm_` calls: `link_pred_clip_`, run by a step pre-hook in `_train`, so the
    # loop's one global clip is off); its hand-written loss (`link_pred_loss`); one group a unit (the
    # same Adam updates) so that an lr spike can hit one layer.
    "link_pred": Recipe(lr=LINK_PRED_LR, weight_decay=0.0, batch=LINK_PRED_BATCH, clip=None, warmup=0,
                        optimizer="adam", schedule="constant"),
    # GluonTS's DeepARLightningModule.configure_optimizers: `torch.optim.Adam(self.model.parameters(),
    # lr=1e-3, weight_decay=1e-8)` (L2 in the gradient, every parameter), `ReduceLROnPlateau` on the
    # epoch's train_loss (`DEEPAR_PLATEAU`, in `_train`: no warm-up, no other schedule); the
    # estimator's Trainer `gradient_clip_val` 10.0; batch 32. One group a unit (the same Adam updates)
    # so that an lr spike can hit one module.
    "deepar": Recipe(lr=DEEPAR_LR, weight_decay=1e-8, batch=DEEPAR_BATCH, clip=DEEPAR_CLIP, warmup=0,
                     optimizer="adam", schedule="constant"),
}
OPTIMIZERS = {
    "sgd": lambda groups, lr, recipe: torch.optim.SGD(groups, lr=lr, momentum=0.9, nesterov=True),
    "plain_sgd": lambda groups, lr, recipe: torch.optim.SGD(groups, lr=lr),
    "adam": lambda groups, lr, recipe: torch.optim.Adam(groups, lr=lr, betas=recipe.betas),
    "adamw": lambda groups, lr, recipe: torch.optim.AdamW(groups, lr=lr, betas=recipe.betas, amsgrad=recipe.amsgrad),
    "sparse_adam": lambda groups, lr, recipe: torch.optim.SparseAdam(groups, lr=lr, betas=recipe.betas),
    "sam": lambda groups, lr, recipe: SAM(groups, torch.optim.SGD, rho=SAM_RHO, lr=lr, momentum=0.9),
    "cleanrl_adam": lambda groups, lr, recipe: torch.optim.Adam(groups, lr=lr, eps=1e-5),
    # openai/sparse_autoencoder's train.py: torch.optim.Adam(..., lr=lr, eps=6.25e-10) (betas the default).
    "sae_adam": lambda groups, lr, recipe: torch.optim.Adam(groups, lr=lr, betas=recipe.betas, eps=6.25e-10),
    # ELECTRA's / Hugging Face's fine-tuning AdamW: eps 1e-6 (torch's AdamW: bias-corrected, as HF's).
    "electra_adamw": lambda groups, lr, recipe: torch.optim.AdamW(groups, lr=lr, betas=recipe.betas, eps=1e-6),
    "momentum_sgd": lambda groups, lr, recipe: torch.optim.SGD(groups, lr=lr, momentum=0.9),
    # TF's RMSprop as timm's rmsproptf sets it (alpha 0.9, eps 1e-3, momentum 0.9) on torch's RMSprop:
    # eps outside the square root and square_avg starting at 0, where RMSpropTF starts it at 1.
    "rmsprop_tf": lambda groups, lr, recipe: torch.optim.RMSprop(groups, lr=lr, alpha=0.9, eps=1e-3, momentum=0.9),
    "rmsprop": lambda groups, lr, recipe: torch.optim.RMSprop(groups, lr=lr),
    "transformer_adam": lambda groups, lr, recipe: torch.optim.Adam(groups, lr=lr, betas=recipe.betas, eps=1e-9),
    # NVIDIA/tacotron2's Adam: hparams.py's eps 1e-6 (its weight decay each group's, as L2).
    "tacotron_adam": lambda groups, lr, recipe: torch.optim.Adam(groups, lr=lr, betas=recipe.betas, eps=1e-6),
}
"""Each `Recipe.optimizer`'s constructor over `_param_groups`."""
NETWORKS = {"wgan_gp": ("generator", "critic"), "pix2pix": ("netG", "netD"), "sac": ("policy", "critic", "log_alpha"),
            "sngan": ("generator", "discriminator")}
"""The networks of an adversarial family (and SAC's policy, critic and temperature), each with its
own Adam, in the order its loop takes them."""
N_CRITIC = 5
"""WGAN-GP's critic steps per generator step (the paper's)."""
GRADIENT_PENALTY = 10.0
"""WGAN-GP's penalty weight λ (the paper's)."""
DQN_GRADIENT_STEPS = 4
"""The DQN agent's updates per step (one batch of episodes): Stable-Baselines3's `gradient_steps`."""
DQN_TARGET_EVERY = 10
"""Steps between the DQN target network's hard updates (Stable-Baselines3's `target_update_interval`, in steps)."""
BYOL_TAU = 0.99
"""BYOL's target EMA decay (the paper's base 0.996, lower for a 150-step run)."""
TEACHER_STEPS = 300
"""Adam steps of the distillation teacher's own training (batches of 64 digits), before it is frozen."""
SAM_RHO = 0.05
"""SAM's neighbourhood size rho (Foret et al.'s, davda54/sam's for SAM without `--adaptive`)."""
TRIPLET_PER_CLASS = 4
"""K, the images of each class in a triplet batch of P × K (Hermans et al.'s K = 4)."""
BASE_STEPS = 300
"""AdamW steps of the LoRA base model's pretraining on the default corpus (`lora_base`)."""
LANGUAGE_MODELS = ("gpt", "gru", "lstm_lm", "llama", "moe", "mamba", "lora", "rwkv", "muon_gpt")
IMAGE_MODELS = ("resnet", "vit", "mixer", "autoencoder", "vae", "simclr", "ddpm", "densenet", "swin", "distil",
                "byol", "perceiver", "hypernetwork", "dit")
"""Architectures that take (B, 1, 8, 8) digits."""
LOSSES = {"autoencoder": torch.nn.functional.mse_loss,
          "recsys": torch.nn.functional.binary_cross_entropy_with_logits,
          "moe": moe_lm_loss, "vae": vae_loss, "unet": torch.nn.functional.cross_entropy,
          "seq2seq": seq2seq_loss, "gnn": torch.nn.functional.cross_entropy, "simclr": info_nce_loss,
          "ddpm": ddpm_loss, "ctc": ctc_loss, "convnext": smoothed_cross_entropy,
          "siren": torch.nn.functional.mse_loss, "pointnet": pointnet_loss, "clip": clip_loss,
          "swin": soft_target_cross_entropy, "distil": distillation_loss, "byol": byol_loss, "realnvp": flow_nll,
          "transe": transe_margin_loss, "kws": keyword_nll_loss, "vqvae": vqvae_loss, "nbeats": smape_2_loss,
          "word2vec": sgns_loss, "triplet": batch_hard_triplet_loss, "sam": smooth_crossentropy, "detector": fcos_loss,
          "efficientnet": smoothed_cross_entropy, "pinn": pinn_loss, "maml": torch.nn.functional.mse_loss,
          "bilstm_crf": crf_nll, "pixelcnn": torch.nn.functional.cross_entropy, "neural_ode": torch.nn.functional.l1_loss,
          "nerf": torch.nn.functional.mse_loss, "capsnet": caps_loss, "mae": mae_loss, "rwkv": rwkv_loss,
          "tabnet": tabnet_loss, "gat": torch.nn.functional.nll_loss, "set_transformer": torch.nn.functional.l1_loss,
          "conformer": conformer_ctc_loss, "neural_process": cnp_nll, "dit": dit_loss,
          "sae": sae_loss, "electra_ft": torch.nn.functional.cross_entropy,
          "deeplab": deeplab_criterion, "decision_transformer": dt_action_loss,
          "patchtst": torch.nn.functional.mse_loss, "timm_mixup": soft_target_cross_entropy, "albert": torch.nn.functional.cross_entropy,
          "qat": torch.nn.functional.cross_entropy, "deq": torch.nn.functional.cross_entropy,
          "ddp_wrn": torch.nn.functional.cross_entropy,
          "moco": moco_loss, "swa_gc": torch.nn.functional.cross_entropy, "tacotron": tacotron2_loss,
          "link_pred": link_pred_loss, "detr": detr_loss(DETR_SHAPES.classes),
          "deepar": deepar_loss}
"""Each architecture's loss (`train_field`'s `loss_fn`); cross-entropy over class indices otherwise."""


TIED = {"mamba": ("embedding",), "bert_mlm": ("mlm.bert.embeddings",), "t5": ("shared",),
        "dit": ("model.t_embedder", "model.y_embedder"), "sae": ("pre_bias",),
        "patchtst": ("revin",)}
"""Units whose weight is also the head's (no gradient lost when a later block is detached), beyond GPT's
`wte`; or that reach the head around the blocks (the DiT's timestep and label embedders: c feeds its
final layer's adaLN directly; PatchTST's RevIN affine: its denorm acts on the head's forecast)."""


@dataclass(frozen=True)
class OutcomeMetric:
    """The metric a family's truth reads instead of its loss, where the loss is not a quantity
    that falls as it learns (a policy gradient's surrogate, a WGAN's critic and generator losses):
    the scalar its loop passes to `rec.step()` each step, whether higher is better, and the best
    value it can take. The truth judges the distance to that best (`distance`: lower is better,
    0 at best) wherever it would judge the loss, against the fault-free twin's distances."""

    name: str
    higher_is_better: bool
    best: float | Callable[[], float]
    """The best value, or a function that measures it on first use (a density's entropy)."""

    def distance(self, value: float) -> float:
        best = self.best() if callable(self.best) else self.best
        return best - value if self.higher_is_better else value - best


OUTCOME_METRICS = {
    "reinforce": OutcomeMetric("reward", higher_is_better=True, best=float(CARTPOLE.max_steps)),
    "wgan_gp": OutcomeMetric("sliced_wasserstein", higher_is_better=False, best=0.0),
    "dqn": OutcomeMetric("reward", higher_is_better=True, best=float(CARTPOLE.max_steps)),
    # The flow's loss itself, less its floor: an NLL per dimension goes below 0, where the twin
    # rule's ratios would turn over; NLL − the data's entropy is the KL to the data (≥ 0, 0 at best).
    "realnvp": OutcomeMetric("loss", higher_is_better=False, best=lambda: density_points()[2]),
    # A collapsed embedding (every image at one point) has a batch-hard loss of exactly the margin,
    # below a random net's (0.29-0.5), and the healthy runs end near it (0.21) while their recall
    # climbs (0.6 -> 0.78): the loss does not say whether the embedding learned.
    "triplet": OutcomeMetric("val_recall_at_1", higher_is_better=True, best=1.0),
    # PPO's loss is a surrogate whose scale follows the advantages: CleanRL's episodic return instead.
    "ppo": OutcomeMetric("reward", higher_is_better=True, best=float(CARTPOLE.max_steps)),
    # A PINN's loss is its residual at the points it was given: DeepXDE's held-out error to the exact solution.
    "pinn": OutcomeMetric("val_l2_relative_error", higher_is_better=False, best=0.0),
    # MAML's worth is how well it adapts to tasks it never met: the post-adaptation loss on held-out tasks.
    "maml": OutcomeMetric("val_loss", higher_is_better=False, best=0.0),
    # pix2pix's losses are adversarial: the generator's held-out L1 error to the target images.
    "pix2pix": OutcomeMetric("val_l1_error", higher_is_better=False, best=0.0),
    # A NeRF's training loss is one random view's rays at depths drawn anew each step (views cover
    # 22-30 % of their pixels with the scene): the notebook's yardstick is the held-out view it renders.
    "nerf": OutcomeMetric("val_loss", higher_is_better=False, best=0.0),
    # SAC's losses are TD errors and a policy objective against a moving critic: pranz24's
    # `reward/train`, the episodes' return (every reward ≤ 0: 0 is the bound no policy reaches).
    "sac": OutcomeMetric("reward", higher_is_better=True, best=0.0),
    # The CNP's Gaussian NLL goes below 0 once σ < 1/√(2π) and its means fit, where the twin rule's
    # ratios would turn over; its training batches differ in their context counts (3-9), so their
    # losses wander by ±0.3 step to step. Its held-out NLL (two fixed batches, every step) less a
    # floor no such model can beat in expectation: an oracle GP told each function's l and σ_f,
    # its σ held ≥ the decoder's 0.1 (`data.gp_curves_floor`, −0.80; the bare bound ln 0.1 + ½ ln 2π
    # = −1.38 would hold too but leaves a healthy run 0.78x where it began, 0.73x here).
    "neural_process": OutcomeMetric("val_loss", higher_is_better=False,
                                    best=lambda: gp_curves_floor(CNP_SIGMA_FLOOR)),
    # An SN-GAN's hinge losses are a game's, not a quantity that falls as it learns: the sliced
    # Wasserstein distance of its samples (fixed z) to the held-out digits, as WGAN-GP's.
    "sngan": OutcomeMetric("sliced_wasserstein", higher_is_better=False, best=0.0),
    # DINO's loss is H(teacher) + KL(teacher ‖ student): it moves with the teacher's sharpness as much
    # as with what the student learned (healthy seeds 0-2: 6.06 -> 5.26 / 5.94 -> 5.37 / 6.13 -> 5.18,
    # 0.85-0.90×, ending near ln 256 = 5.55, the loss of a collapsed, uniform student, while the
    # teacher's kNN top-1 rose 62-69 -> 84-87 %): eval_knn.py's kNN top-1 of the teacher instead, as
    # main_dino.py's users read it.
    "dino": OutcomeMetric("val_knn_top1", higher_is_better=True, best=100.0),
    # DeepAR's loss is a Student's t NLL of the scaled targets, which goes below 0 once its t is sharp
    # and right (healthy runs end negative), where the twin rule's ratios would turn over: the held-out
    # weighted quantile loss of its sample paths instead (≥ 0, 0 a perfect forecast), every step.
    "deepar": OutcomeMetric("val_wql", higher_is_better=False, best=0.0),
}
"""Families judged on a metric (see `OutcomeMetric`; `loss`: the training loss's distance to its
floor); every other family on its training loss."""


def _judged(arch: str, outcome) -> list[float]:
    """The series an architecture's truth reads: its losses, or its outcome metric's distance to
    the best, NaN at every step whose loss was not finite (the update that broke the run)."""
    metric = OUTCOME_METRICS.get(arch)
    if metric is None:
        return list(outcome.losses)
    values = outcome.losses if metric.name == "loss" else outcome.metrics[metric.name]
    return [metric.distance(value) if math.isfinite(loss) else math.nan
            for value, loss in zip(values, outcome.losses)]


def _schedule(recipe: Recipe, steps: int) -> Callable[[int], float]:
    """nanoGPT's `get_lr` (`nanogpt.lr_at`) as a factor on each group's base lr: linear warm-up,
    then cosine decay to 10 %; or DenseNet's steps (÷10 at 50 % and at 75 % of the steps); or WGAN-GP's
    linear decay to 0 at the last step; or ElementAI's halving every third of the steps; or
    `CosineAnnealingLR` to 0; or davda54/sam's ×0.2 steps; or torchvision's detection warm-up and
    steps; or timm's warm-up and ×0.97 steps; or mae's warm-up from 0 and half cosine to 0; or a
    constant lr."""
    if recipe.schedule == "constant":
        return lambda step: 1.0
    if recipe.schedule == "dino_cosine":  # main_dino.py's lr_schedule = cosine_scheduler(lr, min_lr, ...) / lr
        factors = dino_cosine_scheduler(1.0, DINO_MIN_LR / DINO_LR, steps // DINO_EPOCH_STEPS, DINO_EPOCH_STEPS,
                                        warmup_epochs=recipe.warmup // DINO_EPOCH_STEPS)
        return lambda step: float(factors[step])
    if recipe.schedule == "linear":
        return lambda step: 1 - step / steps
    if recipe.schedule == "halving":
        return lambda step: 0.5 ** (step // max(1, steps // 3))
    if recipe.schedule == "annealing":
        return lambda step: 0.5 * (1 + math.cos(math.pi * step / steps))
    if recipe.schedule == "step_x0.2":
        return lambda step: 0.2 ** ((step >= 0.3 * steps) + (step >= 0.6 * steps) + (step >= 0.8 * steps))
    if recipe.schedule == "warmup_multistep":
        return lambda step: (0.001 + 0.999 * step / recipe.warmup if step < recipe.warmup else 1.0) * \
            0.1 ** ((step >= 16 * steps / 26) + (step >= 22 * steps / 26))
    if recipe.schedule == "warmup_exp":
        return lambda step: (step + 1) / (recipe.warmup + 1) if step < recipe.warmup else \
            0.97 ** (step // EXP_DECAY_STEPS)
    if recipe.schedule == "linear_warmup":  # transformers' get_linear_schedule_with_warmup (0 at step 0)
        return lambda step: step / recipe.warmup if step < recipe.warmup else \
            max(0.0, (steps - step) / (steps - recipe.warmup))
    if recipe.schedule == "dt_warmup":  # experiment.py's LambdaLR(lambda steps: min((steps + 1) / warmup_steps, 1))
        return lambda step: min((step + 1) / max(recipe.warmup, 1), 1.0)
    if recipe.schedule == "stable_decay":  # modded-nanogpt's get_lr: 1, then linear to 0.1 over the cooldown
        def stable_decay(step: int) -> float:
            x = step / steps
            if x < 1 - MUON_GPT_COOLDOWN_FRAC:
                return 1.0
            w = (1 - x) / MUON_GPT_COOLDOWN_FRAC
            return w * 1.0 + (1 - w) * 0.1
        return stable_decay
    if recipe.schedule == "warmup_poly":  # train.py's SequentialLR([LinearLR(0.01), PolynomialLR(power=0.9)])
        return lambda step: 0.01 + 0.99 * step / recipe.warmup if step < recipe.warmup else \
            (1 - (step - recipe.warmup) / (steps - recipe.warmup)) ** 0.9
    if recipe.schedule == "constant_then_linear":
        return lambda step: min(1.0, 2 * (1 - step / steps))
    if recipe.schedule == "mae_cosine":  # mae's lr_sched.adjust_learning_rate, per step, min_lr 0
        return lambda step: step / recipe.warmup if step < recipe.warmup else \
            0.5 * (1 + math.cos(math.pi * (step - recipe.warmup) / (steps - recipe.warmup)))
    if recipe.schedule == "rwkv_exp":  # RWKV-v4neo's on_train_batch_start, lr_final / lr_init as a factor
        def rwkv(step: int) -> float:
            progress = min(1.0, max(0.0, (step - recipe.warmup + 1) / (steps - recipe.warmup)))
            factor = math.exp(math.log(RWKV_LR_FINAL_RATIO) * progress)
            return factor * (0.2 + 0.8 * step / recipe.warmup) if step < recipe.warmup else factor
        return rwkv
    if recipe.schedule == "step_x0.9":  # torch's StepLR(step_size=TABNET_LR_STEP, gamma=0.9)
        return lambda step: 0.9 ** (step // TABNET_LR_STEP)
    if recipe.schedule == "exp_x0.8":  # torch's ExponentialLR(gamma=0.8), stepped once an epoch
        return lambda step: 0.8 ** (step // KAN_EPOCH_STEPS)
    if recipe.schedule == "timm_cosine":  # timm's CosineLRScheduler per update: warm-up from warmup_lr, cosine to 0
        return lambda step: TIMM_WARMUP_LR_RATIO + (1 - TIMM_WARMUP_LR_RATIO) * step / recipe.warmup \
            if step < recipe.warmup else 0.5 * (1 + math.cos(math.pi * step / steps))
    if recipe.schedule == "one_cycle":  # torch's OneCycleLR (cos), as a factor on max_lr
        return lambda step: _one_cycle(step, recipe.warmup, steps, 1 / ONE_CYCLE_DIV, 1.0,
                                       1 / (ONE_CYCLE_DIV * ONE_CYCLE_FINAL_DIV))
    if recipe.schedule == "noam":  # the transformer's lrate ∝ min(s^−0.5, s · w^−1.5), s = step + 1, peak 1
        warmup = max(recipe.warmup, 1)
        return lambda step: min((step + 1) / warmup, math.sqrt(warmup / (step + 1)))
    if recipe.schedule == "step":
        return lambda step: 0.1 ** ((step >= steps // 2) + (step >= 3 * steps // 4))
    if recipe.schedule == "detr_step":  # detr main.py's StepLR(optimizer, args.lr_drop): ×0.1 once, at lr_drop
        return lambda step: 0.1 ** (step >= DETR_LR_DROP)
    config = LoopConfig(steps=steps, warmup=recipe.warmup, lr=1.0)
    return lambda step: lr_at(step, config)


def _one_cycle(step: int, warmup: int, steps: int, start: float, peak: float, end: float) -> float:
    """torch's `OneCycleLR` (two phases, `anneal_strategy='cos'`) at `step`: from `start` to
    `peak` by a half cosine until step `warmup` − 1 (its `pct_start · total_steps − 1`), then to
    `end` at step `steps` − 1; with `warmup` 0 (no warm-up) the fall starts at `peak` at step 0."""
    def annealed(a: float, b: float, pct: float) -> float:
        return b + (a - b) / 2 * (math.cos(math.pi * pct) + 1)
    rise_end = warmup - 1
    if warmup > 0 and step <= rise_end:
        return annealed(start, peak, step / rise_end) if rise_end > 0 else peak
    fall_start = max(rise_end, 0)
    return annealed(peak, end, min(1.0, (step - fall_start) / (steps - 1 - fall_start)))


def _one_cycle_momentum(optimizer: torch.optim.Optimizer, warmup: int, steps: int) -> Callable[[], None]:
    """`OneCycleLR`'s `cycle_momentum` for Adam(W): after each optimizer step, β1 of every group
    is set for the next step, from `ONE_CYCLE_MOMENTUM`'s max down to its base at the lr's peak
    and back (the lr's phases, reversed); the first step's β1 is the recipe's (the max)."""
    base, top = ONE_CYCLE_MOMENTUM
    taken = 0

    def after_step() -> None:
        nonlocal taken
        taken += 1
        beta1 = _one_cycle(min(taken, steps - 1), warmup, steps, top, base, top)
        for group in optimizer.param_groups:
            group["betas"] = (beta1, *group["betas"][1:])
    return after_step


def _param_groups(model: nn.Module, recipe: Recipe, lr: float) -> list[dict]:
    """nanoGPT's `configure_optimizers` per unit: matrices decay, biases/norms/embeddings of rank < 2
    do not, nor the parameters a model names in `no_decay` (a path component: FT-Transformer's
    tokenizers, Mamba's A_log and D); every group is tagged with its unit so that one block's lr
    can be changed. Tied parameters are given once, to the first unit that holds them; parameters
    a model names in `loose` (CLIP's logit scale) get a group of their own, without decay; frozen
    parameters (`requires_grad=False`: LoRA's base) are in no group, as PEFT's optimizers hold
    only the trainable ones. A model's `lr_scale` (RWKV's `my_lr_scale`: a path component → an lr
    multiplier) splits a unit's groups by multiplier, each group's lr that multiple of `lr`. A model
    with `decay_everything` (the Perceiver: its script's `AdamW(model.parameters(), ...)`) decays
    every parameter, one group a unit."""
    exempt = {id(p) for n, p in model.named_parameters() if set(n.split(".")) & set(getattr(model, "no_decay", ()))}
    everything = getattr(model, "decay_everything", False)
    scales = getattr(model, "lr_scale", {})
    scale_of = {id(p): next((scales[part] for part in n.split(".") if part in scales), 1.0)
                for n, p in model.named_parameters()}
    groups, seen = [], set()
    for unit in model.units:
        params = [p for p in model.get_submodule(unit).parameters() if id(p) not in seen]
        if unit == "embed" and isinstance(getattr(model, "pos", None), nn.Parameter):
            params.append(model.pos)  # the classifier's learned positions belong to its embedding
        seen.update(id(p) for p in params)
        for decay in (True, False):
            chosen = [p for p in params
                      if p.requires_grad and (everything or (p.dim() >= 2 and id(p) not in exempt)) == decay]
            for scale in sorted({scale_of[id(p)] for p in chosen}):
                group = {"params": [p for p in chosen if scale_of[id(p)] == scale], "lr": lr * scale,
                         "weight_decay": recipe.weight_decay if decay else 0.0, "layer": unit}
                groups.append({**group, "my_lr_scale": scale} if scales else group)
    for name in getattr(model, "loose", ()):
        param = model.get_parameter(name)
        seen.add(id(param))
        groups.append({"params": [param], "lr": lr, "weight_decay": 0.0, "layer": name})
    missing = [n for n, p in model.named_parameters() if id(p) not in seen]
    if missing:
        raise ValueError(f"parameters outside every unit: {missing}")
    return groups


@dataclass(frozen=True)
class FieldFamily:
    """One scenario family on the field architectures: what to inject and what the truth is.

    `outcome` decides the verdict from the losses: `diverged` (kept only when training broke at t0,
    `training.broke_against` its fault-free twin), `stalled` (not learning from t0,
    `training.stalled_against`), `from_start` (a wrong setting from step 0: diverged if it ran away,
    not learning if flat or far behind its twin), `healthy`. A fault that breaks nothing is healthy.
    """

    fault: Callable[..., faults.Fault]
    outcome: str
    labels: tuple[str, ...] = ()
    culprit: str | None = None
    """`unit` (the param group's block), `exposed` (the layer hit), `detached` or None."""
    cause: str | None = None
    """The direct cause the recorder can see (a raised lr, rescaled weights): tolerated, with the
    mechanism labels, on a run that shrugged the fault off (a warning there, not a false alarm)."""
    lr_factor: float = 1.0
    recipe: dict = field(default_factory=dict)
    archs: tuple[str, ...] = FIELD_ARCHS
    notes: str = ""


def _draws(model: nn.Module, rng: random.Random) -> dict[str, str]:
    hidden_units = getattr(model, "hidden", None) or [
        u for u in model.units if u.startswith(("encoder.layers.", "blocks.", "rnn"))]
    return {"unit": rng.choice(hidden_units), "exposed": rng.choice(model.exposed), "detached": hidden_units[-1]}


FLOAT_INPUTS = ("transformer", "resnet", "vit", "mixer", "tcn", "autoencoder", "recsys", "vae", "unet", "gnn",
                "simclr", "ddpm", "ctc", "fttransformer", "convnext", "siren", "pointnet", "clip", "densenet",
                "reinforce", "wgan_gp", "swin", "dqn", "distil", "byol", "realnvp", "kws", "vqvae", "nbeats", "triplet",
                "sam", "ppo", "detector", "efficientnet", "pinn", "maml", "pix2pix", "pixelcnn", "neural_ode", "nerf",
                "capsnet", "sac", "mae", "tabnet", "perceiver", "wavenet", "set_transformer", "conformer",
                "gat", "neural_process", "kan", "hypernetwork", "dit", "sae", "sngan", "deeplab",
                "decision_transformer", "patchtst", "timm_mixup", "gradual_pruning",
                "qat", "deq", "ddp_wrn", "moco", "swa_gc", "link_pred", "dino", "detr", "deepar")
"""Architectures whose batch has float features (the bad-batch faults); the LMs (and BERT, and the
ELECTRA classifier and ALBERT: their dict batches are int64 `input_ids`, `attention_mask` (and ALBERT's `token_type_ids`)) read token IDs, TransE entity and relation IDs. The agent's batch is the observations its update reads (a
corrupted rollout buffer), the DQN agent's the observations it samples from its replay buffer (a
corrupted buffer), the WGAN's the real points its critic reads, the student's the images its
teacher reads too, the flow's its points, the keyword spotter's its waveforms, the VQ-VAE's its
images, N-BEATS's its input windows (its targets, the windows' futures, left as they are), the
triplet net's and the Wide ResNet's their images, the PPO agent's the observations of its
minibatch (a corrupted rollout buffer), the detector's and the EfficientNet's their images, the
PINN's its collocation and boundary points, MAML's its tasks' support points and values and query
points, pix2pix's its edge maps, the PixelCNN's its images (its targets, the pixels' grey levels,
left as they are), the neural ODE's its windows' initial states, the NeRF's its rays (origins and
directions), the capsule network's its images (also its reconstruction's target), the SAC agent's
the states it samples from its replay buffer (a corrupted buffer; their next states left as they
are), the MAE's its images (also its target patches), the TabNet's its numeric columns (as the
FT-Transformer's), the Perceiver's its pixels (not the Fourier features its forward adds to them),
the WaveNet's its one-hot mu-law windows (float, as pytorch-wavenet's and golbin/WaveNet's loaders
hand them to the model; its targets, the next samples' levels, left as they are), the Set
Transformer's its sets of integers (floats, as the demo's `torch.from_numpy(x).float()`; their
maxima, the targets, left as they are), the Conformer's
its frames (`input_features`; the attention mask is integer and left as it is), the Conditional
Neural Process's its context points (x and y) and target x's (their target y's left as they are), the
KAN's its flattened pixels, the hypernetwork CNN's its pixels, the SAE's its activation vectors
(also its reconstruction's target), the SN-GAN's the real digits its discriminator reads (every
real micro-batch of the step), DeepLab's its normalised colour images (their label maps, void 255
included, left as they are), the Decision Transformer's the float keys of its dict batch: its
normalised `states`, its `actions` (the −10 padding included) and its scaled `returns_to_go` (a
corrupted record of the offline dataset; its int64 `timesteps` and `attention_mask` left as they
are, and its target actions, the batch's `y`, too), PatchTST's its standardised look-back windows
(their futures, the targets, left as they are: RevIN normalises each window by its own statistics, so a ×1e3 window is
normalised away on the way in, and its forecast is denormalised by them ×1e3 on the way out), the
timm ResNet's its standardised colour patterns (the fault corrupts the loader's batch, before the
loop's `Mixup` blends it with its flip: a ×1e3 or NaN image reaches its partner's row too), the
pruned VGG's its standardised digits;
QAT MobileNetV2's its standardised colour patterns (fake-quantized by its `QuantStub` on the way
in: a ×1e3 batch widens the input observer's moving range while observers run, and is clamped to
the frozen range once they are disabled), the DEQ's its digits in [0, 1] (through the stem conv
and a train-mode BatchNorm into the injection x that every one of the solver's cell calls adds), the DDP Wide
ResNet's its standardised colour patterns (the batch its `DistributedSampler` loader gave, into
the first conv, then the first block's pre-activation BatchNorm),
MoCo's its two augmented views of each standardised colour pattern (the fault corrupts the
loader's (2B, 3, 16, 16) batch: both the queries and the keys, which the key encoder embeds and the
queue keeps for K / B = 2 steps), the checkpointed ResNet's its standardised colour patterns (into
the stem, outside every checkpointed stage; `update_bn` reads the clean training loader), the
link predictor's the node features its encoder reads (the batch dict's float `x`, as the GCN's and
the GAT's: the whole graph's features ride in every batch, so the fault corrupts the features of that
step's encoding of every node, as a corrupted feature-store read would; the positive and negative
edge indices and the training graph's `edge_index` are integers and left as they are), DINO's
its six crops of each standardised texture (the fault corrupts every crop of the loader's dict: the
student sees all six, the teacher the two global ones, whose outputs also move the loss's center),
DeepAR's float fields of its `InstanceSplitter` dict: `past_target` and `future_target` (the scaler
divides a ×1e3 window by its own ×1e3 mean, so the scaled lags are the clean ones again and only the
log-scale static feature moves, by ln 1e3), the observed-value masks (loss weights: a ×1e3 mask
changes no weighted average), the time features and the dummy `feat_static_real` (0, left 0);
the integer `feat_static_cat` left as it is;
word2vec and the BiLSTM-CRF read
word IDs, Tacotron 2 character IDs (its batch's float mels are the decoder's teacher-forced frames
and, the same tensor, its targets: the bad-batch faults corrupt a loader's features, and here would
corrupt the decoder's inputs but not its targets, which upstream are one `mel_padded`)."""


UNTARGETED = ("simclr", "ddpm", "clip", "reinforce", "wgan_gp", "dqn", "byol", "realnvp", "transe", "word2vec",
              "ppo", "sac", "mae", "sae", "sngan", "moco", "dino", "deepar")
"""Architectures trained without targets (self-supervised, generative, contrastive; an agent's
actions are its own samples; a flow's density, TransE's triples and their corruptions, word2vec's
word pairs and their sampled negatives; the MAE's targets are its own images' masked patches,
mae's loop drops the labels; the SAE reconstructs its own activations; the SN-GAN is unconditional;
MoCo's labels are the positive key's index 0, the loader's own labels dropped as main_moco.py's `_`;
DINO's targets are its teacher's outputs, main_dino.py's loop drops the labels, `(images, _)`;
DeepAR's targets are its own series' future values, `future_target`, which the same batch feeds
(lagged) to its LSTM as teacher-forced inputs, as Tacotron 2's mels: flipping a target alone would be
no loader's corruption): no labels to corrupt."""


LEFT_OUT = {
    # Hugging Face's Trainer calls optimizer.step() and model.zero_grad() itself on every step: a loop
    # that forgets either cannot be written through it without patching the Trainer.
    "t5": ("missing_zero_grad", "missing_step"),
    # SGD keeps no Adam moments to corrupt.
    "densenet": ("adam_state",),
    # Lightning refuses accumulate_grad_batches under manual optimisation, and WGAN-GP code does not
    # accumulate by hand (its critic steps are the point). Under bf16 autocast the run does not
    # settle in its 150 steps: seed 2's sample distance ends 1.06x where it began (fp32: 0.51x), so
    # no truth could call that variant healthy.
    "wgan_gp": ("healthy_accum", "healthy_bf16"),
    # Its recipe trains under bf16 autocast already: healthy_bf16 would be the healthy run again.
    "swin": ("healthy_bf16",),
    # The DQN tutorial's AdamW uses AMSGrad: its step divides by max_exp_avg_sq, which zeroing
    # exp_avg_sq leaves as it was (the running maximum), so the fault changes no update at all.
    "dqn": ("adam_state",),
    # OpenKE's plain SGD keeps no Adam moments to corrupt; no op of its forward (embedding lookups,
    # an L1 norm) runs in bf16 under CPU autocast, so healthy_bf16 would be the healthy run again
    # (its 150 losses equal the healthy run's, seed 0).
    "transe": ("adam_state", "healthy_bf16"),
    # The two embedding tables are the whole model, each read by the loss directly: no layer's
    # output feeds another layer, so there is no stage of a network to cut off (detaching one
    # table's lookups is not the detached-graph bug, it is training the other table alone).
    "word2vec": ("detach",),
    # A triplet batch's labels only group its images: MislabeledBatch moves every label of a batch
    # by the same shift, which keeps the groups, so the two batches mine the same triplets and the
    # run is the healthy one again. Batch-hard mining reads the whole batch: a quarter batch (2
    # classes x 4) mines among 2 classes, another training, not the same one in less memory
    # (pytorch-metric-learning's answer is a cross-batch memory); it learns less (held-out recall
    # 0.64 -> 0.69-0.74 against 0.77-0.80) and fails the healthy check (recall distance 0.83x its start).
    "triplet": ("healthy_spike", "healthy_accum"),
    # SGD keeps no Adam moments. SAM's update is two calls that each also zero the gradients (with
    # zero_grad=True): a loop that drops second_step keeps each step's ascent e(w) in the weights
    # (they climb by rho a step, not stop), one that drops both drops every zero_grad too; neither
    # is the loop without optimizer.step() the family means.
    "sam": ("adam_state", "missing_step"),
    # torchvision's SGD keeps no Adam moments. MislabeledBatch moves every entry of an integer
    # target tensor; a detector's targets are rows of (class, box): moving the box coordinates by
    # a class shift is not a batch with wrong labels, it is boxes in the wrong place.
    "detector": ("adam_state", "healthy_spike"),
    # RMSprop keeps square_avg, not Adam's exp_avg_sq: AdamStateZeroed would change nothing.
    "efficientnet": ("adam_state",),
    # pix2pix's loop accumulates nothing (its batch_size is 1 by default; one G and one D step an
    # iteration): a loop that accumulates G's and D's gradients by hand is not the repository's.
    "pix2pix": ("healthy_accum",),
    # The tutorial's SGD keeps no Adam moments to corrupt.
    "bilstm_crf": ("adam_state",),
    # torchdiffeq's demo steps RMSprop, whose square_avg is not Adam's exp_avg_sq.
    "neural_ode": ("adam_state",),
    # MislabeledBatch flips float targets to 1 − y: for the CNP a shift of every target y by one
    # against contexts left as they were, which undoes what 150 steps learn (each function's scale
    # and a mean near 0): held-out NLL less its floor 1.30 -> 1.77 at t0 90 (seed 1), above where the
    # run began, still 1.54 by the end against its twin's 1.26; seeds 0-2 end 0.82-0.89x where they
    # began, which the healthy check (< 0.8x) refuses. Not the spike that recovers the family means.
    "neural_process": ("healthy_spike",),
    # train.py's SGD keeps no Adam moments to corrupt.
    "deeplab": ("adam_state",),
    # timm's SGD (Nesterov momentum) keeps no Adam moments to corrupt.
    "timm_mixup": ("adam_state",),
    # Distiller's SGD (momentum 0.9) keeps no Adam moments to corrupt.
    "gradual_pruning": ("adam_state",),
    # train_quantization.py's SGD keeps no Adam moments to corrupt; it has no autocast, and eager-mode
    # fake quantization takes float32 only (under CPU bf16 autocast the first fake-quant after a conv
    # raises "expected scalar type Float but found BFloat16").
    "qat": ("adam_state", "healthy_bf16"),
    # The tutorial has no autocast, and its Anderson solver sizes its buffers by its start's dtype:
    # under CPU bf16 autocast the forward solve runs (float32 buffers), but the gradient reaching z*
    # is bfloat16, and the backward hook's adjoint solve raises in the bordered system's
    # `torch.linalg.solve` ("lu_cpu" not implemented for 'BFloat16'), on the first backward.
    "deq": ("healthy_bf16",),
    # train.py's SGD (Nesterov momentum) keeps no Adam moments to corrupt. train.py wraps the model
    # with DistributedDataParallel's default find_unused_parameters=False: once a detach leaves the
    # blocks before it without gradient, the reducer never finishes its reduction and the next
    # training forward raises ("Expected to have finished reduction in the prior iteration before
    # starting a new one ... Parameter indices which did not receive grad for rank 0: 0 1 ... 20"),
    # even on one rank: a loud crash at t0 + 1, not a silent fault.
    "ddp_wrn": ("adam_state", "detach"),
    # main_moco.py's SGD (momentum 0.9) keeps no Adam moments to corrupt.
    "moco": ("adam_state",),
    # The SWA docstring's SGD (momentum 0.9) keeps no Adam moments to corrupt.
    "swa_gc": ("adam_state",),
    # MislabeledBatch moves a target tensor; Tacotron 2's targets are parse_batch's (mel_padded,
    # gate_padded) pair, and the same mel_padded is the decoder's teacher-forced input in x. A batch
    # of wrong pairs (texts with other utterances' audio) changes x's mels with y's; flipping the
    # targets alone (1 - y) would teacher-force the decoder on frames it is not asked to predict, a
    # corruption no loader makes, and the fault cannot reach x.
    "tacotron": ("healthy_spike",),
    # MislabeledBatch moves a target tensor; DETR's targets are each image's labels and boxes (the
    # batch's padded dict of both, `_detr_data`): a class shift of the labels alone would need a fault
    # that reads the dict, and moving the boxes by it is not a wrong label, it is a box elsewhere.
    "detr": ("healthy_spike",),
}
"""Fault families an architecture's loop cannot express honestly."""


def _no_fault(**_) -> faults.Fault:
    return faults.Fault()


FIELD_FAMILIES: dict[str, FieldFamily] = {
    "healthy": FieldFamily(_no_fault, "healthy", notes="the architecture's usual recipe"),
    "healthy_accum": FieldFamily(_no_fault, "healthy", recipe={"accumulation": 4},
                                 notes="gradient accumulation over 4 micro-batches of a quarter batch"),
    "healthy_bf16": FieldFamily(_no_fault, "healthy", recipe={"bf16": True}, notes="bf16 autocast"),
    "healthy_spike": FieldFamily(
        lambda t0, classes, **_: faults.MislabeledBatch(t0=t0, length=2, classes=classes), "healthy",
        archs=tuple(a for a in FIELD_ARCHS if a not in UNTARGETED),
        notes="two batches with wrong targets from step {t0}: a loss spike that recovers"),
    "lr_spike": FieldFamily(
        lambda t0, unit, factor, **_: faults.LrSpike(t0=t0, layer=unit, factor=factor), "diverged",
        ("diverged", "lr_too_high"), culprit="unit", cause="hyperparameter_changed",
        notes="lr of the param groups of {culprit} multiplied by {factor:g} at step {t0}"),
    "weight_scale": FieldFamily(
        lambda t0, exposed, factor, **_: faults.WeightScale(t0=t0, layer=exposed, factor=factor), "diverged",
        ("diverged",), culprit="exposed", cause="weights_changed_outside_optimizer",
        notes="weights of {culprit} multiplied by {factor:g} outside the optimizer at step {t0}"),
    "batch_scale": FieldFamily(
        lambda t0, **_: faults.BatchScale(t0=t0, factor=1e3), "diverged", ("diverged",), cause="batch_out_of_range",
        archs=FLOAT_INPUTS, notes="batch at step {t0} multiplied by 1e3"),
    "batch_nan": FieldFamily(
        lambda t0, **_: faults.BatchNaN(t0=t0), "diverged", ("diverged", "nonfinite_input"),
        archs=FLOAT_INPUTS, notes="batch at step {t0} carries NaN"),
    "adam_state": FieldFamily(
        lambda t0, **_: faults.AdamStateZeroed(t0=t0, layer=""), "diverged", ("diverged",),
        cause="optimizer_state_changed", notes="Adam(W) exp_avg_sq of every tensor zeroed at step {t0}, exp_avg kept (a partial state restore)"),
    "missing_zero_grad": FieldFamily(
        lambda t0, **_: faults.MissingZeroGrad(t0=t0), "diverged_or_stalled", ("stale_gradients",),
        notes="optimizer.zero_grad() no longer called from step {t0}"),
    "missing_step": FieldFamily(
        lambda t0, **_: faults.MissingStep(t0=0), "from_start", ("no_update",),
        notes="the loop never calls optimizer.step()"),
    "detach": FieldFamily(
        lambda t0, detached, **_: faults.DetachedLayer(t0=t0, layer=detached), "stalled", ("no_gradient",),
        culprit="detached",
        notes="output of {culprit} detached from step {t0}: it and every unit before it get no gradient"),
    "lr_too_high": FieldFamily(_no_fault, "from_start", ("lr_too_high",), lr_factor=100.0, recipe={"warmup": 0},
                               notes="lr ×100 the recipe's, no warm-up"),
    "lr_too_low": FieldFamily(_no_fault, "from_start", ("lr_too_low",), lr_factor=1e-4,
                              notes="lr ×1e-4 the recipe's"),
}


def field_families() -> list[tuple[str, str]]:
    """(family, arch) pairs of the catalogue."""
    return [(family, arch) for family, spec in FIELD_FAMILIES.items() for arch in FIELD_ARCHS
            if arch in spec.archs and family not in LEFT_OUT.get(arch, ())]


def _data(arch: str, recipe: Recipe, seed: int, accumulation: int):
    """(draw, eval_draw, classes, chance) for an architecture: characters for the LMs, clicks for
    the click model, shapes and masks for the U-Net, sorting for the seq2seq model, the block
    model's graph for the GCN, audio-like frames and their symbols for the CTC model, a table's
    rows for the FT-Transformer and the TabNet, colour patterns for the ConvNeXt, masked word sequences for
    BERT, an image's pixels (coordinates → values) for the SIREN, point clouds for the PointNet, digits
    otherwise (the autoencoder's and the VAE's targets are their inputs, SimCLR's two views of
    each and the DDPM's digits scaled to [−1, 1] have none).
    `chance` is the loss of a model that learned nothing but the targets' marginal: ln(classes) for classifiers
    and LMs, the entropy of the click rate, the pixel variance for a reconstruction, the summed
    BCE of the mean image for the VAE (its KL term is 0 there), the entropy of the mask's pixel
    classes for the U-Net, ln(2B − 1) for InfoNCE over 2B views, 1 for the DDPM (ε's variance),
    the CTC loss of the best input-independent frame distribution for the CTC model, the entropy
    of the masked words for BERT; for the families judged on a metric (`OUTCOME_METRICS`) its
    distance to the best where nothing was learned: a uniformly random policy's reward shortfall
    for the agent (its `draw` makes the environments), a generator that emits the data's mean for
    the WGAN-GP (its `draw` is the loader of real points, `eval_draw` the held-out points), the
    DQN agent as the REINFORCE agent; for the distilled student the distillation loss of a student
    that predicts the uniform distribution against its teacher's logits on the training digits;
    for the SN-GAN the digits in [−1, 1] with no labels its loop reads (`eval_draw` the held-out
    digits themselves) and the sample distance of a generator that emits the training digits' mean image;
    the round-12 to round-22 families' in `ARCH_DATA`."""
    micro = max(1, recipe.batch * recipe.accumulation // accumulation)
    if arch in ARCH_DATA:
        return ARCH_DATA[arch](micro, seed)
    if arch in LANGUAGE_MODELS:
        tokens, vocab = char_corpus(CORPUS_CHARS, seed)
        split = int(0.9 * len(tokens))
        return (lm_batch_sampler(tokens[:split], micro, CONTEXT, seed),
                lm_batch_sampler(tokens[split:], 32, CONTEXT, seed + 1), vocab, math.log(vocab))
    if arch == "recsys":
        x, y = click_data()
        split = int(0.8 * len(y))
        train = Dataset({k: v[:split] for k, v in x.items()}, y[:split])
        held = Dataset({k: v[split:] for k, v in x.items()}, y[split:])
        rate = float(train.y.mean())
        chance = -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))
        return batch_sampler(train, micro, seed), batch_sampler(held, 256, seed + 1), 2, chance
    if arch == "unet":
        shapes = shapes_data()
        train, held = Dataset(shapes.x[:1000], shapes.y[:1000]), Dataset(shapes.x[1000:], shapes.y[1000:])
        share = torch.bincount(train.y.flatten()).double() / train.y.numel()
        return batch_sampler(train, micro, seed), batch_sampler(held, 100, seed + 1), 3, \
            float(-(share * share.log()).sum())
    if arch == "seq2seq":
        return (sort_batch_sampler(micro, seed), sort_batch_sampler(64, seed + 1), SORT.vocab,
                math.log(SORT.vocab))
    if arch in ("gnn", "gat"):  # full batch: every draw is the whole graph; off-mask labels are ignored (-100)
        graph, labels, train_mask, val_mask = sbm_graph()
        train_y, val_y = labels.masked_fill(~train_mask, -100), labels.masked_fill(~val_mask, -100)
        return (lambda: (graph, train_y)), (lambda: (graph, val_y)), int(labels.max()) + 1, \
            math.log(int(labels.max()) + 1)
    if arch == "ctc":
        return ctc_batch_sampler(micro, seed), ctc_batch_sampler(64, seed + 1), SPEECH.classes, _ctc_chance()
    if arch in ("fttransformer", "tabnet"):
        x, y = table_data()
        split = int(0.8 * len(y))
        train = Dataset({k: v[:split] for k, v in x.items()}, y[:split])
        held = Dataset({k: v[split:] for k, v in x.items()}, y[split:])
        return batch_sampler(train, micro, seed), batch_sampler(held, 256, seed + 1), TABLE.classes, \
            math.log(TABLE.classes)
    if arch == "convnext":
        images = pattern_images()
        train, held = Dataset(images.x[:1600], images.y[:1600]), Dataset(images.x[1600:], images.y[1600:])
        return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), PATTERNS.classes, \
            math.log(PATTERNS.classes)
    if arch == "bert_mlm":
        return masked_lm_sampler(micro, seed), masked_lm_sampler(64, seed + 1), MLM.vocab, _mlm_chance()
    if arch == "siren":
        grid, between = signal_pixels()
        return batch_sampler(grid, micro, seed), batch_sampler(between, 1024, seed + 1), 1, \
            float(grid.y.var(unbiased=False))
    if arch == "pointnet":
        clouds = point_clouds()
        train, held = Dataset(clouds.x[:1200], clouds.y[:1200]), Dataset(clouds.x[1200:], clouds.y[1200:])
        return batch_sampler(train, micro, seed), batch_sampler(held, 150, seed + 1), CLOUDS.classes, \
            math.log(CLOUDS.classes)
    if arch == "t5":  # Hugging Face dataset rows, collated by the Trainer's data collator
        return t5_rows(2048, seed), t5_rows(128, seed + 1), T5_SORT.vocab, math.log(T5_SORT.vocab)
    if arch == "clip":  # DataLoaders of dict batches for Lightning; InfoNCE over each micro-batch's pairs
        images, captions, _ = captioned_digits()
        pairs = [{"pixel_values": image, "input_ids": caption} for image, caption in zip(images, captions)]
        loader = torch.utils.data.DataLoader
        return (loader(pairs[:1536], batch_size=micro, shuffle=True, drop_last=True,
                       generator=torch.Generator().manual_seed(seed)),
                loader(pairs[1536:], batch_size=64), CAPTIONS.vocab, math.log(micro))
    if arch == "reinforce":  # episodes, not a dataset: a CartPole batch per seed; no eval draw (the loop's own)
        return CartPole, None, CARTPOLE.actions, _random_policy_shortfall()
    if arch == "dqn":  # episodes into a replay buffer: a CartPole batch per seed
        return CartPole, None, CARTPOLE.actions, _random_policy_shortfall()
    if arch == "wgan_gp":  # one loader batch per generator step: its N_CRITIC critic batches
        per_step = N_CRITIC * recipe.batch
        loader = torch.utils.data.DataLoader(ring_points(STEPS, per_step, seed), batch_size=per_step)
        held_out = ring_points(1, RING.held_out, 1000 + seed)
        return loader, held_out, 2, _point_mass_distance(seed)
    rows = digits("rows")
    x = rows.x.unsqueeze(1) if arch in IMAGE_MODELS else rows.x
    if arch in ("perceiver", "hypernetwork"):  # their scripts' transforms.Normalize, by the training digits' mean and std
        x = (x - x[:1500].mean()) / x[:1500].std()
    if arch == "kan":  # efficient-kan's mnist.py: transforms.Normalize((0.5,), (0.5,)), [0, 1] -> [-1, 1]
        x = (x - 0.5) / 0.5
    if arch == "byol":  # BYOL's loss of a prediction uncorrelated with its target: 2 − 2·0
        return two_views_sampler(x[:1500], micro, seed), two_views_sampler(x[1500:], 128, seed + 1), 10, 2.0
    if arch == "simclr":
        return (two_views_sampler(x[:1500], micro, seed), two_views_sampler(x[1500:], 128, seed + 1), 10,
                math.log(2 * micro - 1))
    # DiT's Normalize(mean 0.5, std 0.5): [0, 1] -> [-1, 1]; the digits are its latents (no VAE, no
    # 0.18215 scaling), with their labels; no RandomHorizontalFlip (a flipped digit is not a digit).
    if arch == "dit":
        x = 2 * x - 1
        train, held = Dataset(x[:1500], rows.y[:1500]), Dataset(x[1500:], rows.y[1500:])
        return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), 10, 1.0
    if arch == "sae":  # toy-model activations (no digits): SAE code reconstructs its input, no labels
        train, held = sae_toy_activations(8192, seed), sae_toy_activations(1024, 1000 + seed)
        mean = train.mean(0)  # chance: b_pre at the data's mean, every latent 0 (the normalised MSE, L1 0)
        chance = float((((train - mean) ** 2).mean(dim=1) / (train ** 2).mean(dim=1)).mean())
        return (batch_sampler(Dataset(train, train), micro, seed), batch_sampler(Dataset(held, held), 128, seed + 1),
                10, chance)
    if arch == "sngan":  # StudioGAN's / christiancosgrove's Normalize((0.5,), (0.5,)): [0, 1] -> [-1, 1], no labels
        x = 2 * x.unsqueeze(1) - 1
        held = x[1500:]
        return batch_sampler(Dataset(x[:1500], rows.y[:1500]), micro, seed), held, 10, \
            _mean_image_distance(x[:1500], held, seed)
    if arch == "electra_ft":  # the marker-order task's token rows, padded per batch; balanced labels
        (train, train_y), (held, held_y) = electra_rows(8192, seed), _electra_held_out()
        share = torch.bincount(train_y).double() / len(train_y)
        return (electra_sampler(train, train_y, micro, seed), electra_sampler(held, held_y, 256, seed + 1), 4,
                float(-(share * share.log()).sum()))
    if arch == "albert":  # the marker task's rows as run_glue's dict batches; the electra_ft rows and held-out set
        (train, train_y), (held, held_y) = electra_rows(8192, seed), _electra_held_out()
        share = torch.bincount(train_y).double() / len(train_y)
        return (albert_sampler(train, train_y, micro, seed), albert_sampler(held, held_y, 256, seed + 1), 4,
                float(-(share * share.log()).sum()))
    if arch == "deeplab":  # VOC-like shapes: train.py's train preset on the training images, the held-out ones whole
        train, held = voc_shapes(VOC_SHAPES.train, seed), _deeplab_held_out()
        labelled = train.y[train.y != VOC_SHAPES.void]
        share = torch.bincount(labelled, minlength=DEEPLAB_CLASSES).double() / labelled.numel()
        # chance: every pixel at the class marginal, for out and aux alike (out + 0.5 · aux)
        return (voc_train_sampler(train, micro, seed), batch_sampler(held, 100, seed + 1), DEEPLAB_CLASSES,
                1.5 * float(-(share * share.log()).sum()))
    if arch == "decision_transformer":  # experiment.py's get_batch over the offline dataset (one for every seed)
        train, held, (mean, std) = _dt_dataset()
        actions = np.concatenate([t["actions"] for t in train], 0)
        # chance: every action predicted as the dataset's mean action (the loss's MSE over steps and dims)
        return (decision_transformer_sampler(train, micro, seed, mean, std),
                decision_transformer_sampler(held, 256, seed + 1, mean, std), POINT_REACH.act_dim,
                float(((actions - actions.mean(0)) ** 2).mean()))
    if arch == "patchtst":  # ETTh1-like windows: a shuffled training loader, the held-out part for val
        train, held = ett_like_windows(), ett_like_windows(held_out=True)
        # chance: the MSE of the training targets' per-channel mean (their variance: ~1, standardised)
        return (batch_sampler(train, micro, seed), batch_sampler(held, 256, seed + 1), ETT_LIKE.horizon,
                float(((train.y - train.y.mean((0, 1))) ** 2).mean()))
    if arch == "ddpm":  # DDPM's data scaling
        x = 2 * x - 1
        return images_sampler(x[:1500], micro, seed), images_sampler(x[1500:], 128, seed + 1), 10, 1.0
    if arch == "vae":
        x = (x > 0.5).float()  # binarised digits, as VAEs are trained on binarised MNIST
    if arch in ("autoencoder", "vae"):
        train, held = Dataset(x[:1500], x[:1500].clone()), Dataset(x[1500:], x[1500:].clone())
        mean = train.y.mean(0).expand_as(train.y)
        chance = float(((train.y - mean) ** 2).mean()) if arch == "autoencoder" else \
            float(torch.nn.functional.binary_cross_entropy(mean, train.y, reduction="sum")) / len(train.y)
        return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), 10, chance
    train, held = Dataset(x[:1500], rows.y[:1500]), Dataset(x[1500:], rows.y[1500:])
    chance = _uniform_student_loss(seed) if arch == "distil" else math.log(10)
    return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), 10, chance


def _density_data(micro: int, seed: int):
    """The flow's points (no targets); chance: the NLL per dimension of independent Gaussians
    fitted to each dimension (the standardised data's N(0, 1), 0.5·ln(2πe)), less the entropy."""
    train, held_out, _ = density_points()
    chance = OUTCOME_METRICS["realnvp"].distance(0.5 * math.log(2 * math.pi * math.e))
    return images_sampler(train, micro, seed), images_sampler(held_out, 256, seed + 1), DENSITY.dims, chance


def _triples_data(micro: int, seed: int):
    """TransE's training triples with a corrupted twin each; chance: the margin γ, the loss when
    every entity sits at one point (d⁺ = d⁻)."""
    train, held_out = knowledge_graph()
    return (corrupted_triples_sampler(train, micro, seed), corrupted_triples_sampler(held_out, len(held_out), seed + 1),
            KNOWLEDGE_GRAPH.relations, TRANSE_MARGIN)


def _keyword_data(micro: int, seed: int):
    """The keyword clips and their labels; chance: ln(classes)."""
    train, held_out = keyword_clips()
    return (batch_sampler(train, micro, seed), batch_sampler(held_out, 200, seed + 1), KEYWORDS.classes,
            math.log(KEYWORDS.classes))


def _kitchen_data(micro: int, seed: int):
    """The shifted corpus the LoRA model is fine-tuned on (its base's alphabet); chance: ln(vocab)."""
    tokens, vocab = char_corpus(CORPUS_CHARS, seed, KITCHEN_WORDS)
    split = int(0.9 * len(tokens))
    return (lm_batch_sampler(tokens[:split], micro, CONTEXT, seed),
            lm_batch_sampler(tokens[split:], 32, CONTEXT, seed + 1), vocab, math.log(vocab))


def _pattern_reconstruction_data(micro: int, seed: int):
    """The colour patterns as their own targets; chance: the VQ-VAE's loss with the mean image as
    its reconstruction and a codebook on its inputs (no VQ loss): the pixel variance around it."""
    images = pattern_images().x
    train, held = Dataset(images[:1600], images[:1600].clone()), Dataset(images[1600:], images[1600:].clone())
    chance = float(((train.y - train.y.mean(0)) ** 2).mean())
    return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), 3, chance


def _forecast_data(micro: int, seed: int):
    """Windows of the seasonal series; chance: the sMAPE of the naive forecast (the last observed
    value for the whole horizon, where N-BEATS's forecast starts) on the held-out windows."""
    x, y = forecast_windows_sampler(SERIES.series, seed + 1, held_out=True)()
    chance = float(smape_2_loss(x[:, -1:].expand_as(y), y))
    return (forecast_windows_sampler(micro, seed), forecast_windows_sampler(256, seed + 1, held_out=True),
            SERIES.horizon, chance)


def _skipgram_data(micro: int, seed: int):
    """Skip-gram pairs of the topic corpus with their negatives (no targets); chance: the loss of
    scores that ignore both words, σ(s) = 1 / (1 + K) (the share of true pairs among the scored):
    ln(1 + K) + K ln(1 + 1 / K)."""
    k = TOPICS.negatives
    return (skipgram_sampler(micro, seed), skipgram_sampler(1024, seed + 1, held_out=True), TOPICS.vocab,
            math.log(1 + k) + k * math.log(1 + 1 / k))


def _metric_learning_data(micro: int, seed: int):
    """P × K batches of the noisy digits (the last 297 held out); chance: the recall@1 distance of
    an embedding that puts every image at one point (its neighbour any other image: 1 − 1/10)."""
    images = noisy_digits()
    train, held = Dataset(images.x[:1500], images.y[:1500]), Dataset(images.x[1500:], images.y[1500:])
    return (class_balanced_sampler(train, micro, TRIPLET_PER_CLASS, seed),
            class_balanced_sampler(held, 32, TRIPLET_PER_CLASS, seed + 1), 10, OUTCOME_METRICS["triplet"].distance(0.1))


def _smoothed_pattern_data(micro: int, seed: int):
    """The colour patterns and their classes (the ConvNeXt's); chance: the smoothed loss of the
    uniform prediction, ln(classes) less the smoothed target's entropy."""
    images, classes = pattern_images(), PATTERNS.classes
    train, held = Dataset(images.x[:1600], images.y[:1600]), Dataset(images.x[1600:], images.y[1600:])
    off = 0.1 / (classes - 1)
    entropy = -(0.9 * math.log(0.9) + (classes - 1) * off * math.log(off))
    return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), classes, math.log(classes) - entropy


def _ppo_data(micro: int, seed: int):
    """CleanRL's `PPO_ENVS` CartPoles (the `draw` makes them from a seed); no eval draw; chance as
    the other agents': a uniformly random policy's reward shortfall."""
    return (lambda env_seed: CartPole(env_seed, envs=PPO_ENVS)), None, CARTPOLE.actions, _random_policy_shortfall()


def _box_data(micro: int, seed: int):
    """The box images and their box rows (the last `BOXES.held_out` held out); chance: the loss of
    a detector that learned nothing (`_detection_chance`)."""
    images, held = box_images(), BOXES.held_out
    train, test = Dataset(images.x[:-held], images.y[:-held]), Dataset(images.x[-held:], images.y[-held:])
    return batch_sampler(train, micro, seed), batch_sampler(test, 100, seed + 1), BOXES.classes, _detection_chance()


@lru_cache(maxsize=1)
def _detection_chance() -> float:
    """The detector's loss on the training images where it learned only each class's share of
    positive locations (one logit a class everywhere) and no box (ltrb 0: a point at each location,
    GIoU loss 1)."""
    images, held = box_images(), BOXES.held_out
    labels, _ = fcos_targets(images.y[:-held], (BOXES.size // 4, BOXES.size // 4), 4)
    one_hot = nn.functional.one_hot(labels.clamp(min=0), BOXES.classes).float() * (labels >= 0).unsqueeze(-1)
    share = one_hot.mean((0, 1))
    logits = torch.log(share / (1 - share)).expand_as(one_hot)
    per_image = [float(sigmoid_focal_loss(logits[i], one_hot[i])) / max(1, int((labels[i] >= 0).sum()))
                 for i in range(len(labels))]
    return sum(per_image) / len(per_image) + 1.0


def _pattern_data(micro: int, seed: int):
    """The colour patterns and their classes (the ConvNeXt's); chance: ln(classes), the smoothed
    cross-entropy of the uniform prediction."""
    images = pattern_images()
    train, held = Dataset(images.x[:1600], images.y[:1600]), Dataset(images.x[1600:], images.y[1600:])
    return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), PATTERNS.classes, \
        math.log(PATTERNS.classes)


@lru_cache(maxsize=1)
def _standardised_digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train x, train y, held-out x, held-out y) of the digits as (N, 1, 8, 8) images, the first
    1500 for training, standardised by their mean and std (Distiller's loaders' `Normalize`)."""
    rows = digits("rows")
    x = rows.x.unsqueeze(1)
    x = (x - x[:1500].mean()) / x[:1500].std()
    return x[:1500], rows.y[:1500], x[1500:], rows.y[1500:]


def _standardised_digits_data(micro: int, seed: int):
    """The pruned VGG's digits (`_standardised_digits`); chance: ln 10."""
    train_x, train_y, held_x, held_y = _standardised_digits()
    return batch_sampler(Dataset(train_x, train_y), micro, seed), batch_sampler(Dataset(held_x, held_y), 128, seed + 1), \
        10, math.log(10)


@lru_cache(maxsize=1)
def _deq_digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train x, train y, held-out x, held-out y) of the DEQ's digits: (N, 1, 8, 8) images in [0, 1]
    (the tutorial's loaders apply `ToTensor()` alone), the first 1500 for training."""
    rows = digits("rows")
    x = rows.x.unsqueeze(1)
    return x[:1500], rows.y[:1500], x[1500:], rows.y[1500:]


def _deq_digits_data(micro: int, seed: int):
    """The DEQ's digits (`_deq_digits`); chance: ln 10."""
    train_x, train_y, held_x, held_y = _deq_digits()
    return batch_sampler(Dataset(train_x, train_y), micro, seed), batch_sampler(Dataset(held_x, held_y), 128, seed + 1), \
        10, math.log(10)


def _ddp_wrn_data(micro: int, seed: int):
    """The colour patterns for the DDP Wide ResNet (the process group must be up): the first 1600
    through train.py's `DistributedSampler` + `DataLoader` (`WRNEpochLoader`, its shuffle seeded by
    the run's seed); the eval loop reads the whole 400 held-out patterns each time (train.py's
    `evaluate` over `data_loader_test`, a `SequentialSampler` shard); chance: ln(classes)."""
    images = pattern_images()
    held = (images.x[1600:], images.y[1600:])
    return WRNEpochLoader(images.x[:1600], images.y[:1600], micro, seed), lambda: held, PATTERNS.classes, \
        math.log(PATTERNS.classes)


def _moco_patterns() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train x, train y, held-out x, held-out y) of MoCo's images: the standardised 16×16 colour
    patterns (`pattern_images`, as the timm ResNet's), the first 1600 for training (the kNN monitor's
    feature bank, unaugmented, with their labels, as the demo's `memory_loader`) and the rest held
    out (its `test_loader`). Not the 8×8 digits SimCLR and BYOL read: on them instance
    discrimination against a queue barely learns in 150 steps (seed 0, K 128, lr 0.03: 4.39 -> 3.98,
    0.91×; K 512 0.96×; Adam 1e-3 1.06×), where many near-identical digits of a class sit in the queue."""
    images = pattern_images()
    return images.x[:1600], images.y[:1600], images.x[1600:], images.y[1600:]


def _moco_data(micro: int, seed: int):
    """MoCo's two augmented views of each pattern (`two_views_sampler`, SimCLR's and BYOL's
    augmentations: a shift of up to a pixel, a brightness scale, noise; main_moco.py's
    `TwoCropsTransform`), no targets; chance: ln(1 + K), the InfoNCE of logits that do not tell the
    positive key from the K queued ones."""
    train_x, _, held_x, _ = _moco_patterns()
    return two_views_sampler(train_x, micro, seed), two_views_sampler(held_x, 128, seed + 1), PATTERNS.classes, \
        math.log(1 + MOCO_K)


def _dino_random_resized_crop(x: torch.Tensor, size: int, scale: tuple[float, float],
                              generator: torch.Generator) -> torch.Tensor:
    """`transforms.RandomResizedCrop(size, scale, interpolation=BICUBIC)` then
    `RandomHorizontalFlip(p=0.5)`, per image of a batch: a box of area fraction U(scale) and aspect
    ratio log-uniform in [3/4, 4/3] (each side at most the image's), placed uniformly inside it, read
    by bicubic `grid_sample` at `size`×`size` (continuous boxes: torchvision rounds them to pixels),
    mirrored with probability ½."""
    n = len(x)
    area = scale[0] + (scale[1] - scale[0]) * torch.rand(n, generator=generator)
    log_ratio = math.log(3 / 4) + (math.log(4 / 3) - math.log(3 / 4)) * torch.rand(n, generator=generator)
    w = (area * log_ratio.exp()).sqrt().clamp(max=1.0)
    h = (area / log_ratio.exp()).sqrt().clamp(max=1.0)
    cx = (1 - w) * (2 * torch.rand(n, generator=generator) - 1)
    cy = (1 - h) * (2 * torch.rand(n, generator=generator) - 1)
    flip = torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = w * flip, cx, h, cy
    grid = torch.nn.functional.affine_grid(theta, [n, x.shape[1], size, size], align_corners=False)
    return torch.nn.functional.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False)


def _dino_gray(x: torch.Tensor) -> torch.Tensor:
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]).expand_as(x)


def _dino_color_jitter(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`DataAugmentationDINO`'s `flip_and_color_jitter` after the flip: `RandomApply([ColorJitter(
    brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1)], p=0.8)` (brightness ×U(0.6, 1.4),
    contrast about the image's grey mean ×U(0.6, 1.4), saturation about each pixel's grey
    ×U(0.8, 1.2), in that order; no hue shift) then `RandomGrayscale(p=0.2)`, on the standardised
    patterns."""
    n = len(x)

    def factor(spread: float) -> torch.Tensor:
        return (1 - spread + 2 * spread * torch.rand(n, 1, 1, 1, generator=generator))

    jitter = torch.rand(n, 1, 1, 1, generator=generator) < 0.8
    out = x * factor(0.4)
    mean = _dino_gray(out).mean((1, 2, 3), keepdim=True)
    out = mean + (out - mean) * factor(0.4)
    gray = _dino_gray(out)
    out = gray + (out - gray) * factor(0.2)
    out = torch.where(jitter, out, x)
    return torch.where(torch.rand(n, 1, 1, 1, generator=generator) < 0.2, _dino_gray(out), out)


def _dino_blur(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """utils.py's `GaussianBlur(p, radius_min=0.1, radius_max=2.)` on 224-px crops, its radius scaled
    to the crops' size here (σ U(0.1, 2.0) × size / 224 px: at most 0.14 px of a 16-px global crop,
    0.07 px of an 8-px local one), a 3×3 kernel, applied with probability `p`, replicate padding."""
    n, scale = len(x), x.shape[-1] / 224
    sigma = scale * (0.1 + 1.9 * torch.rand(n, 1, 1, 1, generator=generator))
    side = torch.exp(-1 / (2 * sigma ** 2))
    w0, w1 = 1 / (1 + 2 * side), side / (1 + 2 * side)
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="replicate")
    rows = w0 * padded[..., 1:-1] + w1 * (padded[..., :-2] + padded[..., 2:])
    out = w0 * rows[..., 1:-1, :] + w1 * (rows[..., :-2, :] + rows[..., 2:, :])
    return torch.where(torch.rand(n, 1, 1, 1, generator=generator) < p, out, x)


def _dino_solarize(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """utils.py's `Solarization(p)` (PIL's `ImageOps.solarize`: every pixel ≥ 128 becomes 255 − it), on
    the standardised patterns about their mean: x ≥ 0 becomes −x, with probability `p`."""
    out = torch.where(x >= 0, -x, x)
    return torch.where(torch.rand(len(x), 1, 1, 1, generator=generator) < p, out, x)


def dino_multicrop_sampler(images: torch.Tensor, batch_size: int, seed: int):
    """Returns `draw()` giving (crops, None): `batch_size` images drawn without replacement, each cut
    into main_dino.py's `DataAugmentationDINO` crops, collated as its loader collates them (one tensor
    a crop, the batch along dim 0), in a dict in the loader's order: `global_0` (`global_transfo1`:
    `RandomResizedCrop(DINO_IMG, scale=(0.4, 1))`, flip and colour jitter, blur p 1.0), `global_1`
    (`global_transfo2`: blur p 0.1, solarization p 0.2), `local_0` … (`local_transfo`:
    `RandomResizedCrop(DINO_LOCAL_IMG, scale=(0.05, 0.4))`, flip and colour jitter, blur p 0.5). The
    patterns are standardised already (the pipeline's `Normalize`). No targets (main_dino.py's
    `for it, (images, _) in enumerate(data_loader)`)."""
    draw_images = images_sampler(images, batch_size, seed)
    generator = torch.Generator().manual_seed(seed + 7)

    def view(x: torch.Tensor, size: int, scale: tuple[float, float]) -> torch.Tensor:
        return _dino_color_jitter(_dino_random_resized_crop(x, size, scale, generator), generator)

    def draw() -> tuple[dict[str, torch.Tensor], None]:
        x, _ = draw_images()
        crops = {"global_0": _dino_blur(view(x, DINO_IMG, DINO_GLOBAL_CROPS_SCALE), 1.0, generator),
                 "global_1": _dino_solarize(_dino_blur(view(x, DINO_IMG, DINO_GLOBAL_CROPS_SCALE), 0.1, generator),
                                            0.2, generator)}
        for i in range(DINO_LOCAL_CROPS):
            crops[f"local_{i}"] = _dino_blur(view(x, DINO_LOCAL_IMG, DINO_LOCAL_CROPS_SCALE), 0.5, generator)
        return crops, None

    return draw


DINO_TEXTURE_CLASSES = 4
"""DINO's image classes (`_dino_patterns`): stripes / checkerboards at a low / high spatial frequency."""
DINO_TEXTURE_NOISE = 0.5
"""The textures' pixel noise (before standardising)."""
DINO_TEXTURE_COLOUR = (0.8, 1.2)
"""Each image's texture colour, per channel uniform in this range: little instance colour for the
crops to agree on (at 0.5-1.5 with a background of σ 0.5 the kNN started at 33 % and did not rise)."""
DINO_TEXTURE_BACKGROUND = 0.1
"""σ of each image's background offset per channel."""


@lru_cache(maxsize=1)
def _dino_patterns() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train x, train y, held-out x, held-out y) of DINO's images, the same for every seed: 2000
    16×16 colour textures of `DINO_TEXTURE_CLASSES` classes, each texture visible in any crop (so
    that a local crop and a global one of an image share what tells its class): class 0 stripes of
    a low spatial frequency (0.08-0.12 cycles a pixel), 1 stripes of a high one (0.3-0.4), 2 and 3
    checkerboards (the product of two orthogonal gratings) at the same two bands; each image at a
    random orientation and phase, in a random colour on a random background, plus Gaussian noise
    `DINO_TEXTURE_NOISE`, standardised per channel (a torchvision `Normalize`). The first 1600 for
    training (eval_knn.py's `dataset_train`, unaugmented, with their labels), the rest held out (its
    `dataset_val`)."""
    generator = torch.Generator().manual_seed(2468)
    n, size = 2000, DINO_IMG
    labels = torch.randint(0, DINO_TEXTURE_CLASSES, (n,), generator=generator)
    rows, cols = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32),
                                indexing="ij")
    high = (labels % 2 == 1).float()
    frequency = torch.where(high > 0, 0.3 + 0.1 * torch.rand(n, generator=generator),
                            0.08 + 0.04 * torch.rand(n, generator=generator))
    angle = math.pi * torch.rand(n, generator=generator)
    phase = 2 * math.pi * torch.rand(n, 2, generator=generator)
    u = rows * angle.cos()[:, None, None] + cols * angle.sin()[:, None, None]
    v = -rows * angle.sin()[:, None, None] + cols * angle.cos()[:, None, None]
    along = torch.cos(2 * math.pi * frequency[:, None, None] * u + phase[:, 0, None, None])
    across = torch.cos(2 * math.pi * frequency[:, None, None] * v + phase[:, 1, None, None])
    texture = torch.where((labels >= 2)[:, None, None], along * across, along)
    colour = DINO_TEXTURE_COLOUR[0] + (DINO_TEXTURE_COLOUR[1] - DINO_TEXTURE_COLOUR[0]) * torch.rand(n, 3, 1, 1, generator=generator)
    background = DINO_TEXTURE_BACKGROUND * torch.randn(n, 3, 1, 1, generator=generator)
    images = background + colour * texture[:, None] + DINO_TEXTURE_NOISE * torch.randn(n, 3, size, size,
                                                                                         generator=generator)
    mean, std = images.mean((0, 2, 3), keepdim=True), images.std((0, 2, 3), keepdim=True)
    images = (images - mean) / std
    return images[:1600], labels[:1600], images[1600:], labels[1600:]


DINO_KNN_BANK = 600
"""Training textures in the kNN's feature bank (eval_knn.py's whole `dataset_train`; the first 600 of
the 1600 here, the kNN running every step: `OUTCOME_METRICS`)."""
DINO_KNN_QUERIES = 200
"""Held-out textures the kNN classifies (the first 200 of the 400)."""


def _dino_knn_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(bank x, bank y, query x, query y) of the kNN evaluation: `DINO_KNN_BANK` training textures
    and `DINO_KNN_QUERIES` held-out ones, unaugmented."""
    train_x, train_y, held_x, held_y = _dino_patterns()
    return train_x[:DINO_KNN_BANK], train_y[:DINO_KNN_BANK], held_x[:DINO_KNN_QUERIES], held_y[:DINO_KNN_QUERIES]


def _dino_data(micro: int, seed: int):
    """DINO's multi-crop batches of the training textures (`dino_multicrop_sampler`), the held-out
    val_loss's of the held-out ones (16 images), no targets; chance (on the judged kNN top-1,
    `OUTCOME_METRICS`): the distance to 100 % of a kNN that guesses, 100 − 100 / classes."""
    train_x, _, held_x, _ = _dino_patterns()
    return dino_multicrop_sampler(train_x, micro, seed), dino_multicrop_sampler(held_x, 16, seed + 1), \
        DINO_TEXTURE_CLASSES, 100.0 - 100.0 / DINO_TEXTURE_CLASSES


@lru_cache(maxsize=1)
def _tacotron_voice() -> tuple[torch.Tensor, torch.Tensor]:
    """(templates, durations) of the synthetic speaker, one for every seed: each of the
    `TACOTRON_CHARS` characters (IDs 1-20; 0 is the pad) a fixed (`TACOTRON_MELS`,) log-mel-like
    spectral template (Gaussian noise smoothed along the mel axis by [1, 2, 1] / 4, ×1.5) held for a
    fixed 1-3 frames."""
    generator = torch.Generator().manual_seed(35_000)
    raw = torch.randn(TACOTRON_CHARS + 1, TACOTRON_MELS + 2, generator=generator)
    templates = 1.5 * (raw[:, :-2] + 2 * raw[:, 1:-1] + raw[:, 2:]) / 4
    durations = torch.randint(1, 4, (TACOTRON_CHARS + 1,), generator=generator)
    templates[0], durations[0] = 0.0, 0  # the pad is never spoken
    return templates, durations


@lru_cache(maxsize=None)
def _tacotron_utterances(count: int, seed: int) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """`count` (text, mel) pairs as `TextMelLoader.get_mel_text_pair` gives them: a random string
    of 4-`TACOTRON_MAX_CHARS` characters (int64 IDs 1-20) and its (n_mel, frames) mel, each
    character's template for its duration, plus noise of std 0.1."""
    templates, durations = _tacotron_voice()
    generator = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(count):
        length = int(torch.randint(4, TACOTRON_MAX_CHARS + 1, (1,), generator=generator))
        text = torch.randint(1, TACOTRON_CHARS + 1, (length,), generator=generator)
        frames = templates[text.repeat_interleave(durations[text])].T
        pairs.append((text, frames + 0.1 * torch.randn(frames.shape, generator=generator)))
    return tuple(pairs)


def tacotron_sampler(pairs, batch_size: int, seed: int):
    """`draw()` of a shuffled batch (a `DataLoader(shuffle=True, drop_last=True)`'s epochs) collated by
    `TextMelCollate` and parsed by `parse_batch` (`field_models.tacotron_collate`): (x, y)."""
    next_batch = shuffled_indices(len(pairs), batch_size, seed)
    return lambda: tacotron_collate([pairs[i] for i in next_batch()])


@lru_cache(maxsize=1)
def _tacotron_chance() -> float:
    """`Tacotron2Loss` of a model that learned only the marginals: every valid frame the training
    frames' per-channel mean (both mel outputs), every valid gate the logit of the stop rate,
    masked as `mask_padding` masks them; over 20 training batches of `TACOTRON_BATCH`."""
    train = _tacotron_utterances(2048, 35_001)
    frames = torch.cat([mel for _, mel in train], dim=1)
    mean = frames.mean(1)
    rate = len(train) / frames.shape[1]
    draw, total = tacotron_sampler(train, TACOTRON_BATCH, 0), 0.0
    for _ in range(20):
        x, (mel, gate) = draw()
        valid = tacotron_mask_from_lengths(x[4])
        out = torch.where(valid[:, None, :], mean[None, :, None].expand_as(mel), torch.zeros(()))
        gate_out = torch.where(valid, torch.full_like(gate, math.log(rate / (1 - rate))), torch.full_like(gate, 1e3))
        total += float(2 * ((out - mel) ** 2).mean()
                       + torch.nn.functional.binary_cross_entropy_with_logits(gate_out, gate))
    return total / 20


def _tacotron_data(micro: int, seed: int):
    """Tacotron 2's synthetic utterances (`_tacotron_utterances`): 2048 for training (one set for
    every seed, shuffled by the seed's sampler), 256 held out (the val loader's two batches of
    128 each eval); chance `_tacotron_chance`. `classes` is the symbol count (unused by the model)."""
    train, held = _tacotron_utterances(2048, 35_001), _tacotron_utterances(256, 35_002)
    return tacotron_sampler(train, micro, seed), tacotron_sampler(held, 128, seed + 1), TACOTRON_CHARS + 1, \
        _tacotron_chance()


def link_pred_sampler(batch_size: int, seed: int):
    """`draw()` of gnn.py's `train()` mini-batches: `DataLoader(range(len(pos_train_edge)),
    batch_size, shuffle=True)` (its epochs one after another, the last batch of each short; the
    shuffle seeded), `edge = pos_train_edge[perm].t()`, and as many negatives `torch.randint(0,
    num_nodes, edge.size())` drawn from the global generator, as upstream; the batch as PyG's
    link_pred.py gives it, x = {`x`, `edge_index` (the training graph), `edge_label_index` [pos,
    neg]} and y = `edge_label` (1 for the positives, 0 for the negatives)."""
    x, edge_index, split_edge = sbm_link_split()
    pos_train_edge = split_edge["train"]["edge"]
    loader = torch.utils.data.DataLoader(range(pos_train_edge.size(0)), batch_size, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    epoch = iter(())

    def draw():
        nonlocal epoch
        perm = next(epoch, None)
        if perm is None:
            epoch = iter(loader)
            perm = next(epoch)
        edge = pos_train_edge[perm].t()
        neg = torch.randint(0, x.size(0), edge.size(), dtype=torch.long)
        return ({"x": x, "edge_index": edge_index, "edge_label_index": torch.cat([edge, neg], dim=1)},
                torch.cat([torch.ones(edge.size(1)), torch.zeros(neg.size(1))]))

    return draw


def _link_pred_eval_draw():
    """The valid split as one batch: every positive and every fixed negative (`val_loss` the training
    loss on them)."""
    x, edge_index, split_edge = sbm_link_split()
    pos, neg = split_edge["valid"]["edge"].t(), split_edge["valid"]["edge_neg"].t()
    return ({"x": x, "edge_index": edge_index, "edge_label_index": torch.cat([pos, neg], dim=1)},
            torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))]))


def _link_pred_data(micro: int, seed: int):
    """The link predictor's mini-batches (`link_pred_sampler`) of the block model's edges
    (`data.sbm_link_split`, one graph for every seed), the valid split for `val_loss`; `classes` 2
    (edge or not; unused by the model); chance 2 ln 2, the loss of a predictor that says 0.5 for
    every pair (the constant that minimises −log p − log(1 − p))."""
    return link_pred_sampler(micro, seed), _link_pred_eval_draw, 2, 2 * math.log(2)


def deepar_window(values: torch.Tensor, series: torch.Tensor, split: torch.Tensor,
                  past_length: int = DEEPAR_CONTEXT_LENGTH + max(DEEPAR_LAGS),
                  prediction_length: int = DEEPAR_PREDICTION_LENGTH) -> dict[str, torch.Tensor]:
    """GluonTS's `InstanceSplitter` output for the windows of `series` cut at `split` (hours): the
    `past_length` values before it (`past_target`; before the series began, `pad_value` 0 and
    `past_observed_values` 0, as `AddObservedValuesIndicator` and the splitter pad them), the
    `prediction_length` after it (`future_target`, all observed), their time features (0 where
    padded), `feat_static_cat` the series' ID and `feat_static_real` GluonTS's dummy [0.0]."""
    hours = split[:, None] + torch.arange(-past_length, prediction_length)[None, :]
    inside = hours >= 0
    rows = values[series[:, None], hours.clamp(min=0)] * inside
    time_feat = deepar_time_features(hours.clamp(min=0)) * inside[..., None]
    observed = inside.float()
    return {"past_target": rows[:, :past_length], "past_observed_values": observed[:, :past_length],
            "past_time_feat": time_feat[:, :past_length], "future_target": rows[:, past_length:],
            "future_observed_values": observed[:, past_length:], "future_time_feat": time_feat[:, past_length:],
            "feat_static_cat": series[:, None], "feat_static_real": torch.zeros(len(series), 1)}


class DeepARTrainingBatches:
    """GluonTS's `TrainDataLoader` for DeepAR: each epoch `DEEPAR_BATCHES_PER_EPOCH` batches
    (`num_batches_per_epoch`) of `batch_size` windows, each a series drawn uniformly (the cycled,
    shuffled dataset) cut at a point drawn uniformly in [0, T − prediction_length] of its training
    part (`ExpectedNumInstanceSampler(num_instances=1.0, min_future=prediction_length)`'s range, the
    held-out last day excluded), by `deepar_window`; the draws continue across epochs from one
    seeded generator, as the estimator's `IterableSlice` of one stream does."""

    def __init__(self, batch_size: int, seed: int, accumulation: int = 1) -> None:
        self.batch_size, self.accumulation = batch_size, accumulation
        self.generator = torch.Generator().manual_seed(seed)
        self.values = related_series()[:, :-RELATED_SERIES.prediction_length]

    def __len__(self) -> int:  # an epoch's optimizer steps the same under accumulation (no short last step)
        return DEEPAR_BATCHES_PER_EPOCH * self.accumulation

    def draw(self) -> dict[str, torch.Tensor]:
        series = torch.randint(0, self.values.shape[0], (self.batch_size,), generator=self.generator)
        split = torch.randint(0, self.values.shape[1] - DEEPAR_PREDICTION_LENGTH + 1, (self.batch_size,),
                              generator=self.generator)
        return deepar_window(self.values, series, split)

    def __iter__(self):
        return (self.draw() for _ in range(len(self)))


@lru_cache(maxsize=1)
def _deepar_held_out() -> dict[str, torch.Tensor]:
    """The test split as one batch: every series' last `prediction_length` hours (GluonTS's
    `split(dataset, offset=-prediction_length)`), the history before them its past."""
    values = related_series()
    series = torch.arange(values.shape[0])
    return deepar_window(values, series, torch.full_like(series, values.shape[1] - RELATED_SERIES.prediction_length))


def deepar_evaluate(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """`val_wql`: GluonTS `Evaluator`'s mean_wQuantileLoss of `DEEPAR_SAMPLES` sample paths a
    held-out series (`deepar_sample_paths`) over the prediction range; the samples drawn under
    `torch.random.fork_rng` from `DEEPAR_EVAL_SEED` (the same draws every validation; the caller's
    mode and no-grad state)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(DEEPAR_EVAL_SEED)
        samples = deepar_sample_paths(model, batch, DEEPAR_SAMPLES)
    return {"val_wql": mean_weighted_quantile_loss(samples, batch["future_target"])}


def _deepar_chance() -> float:
    """val_wql of a forecast that knows each series' level and nothing else: every quantile of every
    hour its context's mean |value| (the `MeanScaler`'s scale)."""
    batch = _deepar_held_out()
    level = batch["past_target"][:, -DEEPAR_CONTEXT_LENGTH:].abs().mean(1, keepdim=True)
    return mean_weighted_quantile_loss(level.expand_as(batch["future_target"]).unsqueeze(1),
                                       batch["future_target"])


def _deepar_data(micro: int, seed: int):
    """DeepAR's training windows (`DeepARTrainingBatches`) of the related series
    (`data.related_series`, one dataset for every seed), the held-out last day as one validation
    batch; `classes` the number of series (the embedding's cardinality); chance (on the judged
    val_wql, `OUTCOME_METRICS`): `_deepar_chance`."""
    held_out = torch.utils.data.DataLoader([_deepar_held_out()], batch_size=None)  # the one batch as it is
    return DeepARTrainingBatches(micro, seed, DEEPAR_BATCH // micro), held_out, RELATED_SERIES.series, _deepar_chance()


def _poisson_data(micro: int, seed: int):
    """Collocation and boundary points of DeepXDE's Poisson problem, held-out points for its
    `val_loss`; chance: the l2 relative error of u ≡ 0, 1."""
    return (poisson_points_sampler(micro, seed), poisson_points_sampler(POISSON.grid, seed + 1), 1,
            OUTCOME_METRICS["pinn"].distance(1.0))


def _sinusoid_data(micro: int, seed: int):
    """Meta-batches of sinusoid tasks, `SINUSOIDS.held_out` fixed held-out tasks (the same for
    every seed); chance: their query points' mean square, the loss of predicting 0 (the tasks' mean)."""
    held_out = sinusoid_tasks_sampler(SINUSOIDS.held_out, 7_000, fixed=True)
    return (sinusoid_tasks_sampler(micro, seed), held_out, 1,
            OUTCOME_METRICS["maml"].distance(float((held_out()[1] ** 2).mean())))


def _held_out_pairs() -> tuple[torch.Tensor, torch.Tensor]:
    pairs = edge_photo_pairs()
    return pairs.x[-EDGES.held_out:], pairs.y[-EDGES.held_out:]


def _edges_data(micro: int, seed: int):
    """The (edges, photo) pairs, the last `EDGES.held_out` held out; no eval draw (the loop
    measures `val_l1_error`); chance: the L1 error of a grey image (the generator's tanh at 0)."""
    pairs, held = edge_photo_pairs(), EDGES.held_out
    train = Dataset(pairs.x[:-held], pairs.y[:-held])
    return batch_sampler(train, micro, seed), None, 3, float(_held_out_pairs()[1].abs().mean()) / 2



def _held_out_sentences() -> tuple[torch.Tensor, torch.Tensor]:
    sentences = tagged_sentences()
    return sentences.x[-TAGGING.held_out:], sentences.y[-TAGGING.held_out:]


def _tagging_data(micro: int, seed: int):
    """The tagged sentences (the last `TAGGING.held_out` held out); chance: the NLL of the best
    CRF that ignores its words (`_crf_chance`)."""
    sentences, held = tagged_sentences(), TAGGING.held_out
    train = Dataset(sentences.x[:-held], sentences.y[:-held])
    return (batch_sampler(train, micro, seed), batch_sampler(Dataset(*_held_out_sentences()), held, seed + 1),
            len(TAGS), _crf_chance())


@lru_cache(maxsize=1)
def _crf_chance() -> float:
    """The sentence NLL on the held-out sentences of a CRF whose emissions are all 0 and whose
    transitions Adam fitted (lr 0.1, 300 steps) to the training tags: a tagger that learned the
    tags' grammar and nothing of the words."""
    sentences, held = tagged_sentences(), TAGGING.held_out
    transitions = torch.zeros(len(TAGS) + 2, len(TAGS) + 2, requires_grad=True)
    optimizer = torch.optim.Adam([transitions], lr=0.1)

    def nll(tokens: torch.Tensor, tags: torch.Tensor) -> torch.Tensor:
        feats, mask = torch.zeros(*tokens.shape, len(TAGS) + 2), tokens != 0
        return crf_nll((feats, transitions, mask), tags)

    for _ in range(300):
        optimizer.zero_grad()
        nll(sentences.x[:-held], sentences.y[:-held]).backward()
        optimizer.step()
    with torch.no_grad():
        return float(nll(sentences.x[-held:], sentences.y[-held:]))


DIGIT_LEVELS = 17
"""The grey levels of scikit-learn's digits (0-16): the PixelCNN's softmax size."""


def _digit_levels_data(micro: int, seed: int):
    """The digits and their pixels' levels (the last 297 held out); chance: the entropy of the
    training pixels' level marginal (nats per dimension), the loss of a model that ignores the
    pixels above and left."""
    levels = digit_levels()
    train, held = Dataset(levels.x[:1500], levels.y[:1500]), Dataset(levels.x[1500:], levels.y[1500:])
    share = torch.bincount(train.y.flatten(), minlength=DIGIT_LEVELS).double() / train.y.numel()
    share = share[share > 0]
    return batch_sampler(train, micro, seed), batch_sampler(held, 297, seed + 1), DIGIT_LEVELS, \
        float(-(share * share.log()).sum())


def _spiral_data(micro: int, seed: int):
    """The demo's random windows of the spiral (its eval draw: other windows, `val_loss`); chance:
    the L1 error of a func that learned nothing (dy/dt = 0: every window predicted as its start)."""
    held = spiral_windows_sampler(256, seed + 1)
    y0, windows = spiral_windows_sampler(SPIRAL.data_size, 99)()
    return spiral_windows_sampler(micro, seed), held, 2, float((windows - y0).abs().mean())


def _nerf_data(micro: int, seed: int):
    """`micro` random rays of one random training view a draw (`data.nerf_rays_sampler`), the
    held-out view's rays (its `val_loss`); chance: the MSE on the held-out view of the training
    pixels' mean colour."""
    train, held = nerf_views()
    mean_colour = train.y.reshape(-1, 3).mean(0)
    return (nerf_rays_sampler(train, micro, seed), lambda: (held.x[0], held.y[0]), 3,
            OUTCOME_METRICS["nerf"].distance(float(((held.y - mean_colour) ** 2).mean())))


def _capsule_digits_data(micro: int, seed: int):
    """The digits at 28 × 28 (MNIST's size, `data.digits_images`) and their classes, the last
    297 held out; chance: the loss of a network whose capsules all have one length (the margin
    loss's minimum there, at (0.9 + 0.05 (K − 1)) / (1 + 0.5 (K − 1))) and whose decoder draws
    the mean training image."""
    images, classes = digits("image"), 10
    train, held = Dataset(images.x[:1500], images.y[:1500]), Dataset(images.x[1500:], images.y[1500:])
    level = (0.9 + 0.05 * (classes - 1)) / (1 + 0.5 * (classes - 1))
    margin = float(margin_loss(torch.full((1, classes), level), torch.zeros(1, dtype=torch.long)))
    pixels = train.x.flatten(1)
    reconstruction = CAPSNET_RECONSTRUCTION * float(((pixels - pixels.mean(0)) ** 2).sum(1).mean())
    return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), classes, margin + reconstruction


def _point_mass_data(micro: int, seed: int):
    """The point masses (the `draw` makes `POINT_MASS.envs` of them from a seed); no eval draw
    (the loop's own); chance: the return shortfall of uniformly random actions (`_random_push_shortfall`)."""
    return PointMass, None, POINT_MASS.actions, _random_push_shortfall()


@lru_cache(maxsize=1)
def _random_push_shortfall() -> float:
    """The mean return's distance to 0 of uniformly random forces over 64 episodes of their own envs."""
    env, rng = PointMass(9_000, envs=64), np.random.default_rng(9_001)
    env.reset()
    returns = sum(env.step(rng.uniform(-1, 1, (64, POINT_MASS.actions)))[1] for _ in range(POINT_MASS.max_steps))
    return OUTCOME_METRICS["sac"].distance(float(np.mean(returns)))


def _masked_digits_data(micro: int, seed: int):
    """The digits at 28 × 28 (`data.digits_images`) and their classes (which mae's loop drops),
    the last 297 held out; chance: the loss on the training images of a decoder that predicts 0,
    the normalised targets' mean, for every patch (the masks are uniform: every patch's share alike)."""
    images = digits("image")
    train, held = Dataset(images.x[:1500], images.y[:1500]), Dataset(images.x[1500:], images.y[1500:])
    target = patchify(train.x, MAE_PATCH)
    target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6) ** 0.5
    chance = float((target ** 2).mean())
    return batch_sampler(train, micro, seed), batch_sampler(held, 128, seed + 1), 10, chance


def _waveform_data(micro: int, seed: int):
    """Windows of the mu-law clips, one-hot, and their next samples (`data.waveform_windows_sampler`),
    the held-out clips' for `val_loss`; chance: the entropy of the training clips' level marginal,
    the loss of a model that ignores the samples before."""
    levels = waveform_clips()[0].flatten()
    share = torch.bincount(levels, minlength=WAVEFORMS.classes).double() / levels.numel()
    share = share[share > 0]
    return (waveform_windows_sampler(micro, seed), waveform_windows_sampler(32, seed + 1, held_out=True),
            WAVEFORMS.classes, float(-(share * share.log()).sum()))


def _max_set_data(micro: int, seed: int):
    """The max-regression demo's sets and their maxima (`data.max_set_sampler`), two fixed held-out
    batches of them for `val_loss` (the eval loop reads two a time); chance: the L1 error of the
    maxima's median (`data.max_set_chance`), the loss of a model that ignores its sets."""
    return (max_set_sampler(micro, seed), max_set_sampler(256, 10_000 + seed, fixed=2), 1,
            max_set_chance())


def _gp_curves_data(micro: int, seed: int):
    """The neural-processes reader's GP curves (`data.gp_curves_sampler`): contexts and targets, two
    fixed held-out batches of 64 functions for `val_loss`; chance: the NLL, less its floor, of the
    best model that ignores its context, N(0, E[y²]) at every point (`data.gp_curves_chance`)."""
    return (gp_curves_sampler(micro, seed), gp_curves_sampler(64, 10_000 + seed, fixed=2), 1,
            OUTCOME_METRICS["neural_process"].distance(gp_curves_chance()))


def _token_ids(draw):
    """The speech batches with their labels as token IDs 0 … symbols − 1 (-100 padding kept): the
    Conformer's tokenizer's; its head reserves 0 for the blank (`conformer_ctc_loss`)."""
    def shifted():
        batch, labels = draw()
        return batch, torch.where(labels >= 0, labels - 1, labels)
    return shifted


def _mel_speech_data(micro: int, seed: int):
    """The Conformer's utterances (`data.MEL_SPEECH`, `ctc_batch_sampler`), their token IDs its
    targets; `classes` the tokens (the wrong-transcript batches of `healthy_spike` stay among them,
    never the blank); chance: `_conformer_chance`."""
    return (_token_ids(ctc_batch_sampler(micro, seed, MEL_SPEECH)), _token_ids(ctc_batch_sampler(64, seed + 1, MEL_SPEECH)),
            MEL_SPEECH.symbols, _conformer_chance())


@lru_cache(maxsize=1)
def _conformer_chance() -> float:
    """As `_ctc_chance` for the Conformer: the CTC loss of one blank-and-token distribution for
    every output frame (lengths L // 4 − 1) of every utterance, fitted by Adam on held-out batches."""
    draw = _token_ids(ctc_batch_sampler(256, 99, MEL_SPEECH))

    def loss_on(logits: torch.Tensor, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        lengths = torch.div(batch["attention_mask"].sum(1), 4, rounding_mode="floor") - 1
        log_probs = torch.log_softmax(logits, 0).expand(len(labels), int(lengths.max()), -1)
        return conformer_ctc_loss((log_probs, lengths), labels)

    return _one_frame_distribution_loss(MEL_SPEECH.classes, [draw() for _ in range(2)], loss_on)


def _one_frame_distribution_loss(classes: int, batches: list, loss_on: Callable) -> float:
    """The CTC loss, on the second batch, of one distribution over `classes` for every frame,
    fitted by Adam on the first: `loss_on(logits, batch, labels)`."""
    logits = torch.zeros(classes, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=0.1)
    for _ in range(150):
        optimizer.zero_grad()
        loss_on(logits, *batches[0]).backward()
        optimizer.step()
    with torch.no_grad():
        return float(loss_on(logits, *batches[1]))



def detr_sampler(seed: int, batch_size: int):
    """`draw()` of main.py's training loader: `RandomSampler(dataset_train)` in a `BatchSampler(...,
    drop_last=True)` (each epoch a fresh permutation of the seed's training images, the last short
    batch dropped; the permutation from a seeded generator), collated as `utils.collate_fn` does
    (images stacked: one size, so `nested_tensor_from_tensor_list` pads nothing) with each image's
    targets padded to `DETR_SHAPES.most` rows: y = {`labels` (B, most) int64, −1 past its objects,
    `boxes` (B, most, 4) normalised cx, cy, w, h}; `field_models.detr_targets` gives engine.py's list
    of dicts back."""
    images, labels, boxes = detr_shapes(seed)
    train = DETR_SHAPES.train
    generator = torch.Generator().manual_seed(seed)
    batches = iter(())

    def draw():
        nonlocal batches
        idx = next(batches, None)
        if idx is None:
            order = torch.randperm(train, generator=generator)
            batches = iter(order[: train - train % batch_size].split(batch_size))
            idx = next(batches)
        return images[idx], {"labels": labels[idx], "boxes": boxes[idx]}

    return draw


def _detr_held_out() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(images, labels, boxes) of the held-out split (`DETR_HELD_OUT_SEED`'s last `held_out` images)."""
    images, labels, boxes = detr_shapes(DETR_HELD_OUT_SEED)
    train = DETR_SHAPES.train
    return images[train:], labels[train:], boxes[train:]


def _detr_eval_draw():
    """The held-out split in two batches of 100, in turn (the loop's two eval batches: all of it)."""
    images, labels, boxes = _detr_held_out()
    halves = [slice(0, len(images) // 2), slice(len(images) // 2, len(images))]
    turn = [0]

    def draw():
        part = halves[turn[0] % 2]
        turn[0] += 1
        return images[part], {"labels": labels[part], "boxes": boxes[part]}

    return draw


def _detr_chance(seed: int) -> float:
    """The loss of a DETR that learned only the marginals, on the seed's training images: every query
    the same class distribution (the one minimising `SetCriterion`'s weighted cross-entropy: each
    class's share of the queries × its `empty_weight`, the no-object class's 0.1) and the same box
    (the training boxes' mean), so that the matching does not matter; its CE + 5 L1 + 2 (1 − GIoU)
    per box, × the decoder's layers (the auxiliary losses)."""
    _, labels, boxes = detr_shapes(seed)
    labels, boxes = labels[: DETR_SHAPES.train], boxes[: DETR_SHAPES.train]
    present = labels >= 0
    objects = int(present.sum())
    counts = torch.stack([(labels == c).sum() for c in range(DETR_SHAPES.classes)]
                         + [torch.tensor(DETR_QUERIES * len(labels) - objects)]).double()
    weights = torch.ones(DETR_SHAPES.classes + 1, dtype=torch.float64)
    weights[-1] = 0.1
    p = counts * weights / (counts * weights).sum()
    ce = float(-(counts * weights * p.log()).sum() / (counts * weights).sum())
    target = boxes[present]
    mean_box = target.mean(0, keepdim=True)
    l1 = float((target - mean_box).abs().sum(1).mean())
    giou = float((1 - detr_generalized_box_iou(detr_box_cxcywh_to_xyxy(mean_box),
                                               detr_box_cxcywh_to_xyxy(target))).mean())
    weight = detr_weight_dict()
    return len(weight) // 3 * (ce + 5 * l1 + 2 * giou)


def _detr_data(micro: int, seed: int):
    """DETR's training batches of the seed's images (`detr_sampler`), the held-out split for `val_loss`
    (`_detr_eval_draw`), `DETR_SHAPES.classes` classes (the model adds the no-object one); chance
    `_detr_chance`."""
    return detr_sampler(seed, micro), _detr_eval_draw(), DETR_SHAPES.classes, _detr_chance(seed)

ARCH_DATA = {"realnvp": _density_data, "transe": _triples_data, "kws": _keyword_data, "lora": _kitchen_data,
             "vqvae": _pattern_reconstruction_data, "nbeats": _forecast_data, "word2vec": _skipgram_data,
             "triplet": _metric_learning_data, "sam": _smoothed_pattern_data, "ppo": _ppo_data, "detector": _box_data,
             "efficientnet": _pattern_data, "pinn": _poisson_data, "maml": _sinusoid_data, "pix2pix": _edges_data,
             "bilstm_crf": _tagging_data, "pixelcnn": _digit_levels_data, "neural_ode": _spiral_data,
             "nerf": _nerf_data, "capsnet": _capsule_digits_data, "sac": _point_mass_data,
             "mae": _masked_digits_data, "wavenet": _waveform_data,
             "set_transformer": _max_set_data, "conformer": _mel_speech_data,
             "neural_process": _gp_curves_data, "timm_mixup": _pattern_data,
             "gradual_pruning": _standardised_digits_data, "qat": _pattern_data,
             "deq": _deq_digits_data, "ddp_wrn": _ddp_wrn_data,
             "moco": _moco_data, "swa_gc": _pattern_data, "tacotron": _tacotron_data,
             "link_pred": _link_pred_data, "dino": _dino_data, "detr": _detr_data,
             "deepar": _deepar_data}
"""(draw, eval_draw, classes, chance) of the round-12 to round-22 families, from the micro-batch
size and the seed."""
EVAL_METRICS = {
    "transe": lambda model: {"hits_at_10": hits_at_k(model, knowledge_graph()[1], 10)},
    "vqvae": lambda model: {"codebook_perplexity": codebook_perplexity(model, pattern_images().x[1600:])},
    "nbeats": lambda model: {"val_smape": _held_out_smape(model)},
    "word2vec": lambda model: {"wordsim_spearman": word_similarity_spearman(model, *related_word_pairs())},
    "triplet": lambda model: {"val_recall_at_1": recall_at_1(model, noisy_digits().x[1500:], noisy_digits().y[1500:])},
    "sam": lambda model: {"val_accuracy": _held_out_accuracy(model)},
    "detector": lambda model: {"val_iou": detection_iou(model, box_images().x[-BOXES.held_out:],
                                                        box_images().y[-BOXES.held_out:])},
    "efficientnet": lambda model: {"val_accuracy": _held_out_accuracy(model)},
    "pinn": lambda model: {"val_l2_relative_error": l2_relative_error(model, POISSON.grid)},
    "pix2pix": lambda model: {"val_l1_error": pix2pix_l1_error(model, *_held_out_pairs())},
    "bilstm_crf": lambda model: {"val_f1": entity_f1(model, *_held_out_sentences())},
    "neural_ode": lambda model: {"val_trajectory_error": trajectory_error(model)},
    "capsnet": lambda model: {"val_accuracy": capsule_accuracy(model, digits("image").x[1500:],
                                                               digits("image").y[1500:])},
    "electra_ft": lambda model: {"val_accuracy": electra_accuracy(model, electra_collate(*_electra_held_out()))},
    "albert": lambda model: {"val_accuracy": electra_accuracy(model, _albert_held_out_batch())},
    "deeplab": lambda model: deeplab_evaluate(model, _deeplab_held_out().x, _deeplab_held_out().y),
    "decision_transformer": lambda model: {"eval_return": float(dt_rollouts(model, *_dt_dataset()[2]).mean())},
    "patchtst": lambda model: patchtst_evaluate(model, *_patchtst_held_out()),
    "timm_mixup": lambda model: {"val_top1": timm_top1(model, pattern_images().x[1600:], pattern_images().y[1600:])},
    # Distiller's validate() top-1 and the sparsity its scheduler logs (`distiller.weights_sparsity_summary`'s total).
    "gradual_pruning": lambda model: {"val_top1": timm_top1(model, *_standardised_digits()[2:]),
                                      "sparsity": global_sparsity(model)},
    # The tutorial's `epoch(test_loader, model)`: top-1 of the eval-mode DEQ (the solver runs; no hook without grad).
    "deq": lambda model: {"val_top1": timm_top1(model, *_deq_digits()[2:])},
    # train.py's evaluate() top-1 over the held-out patterns (`_train` steps the plateau on its loss).
    "ddp_wrn": lambda model: {"val_top1": wrn_evaluate(model, pattern_images().x[1600:], pattern_images().y[1600:])[1]},
    # The MoCo CIFAR-10 demo's kNN monitor on encoder_q: the training digits the bank, the held-out ones scored.
    "moco": lambda model: {"val_knn_top1": moco_knn_top1(model, *_moco_patterns())},
    # gnn.py's test(): Hits@50 of the valid positives against the fixed valid negatives.
    "link_pred": lambda model: {"val_hits": link_pred_hits(
        model, *sbm_link_split()[:2], sbm_link_split()[2]["valid"]["edge"], sbm_link_split()[2]["valid"]["edge_neg"],
        LINK_PRED_HITS_K)},
    # eval_knn.py's weighted kNN (k 20, T 0.07) on the teacher's backbone (main_dino.py's checkpoints'
    # `teacher`, eval_knn.py's default `--checkpoint_key`): `_train` passes the teacher, not the student.
    "dino": lambda teacher: {"val_knn_top1": dino_knn_top1(teacher.wrapper.backbone, *_dino_knn_split())},
    # engine.py's evaluate() (PostProcess, then an evaluator) reduced to VOC AP at IoU 0.5 over the classes.
    "detr": lambda model: {"val_ap50": detr_evaluate_ap50(model, *_detr_held_out())},
    # GluonTS's Evaluator on the test split (the held-out last day of every series): mean_wQuantileLoss
    # of the sample paths (`train_lightning` runs it in each validation_step, beside val_loss).
    "deepar": lambda model: deepar_evaluate(model, _deepar_held_out()),
    # train_quantization.py's two evaluations each epoch: the QAT (fake-quant) model (eval mode, no
    # gradient: its observers still observe where enabled, as the reference's do), then an int8 copy.
    "qat": lambda model: {"val_top1": timm_top1(model, pattern_images().x[1600:], pattern_images().y[1600:]),
                          "val_top1_int8": qat_int8_top1(model, pattern_images().x[1600:],
                                                         pattern_images().y[1600:], QAT_BACKEND)},
}
"""Metrics a family's eval loop records beside `val_loss` (`train_field`'s `eval_metrics`)."""


EVAL_EVERY = {"triplet": 1, "pinn": 1, "maml": 1, "nerf": 1, "neural_process": 1, "qat": QAT_EPOCH_STEPS,
              "ddp_wrn": DDP_WRN_EPOCH_STEPS, "swa_gc": SWA_GC_EPOCH_STEPS,
              "link_pred": LINK_PRED_EPOCH_STEPS, "dino": 1, "deepar": 1}
"""Steps between evaluations where not 25: a family judged on a held-out metric
(`OUTCOME_METRICS`) evaluates every step; the QAT model once an epoch, after it (from step 15, never
before training: an eval-mode forward of the untrained model, its fused BNs on their initial running
statistics, sets every activation observer's first range; at step 0 it stalled seed 0's healthy run,
1.39 -> 1.40), as train_quantization.py."""


def _held_out_accuracy(model: nn.Module) -> float:
    """The share of the held-out colour patterns classified right (eval mode, no gradient), as
    davda54/sam's test loop logs it."""
    images = pattern_images()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(images.x[1600:]).argmax(1) == images.y[1600:]).float().mean())
    model.train()
    return accuracy


def _held_out_smape(model: nn.Module) -> float:
    """The sMAPE (%) of the forecasts of every series' held-out horizon, as M4's evaluation scores them."""
    x, y = forecast_windows_sampler(SERIES.series, 0, held_out=True)()
    with torch.no_grad():
        return float(smape_2_loss(model(x), y))


@lru_cache(maxsize=1)
def _patchtst_held_out() -> tuple[torch.Tensor, torch.Tensor]:
    """PatchTST's held-out windows, all of them (the original's `test` over its loader): `val_mse` and
    `val_mae` read every one, `val_loss` two batches of 256."""
    held = ett_like_windows(held_out=True)
    return held.x, held.y


@lru_cache(maxsize=1)
def _deeplab_held_out() -> Dataset:
    """DeepLab's held-out images (one set for every seed, as VOC's val split is), whole (no crop, no
    flip: train.py's eval preset at the images' own size): `val_loss` reads two batches of 100, the
    confusion matrix all of them."""
    return voc_shapes(VOC_SHAPES.held_out, 1000)


@lru_cache(maxsize=1)
def _dt_dataset() -> tuple[list, list, tuple[np.ndarray, np.ndarray]]:
    """The Decision Transformer's offline dataset (one for every seed, as a D4RL file is), its
    held-out trajectories (the `val_loss` sampler's) and the training states' mean and std."""
    train = point_reach_trajectories(POINT_REACH.episodes, 0)
    return train, point_reach_trajectories(POINT_REACH.held_out, 1000), point_reach_state_stats(train)


@lru_cache(maxsize=1)
def _electra_held_out() -> tuple[list[list[int]], torch.Tensor]:
    """The marker task's held-out rows (512, one set for every seed, as a GLUE dev set is): `val_loss`
    reads them in two batches of 256 (the eval sampler's epoch), `val_accuracy` all at once."""
    return electra_rows(512, 1000)


def _albert_held_out_batch() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The marker task's 512 held-out rows as one run_glue batch, `labels` popped: (inputs, labels)."""
    batch = albert_collate(*_electra_held_out())
    return batch, batch.pop("labels")


@lru_cache(maxsize=1)
def _ctc_chance() -> float:
    """The CTC loss of one frame distribution for every frame of every input (blank and symbol
    log-probabilities fitted by Adam on held-out batches): what a recogniser that ignores its
    input can reach."""
    draw = ctc_batch_sampler(256, 99)

    def loss_on(logits: torch.Tensor, batch: dict[str, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
        lengths = torch.div(batch["attention_mask"].sum(1) - 1, 2, rounding_mode="floor") + 1
        frames = int(lengths.max())
        log_probs = torch.log_softmax(logits, 0).expand(frames, len(labels), -1)
        return ctc_loss((log_probs, lengths), labels)

    return _one_frame_distribution_loss(SPEECH.classes, [draw() for _ in range(2)], loss_on)


@lru_cache(maxsize=1)
def _mlm_chance() -> float:
    """The entropy of the masked words' marginal (what an MLM that ignores its context can reach),
    counted over many held-out batches."""
    draw = masked_lm_sampler(256, 99)
    labels = torch.cat([draw()[1].flatten() for _ in range(8)])
    share = torch.bincount(labels[labels >= 0]).double()
    share = share[share > 0] / share.sum()
    return float(-(share * share.log()).sum())


@lru_cache(maxsize=1)
def _random_policy_shortfall() -> float:
    """The mean reward shortfall (to CartPole's cap) of a policy choosing uniformly at random, over 16 batches of episodes."""
    env, rng, rewards = CartPole(99), np.random.default_rng(99), []
    for _ in range(16):
        env.reset()
        running, alive = np.ones(env.envs, dtype=bool), np.zeros(env.envs)
        for _ in range(CARTPOLE.max_steps):
            alive += running
            running &= ~env.step(rng.integers(0, CARTPOLE.actions, env.envs))[1]
            if not running.any():
                break
        rewards.append(alive.mean())
    return OUTCOME_METRICS["reinforce"].distance(float(np.mean(rewards)))


@lru_cache(maxsize=None)
def distillation_teacher(seed: int) -> nn.Module:
    """The distillation teacher of a seed: a `KDTeacher` trained by Adam (lr 2e-3, batches of 64
    training digits, `TEACHER_STEPS` steps; its own generator, the global RNG untouched), then
    frozen: `requires_grad_(False)`, eval mode, as the tutorials load a trained teacher."""
    rows = digits("rows")
    x, y = rows.x[:1500].unsqueeze(1), rows.y[:1500]
    with torch.random.fork_rng():
        torch.manual_seed(10_000 + seed)
        teacher = KDTeacher(10)
        optimizer = torch.optim.Adam(teacher.parameters(), lr=2e-3)
        order = torch.Generator().manual_seed(10_000 + seed)
        for _ in range(TEACHER_STEPS):
            index = torch.randint(0, len(y), (64,), generator=order)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(teacher(x[index]), y[index]).backward()
            optimizer.step()
    return teacher.requires_grad_(False).eval()


def qat_epoch_boundary(model: nn.Module, step: int) -> None:
    """What train_quantization.py does after each epoch, at the top of the step that begins the
    next (every `QAT_EPOCH_STEPS`): under `inference_mode`, `model.apply(disable_observer)` once the
    ended epoch's index is ≥ `QAT_OBSERVER_EPOCHS`, `model.apply(freeze_bn_stats)` once it is ≥
    `QAT_BN_EPOCHS` (re-applied every epoch after, as the reference does)."""
    ended = step // QAT_EPOCH_STEPS - 1
    if step % QAT_EPOCH_STEPS or ended < 0:
        return
    with torch.inference_mode():
        if ended >= QAT_OBSERVER_EPOCHS:
            model.apply(torch.ao.quantization.disable_observer)
        if ended >= QAT_BN_EPOCHS:
            model.apply(torch.ao.nn.intrinsic.qat.freeze_bn_stats)


@lru_cache(maxsize=None)
def qat_float_base(seed: int) -> dict[str, torch.Tensor]:
    """The state dict of the QAT run's float model: a `QatMobileNetV2` (unfused, no observers)
    trained by torchvision's float MobileNetV2 recipe (references/classification/train.py's
    `--lr 0.045 --wd 0.00004`, SGD momentum 0.9; no schedule in so few steps) on batches of
    `QAT_BATCH` training patterns for `QAT_FLOAT_STEPS` steps (its own generator, the global RNG
    untouched), as train_quantization.py "always start[s] from a pre-trained fp32 reference model"."""
    images = pattern_images()
    x, y = images.x[:1600], images.y[:1600]
    with torch.random.fork_rng():
        torch.manual_seed(30_000 + seed)
        base = QatMobileNetV2(classes=PATTERNS.classes)
        optimizer = torch.optim.SGD(base.parameters(), lr=QAT_FLOAT_LR, momentum=0.9, weight_decay=4e-5)
        order = torch.Generator().manual_seed(30_000 + seed)
        for _ in range(QAT_FLOAT_STEPS):
            index = torch.randint(0, len(y), (QAT_BATCH,), generator=order)
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(base(x[index]), y[index]).backward()
            optimizer.step()
    return {name: value.detach().clone() for name, value in base.state_dict().items()}


@lru_cache(maxsize=None)
def lora_base(seed: int) -> dict[str, torch.Tensor]:
    """The state dict of the LoRA model's base: the `gpt` model pretrained by AdamW (lr 3e-3,
    betas (0.9, 0.95), clip 1.0, batches of 16 windows of the default corpus, `BASE_STEPS`
    steps; its own generator, the global RNG untouched), as a fine-tune loads a pretrained checkpoint."""
    tokens, vocab = char_corpus(CORPUS_CHARS, seed)
    with torch.random.fork_rng():
        torch.manual_seed(20_000 + seed)
        base = nanogpt_init(TinyGPT(vocab=vocab, context=CONTEXT, width=32, heads=4, layers=2))
        optimizer = torch.optim.AdamW(base.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)
        draw = lm_batch_sampler(tokens[: int(0.9 * len(tokens))], 16, CONTEXT, 20_000 + seed)
        for _ in range(BASE_STEPS):
            x, y = draw()
            optimizer.zero_grad(set_to_none=True)
            token_cross_entropy(base(x), y).backward()
            nn.utils.clip_grad_norm_(base.parameters(), 1.0)
            optimizer.step()
    return {name: value.detach().clone() for name, value in base.state_dict().items()}


@lru_cache(maxsize=None)
def _uniform_student_loss(seed: int) -> float:
    """The distillation loss, on the training digits, of a student whose logits are all equal."""
    rows = digits("rows")
    x, y = rows.x[:1500].unsqueeze(1), rows.y[:1500]
    teacher = distillation_teacher(seed)
    with torch.no_grad():
        return float(distillation_loss(torch.zeros(len(y), 10), y, teacher(x)))


def _directions(seed: int) -> torch.Tensor:
    """16 unit directions in the plane for the sliced Wasserstein distance, a seed's own."""
    return torch.nn.functional.normalize(torch.randn(16, 2, generator=torch.Generator().manual_seed(seed)), dim=1)


def _point_mass_distance(seed: int) -> float:
    """The sliced Wasserstein distance to the held-out ring of a generator that emits the training data's mean."""
    data, held_out = ring_points(STEPS, N_CRITIC * RING.batch, seed), ring_points(1, RING.held_out, 1000 + seed)
    return sliced_wasserstein(data.mean(0).expand_as(held_out), held_out, _directions(seed))


def _image_directions(seed: int, dims: int = 64, count: int = 64) -> torch.Tensor:
    """`count` unit directions in the digits' 64 pixel dimensions for the SN-GAN's sliced
    Wasserstein distance, a seed's own."""
    return torch.nn.functional.normalize(torch.randn(count, dims, generator=torch.Generator().manual_seed(seed)), dim=1)


def _mean_image_distance(train: torch.Tensor, held_out: torch.Tensor, seed: int) -> float:
    """The sliced Wasserstein distance to the held-out digits of a generator that emits the training digits' mean image."""
    flat = held_out.flatten(1)
    return sliced_wasserstein(train.flatten(1).mean(0).expand_as(flat), flat, _image_directions(seed))


@lru_cache(maxsize=None)  # 24 twins; the catalogue visits them family by family
def _twin_losses(arch: str, seed: int) -> tuple[float, ...]:
    """What the truth reads of the fault-free twin (the architecture's healthy recipe, same seed,
    unrecorded): its losses, or its outcome metric's distances to the best (`_judged`)."""
    return tuple(_judged(arch, _train(None, "healthy", arch, seed, {})[0]))


@lru_cache(maxsize=None)
def _untrained_level(arch: str, seed: int) -> float:
    """Where a run that learned nothing stands: the mean of the first 10 judged values of the same
    run with every lr held at 0 (same init, same batches, no update; SparseAdam refuses to be built
    at lr 0, so the schedule holds it there). A run's own first 10 losses cannot say it
    when its lr blows the loss up from step 1 (round 17: bilstm_crf at lr ×100, 18 → 785 by step
    3, the first-10 mean 438 above everything that followed)."""
    return sum(_judged(arch, _train(None, "healthy", arch, seed, {}, untrained=True)[0])[:10]) / 10


def _ddp_wrn_epoch_hooks(model: nn.Module, optimizer: torch.optim.Optimizer, loader: WRNEpochLoader, seed: int):
    """(before_step, eval_metrics) of the DDP Wide ResNet's epoch boundaries, as train.py's main
    loop has them: each epoch's `evaluate` (loss and top-1 over the held-out patterns; `val_loss`,
    the loop's, is the same loss over the same set), then `lr_scheduler.step(loss)` of a
    `ReduceLROnPlateau` (`DDP_WRN_PLATEAU`; the new lr copied to each group's `base_lr`, from which
    the loop's constant schedule sets it); at `DDP_WRN_RESUME_STEP` the checkpoint saved and resumed
    (`DDP_WRN_RESUME_STEP`): `torch.save({"model": model.module.state_dict(), "optimizer": ...,
    "lr_scheduler": ..., "epoch": ..., "args": ...})`, `torch.load(..., weights_only=False)`,
    `model.module.load_state_dict`, `optimizer.load_state_dict` (its momentum buffers become new
    tensors, its param groups new dicts), `lr_scheduler.load_state_dict`, the epoch resumed from
    `checkpoint["epoch"] + 1` (the sampler's `set_epoch` continues from it)."""
    import tempfile

    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **DDP_WRN_PLATEAU)
    held_x, held_y = pattern_images().x[1600:], pattern_images().y[1600:]

    def eval_metrics() -> dict[str, float]:
        loss, top1 = wrn_evaluate(model, held_x, held_y)
        plateau.step(loss)
        for group in optimizer.param_groups:
            group["base_lr"] = group["lr"]
        return {"val_top1": top1}

    def before_step(step: int) -> None:
        if step != DDP_WRN_RESUME_STEP:
            return
        epoch = step // DDP_WRN_EPOCH_STEPS - 1
        with tempfile.TemporaryDirectory(prefix="ddp_wrn-ckpt-") as tmp:
            path = Path(tmp) / "checkpoint.pth"
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                        "lr_scheduler": plateau.state_dict(), "epoch": epoch,
                        "args": {"lr": DDP_WRN_LR, "batch_size": DDP_WRN_BATCH, "seed": seed}}, path)
            checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        model.module.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        plateau.load_state_dict(checkpoint["lr_scheduler"])
        loader.start(checkpoint["epoch"] + 1)  # args.start_epoch: a fresh epoch iterator, set_epoch(3)

    return before_step, eval_metrics


def _swa_gc_hooks(model: nn.Module, optimizer: torch.optim.Optimizer, swa_lr: float):
    """(swa_model, before_eval, eval_metrics) of the `torch.optim.swa_utils` docstring's recipe:
    `swa_model = AveragedModel(model)` (a deep copy, built before the recorder is, so none of its
    hooks), `CosineAnnealingLR(optimizer, T_max=SWA_GC_EPOCHS)` and
    `SWALR(optimizer, swa_lr=swa_lr, anneal_epochs=SWA_GC_ANNEAL_EPOCHS, anneal_strategy="cos")`
    both built up front; after each epoch (`before_eval` at the top of every `SWA_GC_EPOCH_STEPS`-th
    step, before that step's eval): `if epoch > SWA_GC_START: swa_model.update_parameters(model);
    swa_scheduler.step() else: scheduler.step()`, the new lr copied to each group's `base_lr`
    (from which the loop's constant schedule sets it). Each eval: `swa_gc_top1` (`val_top1`: the
    SWA model's after `update_bn` over the training loader once it has averaged a model, the
    model's own before)."""
    from torch.optim.swa_utils import SWALR, AveragedModel

    swa_model = AveragedModel(model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=SWA_GC_EPOCHS)
    swa_scheduler = SWALR(optimizer, swa_lr=swa_lr, anneal_epochs=SWA_GC_ANNEAL_EPOCHS, anneal_strategy="cos")
    images = pattern_images()
    train = torch.utils.data.TensorDataset(images.x[:1600], images.y[:1600])
    loader = torch.utils.data.DataLoader(train, batch_size=SWA_GC_BATCH)
    held_x, held_y = images.x[1600:], images.y[1600:]

    def before_eval(step: int) -> None:
        if step == 0 or step % SWA_GC_EPOCH_STEPS:
            return
        epoch = step // SWA_GC_EPOCH_STEPS - 1
        if epoch > SWA_GC_START:
            swa_model.update_parameters(model)
            swa_scheduler.step()
        else:
            scheduler.step()
        for group in optimizer.param_groups:
            group["base_lr"] = group["lr"]

    def eval_metrics() -> dict[str, float]:
        return {"val_top1": swa_gc_top1(model, swa_model, loader, held_x, held_y)}

    return swa_model, before_eval, eval_metrics


def _dino_hooks(model: nn.Module, optimizer: torch.optim.Optimizer):
    """(teacher, loss_fn, before_step, after_step) of main_dino.py's `train_dino` /
    `train_one_epoch` around the plain loop: the teacher (`dino_teacher`: the student's weights,
    requires_grad False, built before the recorder is, so it records nothing of it); `DINOLoss(out_dim,
    2 + local_crops_number, 0.04, 0.07, warmup_teacher_temp_epochs, epochs)` called with the step's
    epoch; `before_step(step)` sets each regularised group's weight decay to `wd_schedule[step]` (the
    groups get_params_groups would call regularised: no bias, nothing 1-D; the lr comes from the
    loop's `dino_cosine` factor) and remembers the step; a step pre-hook on the optimizer, registered
    before the recorder's, runs `clip_gradients(student, 3.0)` then
    `cancel_gradients_last_layer(epoch, student, 1)` (main_dino.py's order, before
    `optimizer.step()`); `after_step()` the EMA update at `momentum_schedule[step]`."""
    teacher = dino_teacher(model)
    dino_loss = DINOLoss(DINO_OUT_DIM, 2 + DINO_LOCAL_CROPS, DINO_TEACHER_TEMP[0], DINO_TEACHER_TEMP[1],
                         DINO_WARMUP_TEACHER_TEMP_EPOCHS, DINO_EPOCHS)
    wd_schedule = dino_cosine_scheduler(*DINO_WEIGHT_DECAY, DINO_EPOCHS, DINO_EPOCH_STEPS)
    momentum_schedule = dino_cosine_scheduler(DINO_MOMENTUM_TEACHER, 1, DINO_EPOCHS, DINO_EPOCH_STEPS)
    names = {id(p): n for n, p in model.named_parameters()}
    regularised = [g for g in optimizer.param_groups
                   if all(not names[id(p)].endswith(".bias") and p.dim() > 1 for p in g["params"])]
    it = [0]

    def before_step(step: int) -> None:
        it[0] = step
        for group in regularised:
            group["weight_decay"] = float(wd_schedule[step])

    def clip_and_cancel(*_) -> None:
        dino_clip_gradients(model, DINO_CLIP)
        dino_cancel_gradients_last_layer(it[0] // DINO_EPOCH_STEPS, model, DINO_FREEZE_LAST_LAYER)

    optimizer.register_step_pre_hook(clip_and_cancel)

    def loss_fn(student_output: torch.Tensor, _targets, teacher_output: torch.Tensor) -> torch.Tensor:
        return dino_loss(student_output, teacher_output, it[0] // DINO_EPOCH_STEPS)

    def after_step() -> None:
        dino_ema_update(model, teacher, float(momentum_schedule[it[0]]))

    return teacher, loss_fn, before_step, after_step


def _train(run_dir: Path | None, family: str, arch: str, seed: int, recorder_options: dict,
           untrained: bool = False):
    """Trains one scenario (unrecorded where `run_dir` is None); `untrained`: every lr held at 0
    (`_untrained_level`)."""
    if arch == "ddp_wrn" and not torch.distributed.is_initialized():
        # torchvision's init_distributed_mode, then the run, then destroy_process_group (even on error).
        with gloo_process_group():
            return _train(run_dir, family, arch, seed, recorder_options, untrained)
    spec = FIELD_FAMILIES[family]
    recipe = RECIPES[arch]
    rng = random.Random(f"{family}/{arch}/{seed}")
    t0 = rng.randint(*T0_RANGE)
    factor = {"lr_spike": rng.choice((30.0, 100.0, 300.0, 1000.0, 3000.0)),
              "weight_scale": rng.choice((100.0, 200.0, 300.0))}.get(family, 1.0)
    options = {"accumulation": recipe.accumulation, "bf16": recipe.bf16, "warmup": recipe.warmup, **spec.recipe}
    torch.manual_seed(seed)
    draw, eval_draw, classes, chance = _data(arch, recipe, seed, options["accumulation"])
    model = build_field_model(arch, classes)
    if arch == "qat":  # train_quantization.py: the pretrained float model, then fuse_model / qconfig / prepare_qat
        model = QatMobileNetV2(classes=classes)
        model.load_state_dict(qat_float_base(seed))
        model = qat_prepare(model)
    if arch == "lora":  # loralib's recipe: the pretrained checkpoint first, strict=False (no LoRA keys in it)
        model.load_state_dict(lora_base(seed), strict=False)
    if arch == "ddp_wrn":  # train.py: model = DistributedDataParallel(model); model_without_ddp = model.module
        model = ddp_wrap(model)
    lr = recipe.lr * spec.lr_factor
    if arch in NETWORKS:  # one Adam per network, each with its blocks' groups
        groups = _param_groups(model, recipe, lr)
        optimizer = tuple(torch.optim.Adam([g for g in groups if g["layer"] == net or g["layer"].startswith(net + ".")],
                                           lr=lr, betas=recipe.betas) for net in NETWORKS[arch])
    elif arch == "muon_gpt":  # modded-nanogpt's two optimizers: (Adam, Muon)
        optimizer = muon_gpt_optimizers(model, lr)
    elif arch == "deeplab":  # train.py's params_to_optimize: the aux classifier at lr x10
        optimizer = OPTIMIZERS[recipe.optimizer](deeplab_params_to_optimize(model, lr, recipe.weight_decay), lr, recipe)
    elif arch == "electra_ft":  # the fine-tuning scripts' layer-wise lr decay groups
        optimizer = OPTIMIZERS[recipe.optimizer](electra_param_groups_lrd(model, lr, recipe.weight_decay,
                                                                          ELECTRA_LAYER_DECAY), lr, recipe)
    else:
        optimizer = OPTIMIZERS[recipe.optimizer](_param_groups(model, recipe, lr), lr, recipe)
    after_step = model.normalize_entities if arch == "transe" else None
    if recipe.ema is not None:  # torchvision's and diffusers' EMA: averaged weights, updated after each step
        ema = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(
            recipe.ema))
        after_step = lambda: ema.update_parameters(model)  # noqa: E731
    if arch == "dit":  # DiT's train.py: a deepcopy, requires_grad False, synced (decay 0), eval mode; update_ema after each step
        ema = copy.deepcopy(model).requires_grad_(False)
        dit_update_ema(ema, model, decay=0)
        ema.eval()
        after_step = lambda: dit_update_ema(ema, model, DIT_EMA_DECAY)  # noqa: E731
    if arch == "sae":  # openai/sparse_autoencoder's train.py: the parallel gradient removed before each step, unit norm after
        for each in optimizer if isinstance(optimizer, tuple) else (optimizer,):
            each.register_step_pre_hook(lambda *_: sae_unit_norm_decoder_grad_adjustment_(model))
        after_step = lambda: sae_unit_norm_decoder_(model)  # noqa: E731
    if arch == "link_pred":  # gnn.py's train(): the encoder's and the predictor's clip_grad_norm_ 1.0, then step
        optimizer.register_step_pre_hook(lambda *_: link_pred_clip_(model, LINK_PRED_CLIP))
    if arch == "efficientnet":  # timm's train.py: model_ema.update(model) after each optimizer step
        ema = ModelEmaV2(model, MODEL_EMA_DECAY)
        after_step = lambda: ema.update(model)  # noqa: E731
    eval_metrics = (lambda: EVAL_METRICS[arch](model)) if arch in EVAL_METRICS else None
    if arch == "timm_mixup":  # timm's train.py: model_ema.update after each step; validate() on the model and the EMA
        ema = ModelEmaV2(model, TIMM_EMA_DECAY)
        after_step = lambda: ema.update(model)  # noqa: E731
        eval_metrics = lambda: {**EVAL_METRICS[arch](model), "val_top1_ema": timm_top1(  # noqa: E731
            ema.module, pattern_images().x[1600:], pattern_images().y[1600:])}
    before_eval = None
    if arch == "qat":  # train_quantization.py, after each epoch: observers off, then BN statistics frozen
        before_eval = lambda step: qat_epoch_boundary(model, step)  # noqa: E731
    if recipe.schedule == "one_cycle":  # OneCycleLR's cycle_momentum, stepped with the scheduler
        after_step = _one_cycle_momentum(optimizer, options["warmup"], STEPS)
    before_step = None
    if arch == "ddp_wrn":
        before_step, eval_metrics = _ddp_wrn_epoch_hooks(model, optimizer, draw, seed)
    if arch == "swa_gc":  # swa_utils' docstring: AveragedModel, CosineAnnealingLR then SWALR, update_bn
        swa_model, before_eval, eval_metrics = _swa_gc_hooks(model, optimizer, SWA_GC_SWA_LR * spec.lr_factor)
    if arch == "gradual_pruning":  # Zhu & Gupta's AGP by torch.nn.utils.prune, every AGP_EVERY steps, in the loop
        reached = [0.0]
        before_step = lambda step: agp_prune(model, step, reached)  # noqa: E731
    teacher = distillation_teacher(seed) if arch == "distil" else None
    loss_fn = LOSSES.get(arch, token_cross_entropy)
    if arch == "dino":  # main_dino.py: the EMA teacher, DINOLoss, the wd schedule, clip_gradients, last layer frozen
        teacher, loss_fn, before_step, after_step = _dino_hooks(model, optimizer)
        eval_metrics = lambda: EVAL_METRICS[arch](teacher)  # noqa: E731
    if arch == "byol":  # the target network: projections in the loss, an EMA of the online weights after each step
        teacher = byol_target(model)
        after_step = lambda: byol_ema_update(teacher, model, BYOL_TAU)  # noqa: E731
    picked = _draws(model, rng)
    fault = spec.fault(t0=t0, factor=factor, classes=classes, **picked)
    schedule = _schedule(Recipe(**{**recipe.__dict__, "warmup": options["warmup"]}), STEPS)
    if untrained:
        schedule = lambda step: 0.0  # noqa: E731
    # What a user would log; never the scenario or the fault (the analyzer must not see the answer).
    config = {"arch": arch, "seed": seed, "lr": lr, "batch_size": recipe.batch, "steps": STEPS,
              "accumulation": options["accumulation"], "clip": recipe.clip, "bf16": options["bf16"]}
    if arch == "detr":  # main.py's args: the backbone's own lr
        config["lr_backbone"] = lr * DETR_LR_BACKBONE_SCALE
    if arch == "dino":  # main_dino.py's args: its per-parameter clip, not the loop's global one
        config["clip_grad"] = DINO_CLIP
    scaler = torch.amp.GradScaler("cpu") if recipe.fp16 and not options["bf16"] else None
    if scaler is not None:
        config["fp16"] = True
    micro = max(1, recipe.batch * recipe.accumulation // options["accumulation"])
    if arch == "t5":
        outcome = train_hf_trainer(run_dir, model, optimizer, draw, eval_draw, t5_collate, steps=STEPS, lr_at=schedule,
                                   fault=fault, micro_batch=micro, accumulation=options["accumulation"],
                                   clip=recipe.clip, bf16=options["bf16"], seed=seed, config=config,
                                   recorder_options=recorder_options)
    elif arch == "reinforce":
        outcome = train_policy_gradient(run_dir, model, optimizer, draw, steps=STEPS, lr_at=schedule, seed=seed,
                                        max_steps=CARTPOLE.max_steps, fault=fault,
                                        accumulation=options["accumulation"], clip=recipe.clip, bf16=options["bf16"],
                                        config=config, recorder_options=recorder_options)
    elif arch == "ppo":
        outcome = train_ppo(run_dir, model, optimizer, draw, steps=STEPS, lr_at=schedule, seed=seed,
                            max_steps=CARTPOLE.max_steps, fault=fault, accumulation=options["accumulation"],
                            clip=recipe.clip, bf16=options["bf16"], num_steps=PPO_ROLLOUT, config=config,
                            recorder_options=recorder_options)
    elif arch == "dqn":
        outcome = train_dqn(run_dir, model, optimizer, draw, steps=STEPS, lr_at=schedule, seed=seed,
                            max_steps=CARTPOLE.max_steps, observations=CARTPOLE.observations, fault=fault,
                            accumulation=options["accumulation"], clip=recipe.clip, bf16=options["bf16"],
                            batch=recipe.batch, gradient_steps=DQN_GRADIENT_STEPS, target_every=DQN_TARGET_EVERY,
                            config=config, recorder_options=recorder_options)
    elif arch == "sac":
        outcome = train_sac(run_dir, model, optimizer, draw, steps=STEPS, lr_at=schedule, seed=seed,
                            max_steps=POINT_MASS.max_steps, observations=POINT_MASS.observations,
                            actions=POINT_MASS.actions, fault=fault, accumulation=options["accumulation"],
                            bf16=options["bf16"], batch=recipe.batch, start_steps=SAC_START_STEPS, config=config,
                            recorder_options=recorder_options)
    elif arch == "wgan_gp":
        outcome = train_lightning_wgan(run_dir, model, optimizer, draw, eval_draw, directions=_directions(seed),
                                       fault=fault, lr_at=schedule, n_critic=N_CRITIC,
                                       batch=recipe.batch, noise=RING.noise, penalty=GRADIENT_PENALTY,
                                       bf16=options["bf16"], seed=seed, config=config,
                                       recorder_options=recorder_options)
    elif arch == "sngan":
        outcome = train_sngan(run_dir, model, optimizer, draw, eval_draw, steps=STEPS, lr_at=schedule,
                              directions=_image_directions(seed), fault=fault, n_dis=SNGAN_N_DIS,
                              accumulation=options["accumulation"], bf16=options["bf16"], seed=seed, config=config,
                              recorder_options=recorder_options)
    elif arch == "muon_gpt":
        outcome = train_muon_gpt(run_dir, model, optimizer, draw, eval_draw, steps=STEPS, lr_at=schedule,
                                 momentum_at=lambda step: muon_gpt_momentum(step, MUON_GPT_MOMENTUM_WARMUP),
                                 fault=fault, accumulation=options["accumulation"], bf16=options["bf16"],
                                 eval_every=EVAL_EVERY.get(arch, 25), config=config,
                                 recorder_options=recorder_options)
    elif arch == "pix2pix":
        outcome = train_pix2pix(run_dir, model, optimizer, draw, steps=STEPS, lr_at=schedule, fault=fault,
                                bf16=options["bf16"], eval_metrics=lambda: EVAL_METRICS[arch](model), config=config,
                                recorder_options=recorder_options)
    elif arch == "sam":
        outcome = train_sam(run_dir, model, optimizer, draw, steps=STEPS, lr_at=schedule, loss_fn=LOSSES[arch],
                            fault=fault, accumulation=options["accumulation"], bf16=options["bf16"],
                            eval_draw=eval_draw, config=config, recorder_options=recorder_options,
                            eval_metrics=lambda: EVAL_METRICS[arch](model))
    elif arch == "deepar":  # GluonTS's DeepAREstimator.train: lightning.Trainer(gradient_clip_val=10).fit
        outcome = train_lightning(run_dir, model, optimizer, draw, eval_draw, steps=STEPS, lr_at=schedule, fault=fault,
                                  loss_fn=deepar_loss, accumulation=options["accumulation"], clip=recipe.clip,
                                  bf16=options["bf16"], eval_every=EVAL_EVERY[arch], config=config,
                                  recorder_options=recorder_options, eval_metrics=lambda: EVAL_METRICS[arch](model),
                                  plateau=DEEPAR_PLATEAU)
    elif arch == "clip":
        outcome = train_lightning(run_dir, model, optimizer, draw, eval_draw, steps=STEPS, lr_at=schedule, fault=fault,
                                  loss_fn=clip_loss, accumulation=options["accumulation"], clip=recipe.clip,
                                  bf16=options["bf16"], after_step=model.clamp_logit_scale, config=config,
                                  recorder_options=recorder_options)
    else:
        outcome = train_field(run_dir, model, optimizer, draw, steps=STEPS, lr_at=schedule, fault=fault,
                              accumulation=options["accumulation"], clip=recipe.clip, bf16=options["bf16"],
                              eval_draw=eval_draw, eval_every=EVAL_EVERY.get(arch, 25),
                              loss_fn=loss_fn, config=config,
                              recorder_options=recorder_options, after_step=after_step,
                              mix=mixup_cutmix(classes, seed) if arch == "swin" else
                              mixup_cutmix(classes, seed, off_from=None if TIMM_MIXUP_OFF is None else
                                           TIMM_MIXUP_OFF * options["accumulation"])
                              if arch == "timm_mixup" else None,
                              teacher=teacher, scaler=scaler,
                              eval_metrics=eval_metrics, before_step=before_step, before_eval=before_eval,
                              eval_start=QAT_EPOCH_STEPS if arch == "qat" else
                              DDP_WRN_EPOCH_STEPS if arch == "ddp_wrn" else 0,
                              labels_to_model=arch in ("capsnet", "dit"))
    # Parameters outside every unit's module (the classifier's `pos`) sit before the first block.
    units = [*(n for n, _ in model.named_parameters()
               if not any(n.startswith(u + ".") for u in model.units) and n not in getattr(model, "loose", ())),
             *model.units]
    return outcome, t0, factor, picked, units, chance


def field_run(run_dir: Path, family: str, arch: str, seed: int, recorder_options: dict) -> dict:
    """Trains one field scenario into `run_dir`; returns the truth's fields (see `Expected`)."""
    spec = FIELD_FAMILIES[family]
    outcome, t0, factor, picked, units, chance = _train(run_dir, family, arch, seed, recorder_options)
    losses = _judged(arch, outcome)
    twin = list(_twin_losses(arch, seed)) if spec.outcome != "healthy" else []
    untrained = _untrained_level(arch, seed) if spec.outcome == "from_start" else None
    verdict, onset = _verdict(spec.outcome, losses, twin, t0, chance, untrained)
    shrugged = verdict == "healthy" and spec.outcome != "healthy"
    culprit = picked[spec.culprit] if spec.culprit and not shrugged else None
    alternatives = []
    if family == "detach" and culprit:
        # wte, Mamba's embedding: still fed by the tied head
        alternatives = [u for u in units[: units.index(culprit)] if u not in ("wte", *TIED.get(arch, ()))]
    labels = [] if shrugged else list(spec.labels)
    if verdict == "diverged" and "diverged" not in labels:
        labels.insert(0, "diverged")
    notes = spec.notes.format(t0=t0, culprit=picked.get(spec.culprit or "", ""), factor=factor)
    if shrugged:
        notes += "; training did not break (against its fault-free twin): the truth says healthy"
    if arch in OUTCOME_METRICS:
        name = OUTCOME_METRICS[arch].name
        notes += "; judged on the loss less its floor (the data's entropy)" if name == "loss" else \
            "; judged on val_loss less its floor (an oracle GP's NLL), not the loss" if arch == "neural_process" else \
            f"; judged on {name}, not the loss"
    tolerated = [label for label in (*spec.labels, *([spec.cause] if spec.cause else [])) if label != "diverged"] \
        if shrugged else []
    return {"verdict": verdict, "onset_step": onset, "culprit": culprit, "culprit_alternatives": alternatives,
            "labels": labels, "tolerated": tolerated, "first_nonfinite_loss_step": outcome.first_nonfinite_loss_step,
            "notes": notes,
            "learned": all(map(math.isfinite, losses)) and sum(losses[-10:]) < 0.8 * sum(losses[:10])}


def _verdict(outcome: str, losses: list[float], twin: list[float], t0: int, chance: float,
             untrained: float | None) -> tuple[str, int | None]:
    """(verdict, onset step) from what the loop saw, against the fault-free twin's losses; a wrong
    setting from step 0 also against `untrained` (`_untrained_level`)."""
    if outcome == "healthy":
        return "healthy", None
    if outcome in ("diverged", "diverged_or_stalled") and broke_against(losses, twin, t0):
        return "diverged", t0
    if outcome in ("stalled", "diverged_or_stalled") and stalled_against(losses, twin, t0):
        return "not_learning", None
    if outcome != "from_start":
        return "healthy", None
    # A wrong setting from step 0: the run ran away, stayed flat, or learned anyway.
    # Ran away: rose ×1.2 and never got back below where it began, or ended ×1.2 worse than learning
    # nothing at all (the same margin). The rise is read on 10-step means, as the start and the end
    # are: a policy that never moves wanders by one episode's luck (round 19, missing_step-sac-s1:
    # return shortfall 17.75 over the first 10, one episode at 21.9, its worst 10 at 19.5).
    if not all(math.isfinite(v) for v in losses):
        return "diverged", None  # before the means: a run that overflowed early has fewer than 10 losses
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    rise = max(sum(losses[i:i + 10]) / 10 for i in range(len(losses) - 9))
    if (rise >= 1.2 * first and last >= first) or last >= 1.2 * untrained:
        return "diverged", None
    if last >= 0.9 * first or last >= 0.9 * chance or last >= 1.25 * sum(twin[-10:]) / 10:
        return "not_learning", None
    return "healthy", None
