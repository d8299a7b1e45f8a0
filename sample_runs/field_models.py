"""Models that look like the field's, small enough to train in seconds on a CPU.

- `gpt`: `models.TinyGPT` (nanoGPT's causal LM: token + position embeddings, pre-LayerNorm
  blocks of causal self-attention with biases and a GELU MLP, a head tied to the token
  embedding) with nanoGPT's init (`nanogpt_init`).
- `EncoderClassifier`: `torch.nn.TransformerEncoder` over the 8 rows of a digit, mean-pooled.
- `ResNet`: a small residual CNN with BatchNorm (He et al.'s basic block) on 8×8 digits.
- `GRULM`: pytorch/examples' word-language-model shape (embedding → GRU → linear) on characters.
- `ViT`: a timm-style vision transformer on 8×8 digits (4×4 patches by a strided conv, a class
  token, learned positions, pre-norm blocks with fused qkv attention and a GELU MLP, the class
  token's features to a linear head).
- `TiedLSTMLM`: pytorch/examples' word_language_model with `--tied`: embedding → dropout →
  2-layer LSTM → dropout → decoder whose weight is the embedding's.

- `Mixer`: an MLP-Mixer (Tolstikhin et al. 2021) on 4×4 patches of the digits: token-mixing and
  channel-mixing MLPs behind LayerNorms, mean pooling, a linear head.
- `TCN`: a temporal convolutional net (Bai et al. 2018) over the 8 rows of a digit as a sequence:
  dilated `Conv1d` residual blocks with ReLU and dropout, no normalisation, mean pooling.

- `Llama`: Meta's LLaMA decoder (`llama/model.py` layout and names) with llama2.c's init: RMSNorm
  before attention and MLP, rotary position embeddings (real cos/sin, rotate-half), a SwiGLU MLP,
  no biases anywhere, an output head untied from the token embedding.
- `ConvAutoencoder`: a conv encoder (strided `Conv2d`) and a `ConvTranspose2d` decoder with a
  sigmoid output, no normalisation, trained to reconstruct the digit (MSE): a regression loss.
- `RecSys`: a DLRM-style click model: `nn.Embedding` tables over sparse categorical IDs, an
  `nn.EmbeddingBag` (mean) over a bag of recently seen item IDs, a bottom MLP on dense features,
  their concatenation through a top MLP to one logit (BCEWithLogits); its batch is a dict.

- `MoELM`: a Mixtral/Switch-style sparse mixture-of-experts decoder on characters: pre-LayerNorm
  blocks of causal self-attention and a token-routed MoE feed-forward (a bias-free router Linear,
  top-2 of 4 GELU expert MLPs, the two gates renormalised; an expert that gets no token in a
  step is not called), a Switch load-balancing auxiliary loss (×0.01) returned with the logits.
- `VAE`: pytorch/examples' variational autoencoder on the binarised 8×8 digits (fc1 → fc21 mu, fc22 logvar;
  the reparameterisation trick; fc3 → fc4 pixel logits), loss = BCE (summed over pixels) + KL,
  per sample.

- `UNet`: a small U-Net (milesial/Pytorch-UNet's layout: `DoubleConv` = (conv → BatchNorm → ReLU) ×2,
  `Down` = max-pool + DoubleConv, `Up` = `ConvTranspose2d` ×2 upsampling, concatenation with the
  encoder's skip, DoubleConv; a 1×1 `OutConv`) segmenting generated 16×16 shapes: per-pixel
  cross-entropy over (B, classes, H, W) logits against int64 masks.
- `Seq2Seq`: the PyTorch translation tutorial's `Seq2SeqTransformer`: source and target token
  embeddings scaled by sqrt(d), sinusoidal positions, `nn.Transformer` (sequence-first; encoder,
  decoder with cross-attention), a `generator` Linear; a dict batch (`input_ids`, `attention_mask`,
  `decoder_input_ids`) with key-padding masks and a causal target mask (teacher forcing); labels
  padded with -100, cross-entropy with `ignore_index` and label smoothing 0.1.
- `GCN`: Kipf & Welling's graph convolution written by hand (symmetric normalisation with self-loops,
  messages gathered by `edge_index` and summed by `index_add_`), 3 layers with ReLU and dropout,
  full-batch node classification on a stochastic block model; nodes off the train mask carry the
  label -100 (the loss over `out[train_mask]`).
- `SimCLR`: a small BatchNorm CNN encoder and a projection head (Linear → ReLU → Linear) on two
  augmented views of each digit (concatenated, 2B images); `info_nce_loss` is NT-Xent on the
  L2-normalised projections with temperature 0.2 (the pair of each view is its positive, itself
  masked out); no labels.

- `GaussianDiffusion`: a DDPM (Ho et al. 2020; lucidrains' `GaussianDiffusion` wrapping a denoiser,
  `model`): the linear β schedule over 1000 steps as buffers, and in `forward(x0)` a random t per
  sample, noise ε and x_t = √ᾱ_t x0 + √(1−ᾱ_t) ε; the denoiser (`Denoiser`, a small DDPM U-Net on
  the 8×8 digits scaled to [−1, 1]: a sinusoidal timestep embedding through an MLP, GroupNorm/SiLU
  residual blocks that add the time embedding, a strided-conv downsample, nearest upsample and a
  skip by concatenation) predicts ε; returns (prediction, ε) for `ddpm_loss`, their MSE. Trained
  with an EMA copy of the weights (`field.RECIPES`' `ema`) updated after each optimizer step.
- `CTCRecognizer`: a DeepSpeech2-style recogniser over generated audio-like feature frames
  (`data.ctc_batch_sampler`): a strided `Conv1d` front-end (BatchNorm, Hardtanh(0, 20)), a 2-layer
  bidirectional LSTM, a Linear to the symbols and the blank (0), log_softmax as (T, N, C) and the
  frames' lengths after the stride; `ctc_loss` is `nn.CTCLoss(blank=0, zero_infinity=True)` with
  Hugging Face's wav2vec2 handling of labels padded with -100 (target lengths from the mask).
- `ConformerCTC`, `ConformerBlock`, `ConformerConvModule`, `RelativeSelfAttention`,
  `conformer_ctc_loss`: Gulati et al.'s Conformer encoder as sooftware/conformer writes it (2-D
  conv subsampling ×4, a Linear projection, blocks of a half-step macaron FFN, relative-position
  multi-head self-attention, the convolution module (pointwise conv → GLU → depthwise conv →
  BatchNorm → Swish → pointwise conv), a second half-step FFN and a LayerNorm) with a CTC head
  (bias-free Linear → log_softmax, `nn.CTCLoss(blank=0)`) over `data.MEL_SPEECH`'s frames, small.

- `Mamba`: a selective state-space character LM (johnma2006/mamba-minimal's layout and names):
  embedding, residual blocks of RMSNorm → in_proj to (x, z) → depthwise causal Conv1d → SiLU →
  input-dependent Δ, B, C (x_proj; dt_proj and softplus for Δ), A = −exp(A_log), a D skip, a
  sequential selective scan, y · SiLU(z) → out_proj; norm_f and a head tied to the embedding.
- `FTTransformer`: Gorishniy et al.'s FT-Transformer (rtdl's layout) classifying rows of a
  generated table (`data.table_data`): per-feature linear tokens of the numeric columns,
  embeddings of the categorical ones, a [CLS] token, pre-norm blocks (no attention LayerNorm in
  the first, ReGLU feed-forward, attention dropout), a LayerNorm → ReLU → Linear head on [CLS];
  a dict batch `x_num` (float) and `x_cat` (int64).
- `ConvNeXt`: facebookresearch/ConvNeXt's classifier, small, on generated 16×16 colour patterns
  (`data.pattern_images`): patchify stem, blocks of depthwise 7×7 conv → channels-last LayerNorm
  → Linear ×4 → GELU → Linear with layer scale γ (1e-6) and stochastic depth, LayerNorm +
  strided-conv downsampling; trained with label smoothing 0.1.

- `BertMLM`: Hugging Face's `BertForMaskedLM`, built from a small `BertConfig` (no download;
  post-LN encoder, GELU, dropout 0.1, the MLM head's decoder tied to the word embeddings, HF's
  N(0, 0.02²) init), masked-LM on word-level sentences of the grammar (`data.masked_lm_sampler`:
  a dict batch of `input_ids` padded per batch and an `attention_mask`, labels -100 off the
  masked positions, 80/10/10 masking); `forward(batch)` is `model(**batch).logits`.
- `Siren`: Sitzmann et al.'s SIREN (vsitzmann/siren's `Siren`, `outermost_linear=True`): sine
  layers sin(ω0 (W x + b)) with ω0 = 30, the first layer's weights uniform in ±1/in, the
  others' in ±sqrt(6/in)/ω0, a linear output; fits a generated image from its pixel
  coordinates in [−1, 1]² (MSE).
- `PointNet`: Qi et al.'s PointNet classifier (fxia22/pointnet.pytorch's layout): an input T-net
  (shared per-point MLP as `Conv1d` + `BatchNorm1d`, max-pool, an MLP to a 3×3 transform
  initialised to the identity), the transform applied to the points, the shared per-point MLP,
  a symmetric max-pool over points, a BatchNorm/dropout MLP head; returns the logits and the
  transform, whose orthogonality regulariser is added to the cross-entropy (`pointnet_loss`).
- `t5_sorter`: Hugging Face's `T5ForConditionalGeneration` from a small `T5Config` (no download:
  RMS-norm pre-norm blocks, relative position bias in each stack's first self-attention, no
  absolute positions, ReLU feed-forward, dropout 0.1, the LM head tied to the shared
  embeddings and scaled by d_model^-0.5) sorting token sequences (`data.t5_rows`); its loss is
  the model's own (`labels` in the batch, decoder inputs shifted from them by the model).
  Trained by Hugging Face's `Trainer` (`framework_loops.train_hf_trainer`).
- `CLIP`: a CLIP-style two-tower model: a conv image encoder and a Transformer text encoder
  (token and learned position embeddings, pre-LN, masked mean over the caption), each projected
  without bias to a shared space and L2-normalised, a learnable `logit_scale` initialised to
  ln(1/0.07) and clamped to ln(100) after each step as open_clip does; symmetric cross-entropy
  over the batch's image-caption similarities (`clip_loss`). Trained by Lightning
  (`framework_loops.train_lightning`).
- `DenseNet`: Huang et al.'s DenseNet-BC (torchvision's `_DenseLayer` layout): BN-ReLU-Conv1×1
  bottleneck (4 × growth), BN-ReLU-Conv3×3, each layer's features concatenated to its input;
  transitions BN-ReLU-Conv1×1 with compression 0.5 and 2×2 average pooling; final BN-ReLU,
  global pool, Linear. Trained by the plain loop with SGD, Nesterov momentum 0.9, weight decay
  1e-4 and the paper's step schedule (lr ÷10 at 50 % and 75 % of training).
- `ActorCritic`: a policy-gradient agent for CartPole (`data.CartPole`): a tanh MLP policy over
  two categorical actions and a separate tanh MLP value baseline (Stable-Baselines3's layout,
  small); trained by REINFORCE with the baseline and an entropy bonus, Adam and
  `clip_grad_norm_` (`training.train_policy_gradient`). Its loss is a surrogate, not a quantity
  that falls as the agent learns: its truth reads the episodes' reward.
- `WGANGP`: Gulrajani et al.'s WGAN-GP on the ring of 8 Gaussians: an MLP generator and an MLP
  critic (no normalisation, as the paper asks), the critic's loss with a gradient penalty on
  interpolates (`gradient_penalty`, `torch.autograd.grad(create_graph=True)`); trained by
  Lightning's manual optimisation, 5 critic steps per generator step, Adam betas (0, 0.9)
  (`framework_loops.train_lightning_wgan`); its truth reads the samples' sliced Wasserstein
  distance to held-out real points (`sliced_wasserstein`), as seed 001's GAN reads its samples.
- `swin_classifier`: Hugging Face's `SwinForImageClassification` from a small `SwinConfig` (no
  download: window attention with relative position bias tables, shifted windows in every
  second block, patch merging, stochastic depth) on 8×8 digits; trained by the plain loop with
  timm's idioms: mixup/cutmix to soft targets with label smoothing (`mixup_cutmix`,
  `soft_target_cross_entropy`), an EMA copy of the weights updated after each step (not the
  recorded model), AdamW with warm-up + cosine, bf16 autocast.
- `QNetwork`: the PyTorch DQN tutorial's Q-network for CartPole (`layer1`, `layer2`: Linear(·, 128)
  + ReLU; `layer3`: one Q-value per action); trained by DQN (`training.train_dqn`): a replay
  buffer, ε-greedy exploration with exponential decay, a target network (a copy of the
  Q-network, not recorded, synced every few steps: Mnih et al.'s and Stable-Baselines3's hard
  update), Huber loss (`smooth_l1_loss`) on the TD targets, AdamW with AMSGrad and
  `clip_grad_value_` 100 (the tutorial's). Its TD loss is not a quantity that falls as the agent
  learns (the targets move): its truth reads the episodes' reward.
- `KDStudent` / `KDTeacher`: knowledge distillation (Hinton et al. 2015, in the PyTorch knowledge
  distillation tutorial's shape: a deeper, wider conv teacher and a light conv student, on 8×8
  digits). The teacher is trained in the generator for a few hundred steps on its own seed, then
  frozen (`requires_grad_(False)`, eval mode: `distillation_teacher`); the recorded model is the
  student, trained by the plain loop on `distillation_loss`: α·T²·KL(softmax(t/T) ‖ softmax(s/T))
  + (1 − α)·cross-entropy, T = 2, α = 0.5, the teacher's logits computed on each micro-batch the
  student sees (`training.train_field`'s `teacher`).
- `BYOL`: Grill et al.'s BYOL in lucidrains' byol-pytorch layout, small: an online network
  (`encoder`, a BatchNorm CNN; `projector` and `predictor`, each Linear → BatchNorm1d → ReLU →
  Linear) and a target network (`byol_target`: a copy of the encoder and projector, not
  recorded, gradient-free, in train mode as BYOL's is) updated after each step as an EMA of the
  online weights (`byol_ema_update`, τ = 0.99); the symmetric loss 2 − 2·cos between each
  view's online prediction and the other view's target projection (`byol_loss`) on two
  augmented views of each digit, no labels; trained by the plain loop with the target's
  projections computed on each micro-batch (`training.train_field`'s `teacher`).

- `RealNVP`: Dinh et al.'s RealNVP for vectors, as the common PyTorch implementations write it
  (senya-ashukha's real-nvp-pytorch, Chris Chute's real-nvp): 6 affine coupling layers with
  alternating checkerboard masks (buffers), each an s-net and a t-net (Linear → LeakyReLU →
  Linear → LeakyReLU → Linear) on the masked half, s scaled by a learned per-dimension factor
  and a tanh (`scale · tanh(s)`), z = x·exp(s) + t on the other half, log|det| = Σ s;
  `forward(x)` returns (z, log|det|) and `flow_nll` the negative log-likelihood under a standard
  normal prior in nats per dimension, which goes below 0 as the flow fits a concentrated density.
- `TransE`: Bordes et al.'s TransE in OpenKE's names (`ent_embeddings`, `rel_embeddings`): uniform
  init in ±6/√k, relations normalised once at init, entity rows renormalised to unit L2 norm
  after each step (`normalize_entities`, the paper's), the L1 distance ‖h + r − t‖ of a
  positive and of a corrupted triple (`forward(batch)` → (d⁺, d⁻)), the margin ranking loss
  mean(max(0, γ + d⁺ − d⁻)) (`transe_margin_loss`, OpenKE's `MarginLoss`): 0 on a batch whose
  every corrupted triple is already γ farther; only the rows a batch names get gradient.
  `hits_at_k` ranks every entity as the tail of held-out triples (raw, tail prediction).
- `M5`: the torchaudio speech-command tutorial's M5 keyword spotter (Dai et al.'s M5) on raw
  waveforms: Conv1d(kernel 40, stride 8) → BatchNorm1d → ReLU → MaxPool1d(4), three more
  Conv1d(3) blocks, a global average pool, a Linear head and `log_softmax`, trained on
  `F.nll_loss` (`keyword_nll_loss`) under fp16 autocast with a GradScaler.

- `lora_gpt`: LoRA fine-tuning as loralib writes it (Hu et al.): the `gpt` model with every
  Linear of its blocks a `LoRALinear` (loralib's `lora.Linear`, merge_weights off: the frozen
  base W and bias plus trainable `lora_A` (r × in, kaiming-uniform) and `lora_B` (out × r, zeros)
  scaled by alpha / r), and `mark_only_lora_as_trainable` (bias "none"): every other parameter,
  the embeddings, norms and the tied head included, has `requires_grad=False`. Its base weights
  are loaded (`strict=False`) from a GPT the generator pretrains on the default corpus
  (`field.lora_base`); it is fine-tuned on a shifted one (`data.KITCHEN_WORDS`). A detach is
  drawn on the first block: behind a detached last block nothing trainable would be left.
- `VQVAE`: van den Oord et al.'s VQ-VAE as zalandoresearch/pytorch-vq-vae writes it (its names):
  an `_encoder` of two stride-2 4×4 convs, a 3×3 conv and a residual stack, a 1×1 `_pre_vq_conv`,
  `_vq_vae` (`VectorQuantizerEMA`: nearest code by squared distance, the codebook `_embedding`
  and its running sums `_ema_w` (Parameters without gradient, as there) moved by an EMA (decay
  0.99, Laplace-smoothed cluster sizes) in the training forward pass, outside the optimizer,
  written in place where the repository re-wraps them as new Parameters, and started as if each
  code had been seen once; commitment loss 0.25·‖sg(e) − z‖², the straight-through
  estimator, the codebook perplexity), a `_decoder` of a 3×3 conv, a residual stack and two
  stride-2 transposed convs; `vqvae_loss` = MSE / the data's variance + the VQ loss.
- `NBeats`: Oreshkin et al.'s N-BEATS, generic architecture, in ElementAI's layout: blocks of
  4 Linear + ReLU layers and a `basis_parameters` Linear to θ, split by `GenericBasis` into a
  backcast and a forecast; the doubly residual stacking over the time-reversed input (each
  block's backcast subtracted from what the next block reads, its forecast added to the running
  forecast, which starts at the last observed value); blocks grouped in `stacks`;
  `smape_2_loss` is ElementAI's sMAPE (200 · |f − y| / (|f| + |y|), the denominator detached).
- `SkipGramModel`: word2vec's skip-gram with negative sampling as Andras7/word2vec-pytorch
  (after Adoni's) writes it: centre `u_embeddings` and context `v_embeddings`, each an
  `nn.Embedding(vocab, dim, sparse=True)` (sparse gradients, for `torch.optim.SparseAdam`),
  u uniform in ±1/dim, v zeros, scores clamped to ±10; `sgns_loss` = −log σ(u·v) − Σ log σ(−u·v_neg);
  `word_similarity_spearman` is gensim's `evaluate_word_pairs` ρ on the u vectors.
- `TripletEmbeddingNet`: pytorch-metric-learning's MNIST example net (two convs, max-pool,
  `Dropout2d(0.25)`, a Linear) with FaceNet's L2-normalised output; `batch_hard_triplet_loss` is
  Hermans et al.'s batch-hard mining in a P × K batch (pml's `BatchHardMiner`) into
  `nn.TripletMarginLoss(margin=0.2)`; `recall_at_1` is pml's `precision_at_1`.
- `WideResNet`, `SAM`: davda54/sam's example Wide ResNet (pre-activation `BasicUnit`s and
  `DownsampleUnit`s, its init, the classifier zeros) and its `SAM` optimizer (`first_step`
  climbs to w + ρ·g/‖g‖, `second_step` restores w with `p.data = old_p` and steps the base
  optimizer), `smooth_crossentropy` (label smoothing 0.1, as KL) and
  `enable/disable_running_stats` (BatchNorm's momentum 0 on the second pass).
- `PPOAgent`: CleanRL's `ppo.py` agent (separate tanh MLP actor and critic, orthogonal
  `layer_init`, the actor's head at std 0.01, the critic's at 1), trained by `training.train_ppo`.
- `TinyFCOS`: a one-level FCOS detector as torchvision's `FCOSHead` writes it (classification
  and regression towers with GroupNorm, a 0.01-prior classification bias, ReLU'd ltrb distances;
  no centerness, no FPN) on a small conv-BN-ReLU backbone; `fcos_loss` is its loss dict
  (`loss_cls`: `sigmoid_focal_loss`, `loss_box`: `generalized_box_iou_loss`, both as
  torchvision.ops writes them, over the positives); `detection_iou` the held-out box quality.
- `EfficientNet`, `ModelEmaV2`: timm's EfficientNet from B0's block strings, narrow and shallow
  (MBConv `InvertedResidual`s: expansion, depthwise conv, `SqueezeExcite`, SiLU, BatchNorm,
  drop-path), timm's init; timm's `ModelEmaV2` (an untrained copy moved towards the weights after
  each step).
- `PoissonPINN`, `pinn_loss`: DeepXDE's FNN for its 1-D Poisson example (a tanh MLP), the PDE
  residual by autograd on the inputs (`create_graph=True`), the residual and boundary loss terms.
- `SineMAML`: MAML's sinusoid regressor, fast weights per task by `torch.func.functional_call`
  and second-order inner steps (tristandeleu/pytorch-maml's `update_parameters`).
- `Pix2Pix`: junyanz's `UnetGenerator` (unrolled) and PatchGAN `NLayerDiscriminator`, its init.
- `BiLSTMCRF`, `crf_nll`, `viterbi_decode`: the PyTorch tutorial's BiLSTM-CRF tagger (its
  transition matrix with START and STOP tags, its random initial LSTM state), the forward
  algorithm and Viterbi batched over padded sentences; `entity_f1` the held-out span F1.
- `PixelCNN`: van den Oord et al.'s PixelCNN as common PyTorch code writes it (`MaskedConv2d`
  masking its weight in place in `forward`, a 7×7 type-A conv, residual blocks around 3×3
  type-B convs, a 1×1 head of one logit per grey level and pixel).
- `NeuralODE`, `odeint_rk4`: torchdiffeq's `ode_demo.py` `ODEFunc` (dy/dt = MLP(y³)) solved by
  a hand-written fixed-grid RK4 (torchdiffeq's `rk4`), backpropagated through the solver's steps.
- `TinyNeRF`: bmild/nerf's `tiny_nerf.ipynb` (`positional_encoding` of the points, its 8-layer
  MLP with the encoding concatenated back after the fifth layer, Keras's init, its stratified
  `render_rays` volume rendering), narrower.
- `CapsuleNet`, `caps_loss`: Sabour et al.'s CapsNet as XifengGuo/CapsNet-Pytorch writes it
  (`PrimaryCapsule`, `DenseCapsule` with routing by agreement, `squash`, a decoder masked by the
  true class given to `forward(x, y)`), narrower; the margin loss + 0.0005 × the reconstruction's
  summed squared error; `capsule_accuracy` the held-out accuracy.
- `SoftActorCritic`: pranz24/pytorch-soft-actor-critic's `GaussianPolicy` (tanh-squashed,
  `squashed_gaussian`), its twin-headed `QNetwork` (`TwinQNetwork`) and the temperature's
  `log_alpha`, its `weights_init_`, narrower; trained by `training.train_sac`.
- `MaskedAutoencoderViT`: facebookresearch/mae's `models_mae.py` (`patchify`, per-sample
  `random_masking` by argsort of noise, an encoder on the visible patches with a cls token and
  fixed 2-D sin-cos positions (`get_2d_sincos_pos_embed`), a light decoder with mask tokens, the
  MSE on the masked patches with `norm_pix_loss`), small.
- `RWKV`, `wkv`, `rwkv_loss`: BlinkDL/RWKV-LM's RWKV-v4 language model (token embedding, `ln0`
  after it, blocks of `RWKVTimeMix` (a zero-padded time shift, `time_mix_k/v/r` interpolation,
  the WKV recurrence with `time_decay` and `time_first`, stabilised by its running maximum as the
  CUDA kernel is, in plain PyTorch) and `RWKVChannelMix` (squared ReLU, a sigmoid receptance),
  `ln_out`, an untied head; its `generate_init_weight`), small; its loss wrapped in `L2Wrap`.
- `TabNet`, `sparsemax`, `GhostBatchNorm`, `tabnet_loss`: dreamquark-ai/tabnet's TabNet (an
  initial batch norm, shared and step-specific feature transformers of GLU layers behind ghost
  batch norm, attentive transformers drawing prior-scaled sparsemax masks, the decision steps'
  ReLU'd outputs summed), at its default widths; the masks' entropy added to its loss.
- `Perceiver`, `perceiver_fourier_encode`, `PerceiverAttention`, `GEGLU`: lucidrains/perceiver-pytorch's
  Perceiver (a learned latent array cross-attending to the input array with Fourier-encoded 2-D
  positions concatenated, PreNorm with the context's own LayerNorm, GEGLU feed-forwards, latent
  self-attention blocks after each cross-attention, mean-pooled LayerNorm → Linear head), small.
- `WaveNet`, `WaveNetBlock`, `gated_activation`: WaveNet as vincentherrmann/pytorch-wavenet and
  golbin/WaveNet write it (one-hot mu-law input, a causal input conv, stacks of dilated causal
  convs with dilations 1, 2, 4, … in each stack, the gated activation tanh(filter) · sigmoid(gate),
  1×1 residual and skip convs, the skips summed → ReLU → 1×1 → ReLU → 1×1 → logits), small.
- `SetTransformer`, `MAB`, `SAB`, `ISAB`, `PMA`: Lee et al.'s Set Transformer as
  juho-lee/set_transformer's modules.py and models.py write it (multihead attention blocks whose
  heads are split along the batch, O = Q + softmax(Q Kᵀ / sqrt(dim_V)) V then O + relu(fc_o(O));
  an encoder of two induced set attention blocks, a decoder of pooling by attention over learned
  seeds, two self-attention blocks and a Linear), small, on its max-regression demo.
- `GAT`, `GATHeads`, `GraphAttentionLayer`: Veličković et al.'s Graph Attention Network as
  Diego999/pyGAT's layers.py and models.py write it (dense attention e_ij = LeakyReLU_0.2(aᵀ[W h_i ‖
  W h_j]) masked to the adjacency with −9e15, softmax over neighbours, dropout on the attention;
  ELU'd hidden heads concatenated, one output attention layer, ELU, log_softmax), small.
- `KAN`, `KANLinear`, `kan_b_splines`, `kan_uniform_grid`: a Kolmogorov–Arnold Network as
  Blealtan/efficient-kan's kan.py writes it (each layer a SiLU base branch plus cubic B-spline
  bases of its inputs on a uniform extended grid, by the Cox–de Boor recursion, times scaled spline
  weights), [64, 32, 10] on the flattened digits as its MNIST example.
- `HyperNetCNN`, `HyperNetwork`, `HyperEmbedding`, `HyperConvBlock`: Ha, Dai & Le's static
  hypernetwork as g1910free/HyperNetworks writes it (one shared hypernetwork maps each block's
  learned layer embedding z through w2 / b2 and w1 / b1 to that block's convolution kernel on
  every forward; the blocks' convolutions have no weights of their own), small, on the digits.
- `DiT`, `DiTBlock`, `DiTFinalLayer`, `DiTTimestepEmbedder`, `DiTLabelEmbedder`, `DiTDiffusion`,
  `dit_loss`, `dit_update_ema`: Peebles & Xie's Diffusion Transformer as facebookresearch/DiT's
  models.py and diffusion/ write it (patch tokens with fixed sin-cos positions, c = timestep
  embedding + class embedding with a null class for classifier-free guidance, adaLN-Zero blocks,
  a modulated final layer, unpatchify; ε-prediction MSE at uniform t on a linear β schedule),
  small, the 8×8 digits its 1-channel latents.
- `SparseAutoencoder`, `sae_loss`, `sae_unit_norm_decoder_`, `sae_unit_norm_decoder_grad_adjustment_`,
  `sae_toy_activations`: a sparse autoencoder as openai/sparse_autoencoder's model.py, loss.py and
  train.py write one for interpretability (pre-encoder bias subtracted before the encoder and added
  after the decoder, ReLU latents, normalised MSE + λ · normalised L1 of the latents, decoder columns
  renormalised to unit norm after every optimizer step and their parallel gradient removed before
  it), on synthetic toy-model activations (sparse features through a fixed random embedding).
- `SNGAN`, `SNGANGenerator`, `SNGANDiscriminator`, `sngan_hinge_d_loss`, `sngan_hinge_g_loss`: Miyato
  et al.'s SN-GAN as PyTorch-StudioGAN and christiancosgrove/pytorch-spectral-normalization-gan write
  the "standard CNN" one, small: a DCGAN-like generator (ConvTranspose2d, BatchNorm, ReLU, Tanh) and a
  discriminator of LeakyReLU(0.1) convs and a linear head, each wrapped by
  `torch.nn.utils.parametrizations.spectral_norm`, no BatchNorm; hinge losses; on the digits in [−1, 1].
- `ElectraClassifier`, `electra_param_groups_lrd`, `electra_rows`, `electra_collate`, `electra_sampler`:
  an `ElectraForSequenceClassification`-style post-LN encoder classifier ([CLS] head) written here,
  fine-tuned as ELECTRA / DeBERTa / BEiT scripts do it: layer-wise lr decay param groups (two a
  depth: decay and no decay) and Hugging Face's gradient checkpointing (each encoder layer through
  `torch.utils.checkpoint.checkpoint(..., use_reentrant=False)` in training mode), on a synthetic
  marker-token task of padded int64 token rows with an attention mask.
- `MuonGPT`, `muon_gpt_optimizers`, `muon_gpt_momentum`: a KellerJordan/modded-nanogpt `train_gpt.py`-style
  speedrun GPT (weightless RMSNorm, rotary, QK-norm, ReLU² MLP, zero-initialised output projections and
  untied head, x0-mixing block scalars, logits soft-capped by 30 · tanh(· / 30)) trained by two
  optimizers: `torch.optim.Muon` on the blocks' matrices and Adam (β (0.8, 0.95), eps 1e-10) on the
  embedding, the head and the scalars, with Muon's momentum warmed up 0.85 → 0.95; on the character corpus.
- `DeepLabV3`, `DeepLabBackbone`, `DeepLabBottleneck`, `ASPP`, `DeepLabHead`, `FCNHead`,
  `deeplab_criterion`, `deeplab_params_to_optimize`, `deeplab_confusion_matrix`, `deeplab_evaluate`:
  torchvision's DeepLabV3 with an auxiliary FCN head as references/segmentation/train.py trains it,
  written here, small: a Bottleneck ResNet with `replace_stride_with_dilation` (output stride 8), an
  ASPP head (1 × 1, atrous 3 × 3 at three rates, image pooling; projected, dropout), an FCN head on
  layer3, both upsampled bilinearly to the input; a dict {"out", "aux"}; cross-entropy with
  `ignore_index=255` on out + 0.5 × aux; mean IoU from a confusion matrix that skips the void label;
  on VOC-like generated colour shapes with a void band on every boundary (`data.voc_shapes`).
- `DecisionTransformer`, `dt_action_loss`, `dt_rollouts`: offline RL as sequence modelling, Hugging
  Face's `DecisionTransformerModel` from a small `DecisionTransformerConfig` (no download: a GPT-2
  over interleaved (return-to-go, state, action) tokens with timestep embeddings, a tanh action head)
  as kzl/decision-transformer's gym experiment trains it: the MSE of the predicted actions where the
  attention mask is 1, on left-padded K-step windows of a generated "medium-replay"-like dataset of a
  point mass reaching a goal (`data.point_reach_trajectories`); evaluated by rolling it out
  conditioned on a target return.
- `PatchTST`, `RevIN`, `PatchTSTPatchify`, `PatchTSTEncoder`, `PatchTSTEncoderLayer`, `PatchTSTAttention`,
  `PatchTSTHead`, `patchtst_evaluate`: Nie et al.'s PatchTST (yuqinie98/PatchTST's supervised model,
  in its Hugging Face port's layout), written here at ETTh1's script's sizes: RevIN (per-sample,
  per-channel statistics over the look-back, a learnable affine, the forecast denormalised),
  channel independence (each channel a sequence through shared weights), overlapping patches
  (16, stride 8, the end padded by repeating the last value), a linear patch embedding, learned
  positions, a post-norm Transformer encoder with BatchNorm and residual attention, a flatten head
  to the horizon; MSE on an ETTh1-like generated multivariate series (`data.ett_like_series`).
- `TimmResNet`, `TimmBasicBlock`, `timm_top1`: a small ResNet in timm's `resnet.py` layout (a flat
  stem `conv1` / `bn1` / `act1`, stages `layer1`–`layer3` of `BasicBlock`s with a 1×1 conv + BN
  `downsample` where the shape changes, `global_pool`, `fc`), timm's `init_weights` (convs
  Kaiming-normal fan-out, BN 1 and 0, `zero_init_last`: each block's `bn2.weight` at 0, so every
  block starts as its shortcut), trained as rwightman/pytorch-image-models' `train.py` trains it:
  timm's `Mixup` (`mixup_cutmix`) to soft targets with label smoothing and `SoftTargetCrossEntropy`,
  SGD with Nesterov momentum, weight decay off biases and norms, a per-update cosine schedule with
  a linear warm-up, a `ModelEmaV2`; on the 16×16 colour patterns (`data.pattern_images`).
- `AGPVGG`, `agp_sparsity`, `agp_prune`, `prunable`, `global_sparsity`: gradual magnitude pruning
  during training (Zhu & Gupta 2017, "To prune, or not to prune": the cubic schedule
  s_t = s_f + (s_i − s_f)(1 − (t − t0)/(n Δt))³ applied every Δt steps from t0 to t0 + n Δt) as it
  is run with PyTorch's own `torch.nn.utils.prune` (`prune.global_unstructured` with
  `L1Unstructured` over every conv's and the classifier's `weight`, each pruned module then
  holding a `weight_orig` Parameter, a `weight_mask` buffer and a forward pre-hook that recomputes
  `weight`; the PyTorch pruning tutorial's global example, Distiller's AGP) on a small VGG in
  Distiller's `vgg_cifar` layout (`features`: 3×3 conv + BN + ReLU and 2×2 max-pools, a linear
  `classifier`, Distiller's `_initialize_weights`), trained as Distiller's `compress_classifier.py`
  trains its AGP examples (SGD momentum 0.9, weight decay on every parameter, a step schedule) on
  the 8×8 digits (`data.digits`, standardised).
- `QatMobileNetV2`, `QatInvertedResidual`, `qat_conv_bn_relu`, `qat_prepare`,
  `qat_int8_top1`: quantization-aware training in PyTorch's eager mode (`torch.ao.quantization`), as
  pytorch/vision's `references/classification/train_quantization.py` trains torchvision's
  `QuantizableMobileNetV2`: a small MobileNetV2 (a ConvBNReLU stem, inverted residuals with ReLU
  where torchvision's quantizable model replaces ReLU6, a `FloatFunctional` skip add, a 1×1
  ConvBNReLU, global pooling, dropout 0.2 and a linear classifier, between a `QuantStub` and a
  `DeQuantStub`), Conv-BN(-ReLU) fused by `fuse_modules_qat`, `get_default_qat_qconfig` of the
  `qnnpack` engine (train_quantization.py's `--backend` default), `prepare_qat`; fine-tuned on the
  16×16 colour patterns from a float model trained in-process first (`field.qat_float_base`: no
  pretrained weights can be downloaded), its observers disabled
  and its BatchNorm statistics frozen after a few "epochs", a top-1 of the fake-quant model and of
  an int8 `convert`ed copy.
- `albert_classifier`, `albert_collate`, `albert_sampler`: Hugging Face's
  `AlbertForSequenceClassification` from a small `AlbertConfig` (factorised embeddings E 32 < H 64,
  one `AlbertLayer` shared by all 4 applications a forward), fine-tuned as google-research/albert's
  run_classifier.py and HF's run_glue.py do it, on the marker-token task in run_glue's dict batches
  (`input_ids`, `token_type_ids`, `attention_mask`, `labels`).
- `DEQClassifier`, `DEQFixedPoint`, `DEQResNetLayer`, `deq_anderson`: a Deep Equilibrium model
  (Bai, Kolter & Koltun 2019) as the NeurIPS 2020 "Deep Implicit Layers" tutorial's chapter 4 builds
  and trains it (its CIFAR-10 model, small for the 8×8 digits): a stem conv + BatchNorm gives the
  injection x, one cell f(z, x) (the tutorial's `ResNetLayer`: conv → ReLU → GroupNorm, x + conv →
  GroupNorm, z + that → ReLU → GroupNorm, convs N(0, 0.01)) is driven to its fixed point z* = f(z*, x) by
  Anderson acceleration under `torch.no_grad()` (m 5, λ 1e-4, tol 1e-2, at most 25 iterations), then
  f is applied once more with autograd on and the gradient through z* is the implicit one: a
  `register_hook` on z* solves the adjoint fixed point g = (∂f/∂z*)ᵀ g + grad with the same
  solver; BatchNorm, 2×2 average pooling, a linear head; Adam and a cosine schedule as the
  tutorial trains it; on the 8×8 digits (`data.digits`, [0, 1] as `ToTensor` leaves them).
- `WideResNetDDP`, `WRNBasicBlock`, `WRNNetworkBlock`, `wrn_evaluate`, `gloo_process_group`,
  `ddp_wrap`, `WRNEpochLoader`: a Wide ResNet (Zagoruyko & Komodakis 2016) in
  xternalz/WideResNet-pytorch's `wideresnet.py` layout (`conv1`, `block1`–`block3` of
  pre-activation `BasicBlock`s: bn1 → relu1 → conv1 → bn2 → relu2 → (dropout) → conv2, a 1×1
  `convShortcut` where the shape changes; then `bn1`, `relu`, average pooling, `fc`; its init),
  WRN-10-2 (one block a group, widths 32 / 64 / 128 after a 16-channel stem), trained as
  pytorch/vision's references/classification/train.py trains a model under
  `DistributedDataParallel`: a real single-process gloo process group (`gloo_process_group`:
  world size 1, rank 0, a `file://` rendezvous in its own temporary directory, destroyed in a
  `finally`), the model wrapped in `DistributedDataParallel` (`ddp_wrap`: every parameter named
  `module.…`), a `DistributedSampler` shard of the colour patterns reshuffled by `set_epoch` each
  epoch (`WRNEpochLoader`), an evaluation each epoch (`wrn_evaluate`), and a checkpoint saved and
  resumed into the same objects at one epoch boundary (`field._train`).
- `MoCo`, `MocoResNet`, `MocoBasicBlock`, `MocoSplitBatchNorm`, `moco_loss`, `moco_knn_top1`: MoCo v2
  (He et al. 2020, "Momentum Contrast"; Chen et al. 2020, "Improved Baselines with Momentum
  Contrastive Learning") as facebookresearch/moco's `moco/builder.py` builds it and `main_moco.py`
  trains it (`--mlp --moco-t 0.2 --aug-plus --cos`), on one process as the repository's CIFAR-10
  demo notebook (colab/moco_cifar10_demo.ipynb) runs it: a query encoder (a small torchvision-style
  ResNet, BatchNorm everywhere, MoCo v2's 2-layer MLP head as its `fc`) and a key encoder copied from
  it at init with `requires_grad = False`, moved only by the momentum update
  param_k ← m·param_k + (1 − m)·param_q under `no_grad` in each training forward (m 0.99, the demo's:
  0.999 would leave a 150-step key encoder 86 % at its init); the demo's shuffle BN (`SplitBatchNorm`,
  the keys' batch shuffled through the key encoder and unshuffled); a `queue` buffer of K normalised
  keys and a `queue_ptr` buffer, enqueued / dequeued each forward; InfoNCE at T 0.2 as cross-entropy
  over [q·k, q·queue] against label 0; the demo's weighted kNN monitor on `encoder_q` (`moco_knn_top1`).
  Two augmented views of the 16×16 colour patterns (`data.pattern_images`, `data.two_views_sampler`).
- `SwaGcResNet`, `swa_gc_top1`: a timm-layout ResNet (`TimmResNet`'s stem, `layer1`–`layer3` of
  `TimmBasicBlock`s, BatchNorm, `fc`) trained with activation checkpointing and Stochastic Weight
  Averaging as PyTorch's own `torch.utils.checkpoint` and `torch.optim.swa_utils` docs do it: while
  training, each stage's forward runs through `torch.utils.checkpoint.checkpoint(stage, x,
  use_reentrant=False)` (timm's `set_grad_checkpointing()`, Hugging Face's
  `gradient_checkpointing_enable()`: recomputed during backward); an `AveragedModel` of it, updated
  once an epoch from `swa_start`, its BatchNorm statistics recomputed by `update_bn` over the
  training loader before each evaluation (`swa_gc_top1`).
- `Tacotron2`, `TacotronEncoder`, `TacotronDecoder`, `TacotronAttention`, `TacotronLocationLayer`,
  `TacotronPrenet`, `TacotronPostnet`, `TacotronLinearNorm`, `TacotronConvNorm`, `tacotron2_loss`,
  `tacotron_collate`: Tacotron 2 (Shen et al. 2018) as NVIDIA/tacotron2's `model.py`, `layers.py`,
  `loss_function.py` and `data_utils.py` lay it out and `train.py` / `hparams.py` train it, scaled
  down (`TACOTRON_*`: 16 mel channels, one frame a step, embedding 64, RNNs 64): a character
  `embedding`; the `encoder` (three ConvNorm k5 + BatchNorm1d + ReLU + dropout 0.5, a bidirectional
  LSTM over the texts packed by length); the teacher-forced `decoder` (the `prenet`'s two Linear + ReLU
  with dropout 0.5 always on, eval included; the `attention_rnn` LSTMCell; the location-sensitive
  `attention_layer` over [previous, cumulative] weights, masked by the text lengths; the
  `decoder_rnn` LSTMCell; `linear_projection` to the frame, `gate_layer` to the stop token); the
  five-conv `postnet` added as a residual; `mask_padding` (0 / gate 1e3 past each length);
  `Tacotron2Loss` (two MSEs and a BCE-with-logits). On synthetic utterances: random strings of 20
  characters, each a fixed spectral template held for a fixed 1-3 frames (`field._tacotron_data`).
- `SageLinkPredictor`, `SAGE`, `SAGEConv`, `LinkPredictor`, `link_pred_loss`, `link_pred_clip_`,
  `link_pred_hits`: GraphSAGE link prediction as snap-stanford/ogb's
  `examples/linkproppred/collab/gnn.py` (`--use_sage`) lays it out and trains it, in plain torch (no
  torch_geometric / torch_sparse): `encoder`, gnn.py's `SAGE` (3 `SAGEConv` layers at PyG's defaults,
  mean aggregation `lin_l(mean_j x_j) + lin_r(x_i)` over the training graph's edges by `index_add_`,
  ReLU and dropout between, none after the last), `predictor`, its `LinkPredictor` (an MLP of 3
  Linear layers on h_i * h_j, ReLU and dropout between, a sigmoid after the last: a probability);
  the whole graph encoded on every step; `link_pred_loss` its hand-written
  −log(pos + 1e-15) − log(1 − neg + 1e-15); `link_pred_clip_` its two `clip_grad_norm_` calls (the
  encoder's and the predictor's, each at 1.0); `link_pred_hits` its `test()` with ogb's `Evaluator`
  Hits@K. Hidden 128 and dropout 0.0 (gnn.py: 256 and 0.0). On a stochastic block model's edges
  (`data.sbm_link_split`, `field._link_pred_data`).
- `DinoResNet`, `DinoBasicBlock`, `DINOHead`, `DinoMultiCropWrapper`, `DinoTeacher`, `DINOLoss`,
  `dino_student`, `dino_teacher`, `dino_ema_update`, `dino_cosine_scheduler`, `dino_clip_gradients`,
  `dino_cancel_gradients_last_layer`, `dino_params_groups`, `dino_knn_top1`: DINO (Caron et al. 2021,
  "Emerging Properties in Self-Supervised Vision Transformers") as facebookresearch/dino's
  `main_dino.py`, `vision_transformer.py` and `utils.py` lay it out and train it, scaled down: the
  student a small torchvision-layout ResNet (main_dino.py's `--arch resnet*` path: a tiny ViT as
  `vit_tiny` lays it out collapsed within 10 steps on every setting tried in a 150-step run) in a
  `MultiCropWrapper` (crops batched by resolution) with a `DINOHead` (3-layer GELU MLP with
  `--use_bn_in_head`, bottleneck, L2 normalisation, a last layer under the old `nn.utils.weight_norm`:
  parameters `weight_g`, filled with 1 and frozen by `norm_last_layer`, and `weight_v`); the teacher
  the same architecture with the student's weights, `requires_grad` False, moved only by
  `dino_ema_update`; `DINOLoss` (the teacher's centered, sharpened softmax over the two global crops,
  the student's at temperature 0.1 over every crop, the same view's pairs skipped, the center an EMA
  of the teacher's outputs); utils.py's `cosine_scheduler`, `clip_gradients`,
  `cancel_gradients_last_layer` and `get_params_groups`; eval_knn.py's weighted kNN (`dino_knn_top1`).
  On `DataAugmentationDINO`'s crops of synthetic textures (`field.dino_multicrop_sampler`,
  `field._dino_patterns`).
- `DETR`, `DetrJoiner`, `DetrBackbone`, `DetrBackboneBody`, `PositionEmbeddingSine`, `DetrTransformer`
  (its encoder and decoder layers), `DetrMLP`, `HungarianMatcher`, `SetCriterion`, `detr_criterion`,
  `detr_loss`, `detr_postprocess`, `voc_ap50`, `detr_evaluate_ap50`: DETR (Carion et al. 2020,
  "End-to-End Object Detection with Transformers") as facebookresearch/detr's `models/detr.py`,
  `models/matcher.py`, `models/transformer.py`, `models/backbone.py`, `models/position_encoding.py`,
  `util/box_ops.py` and `engine.py` lay it out, scaled down: a small conv backbone in ResNet's naming
  (trained `nn.BatchNorm2d`, not `FrozenBatchNorm2d`: nothing pretrained to freeze) in a `Joiner` with
  `PositionEmbeddingSine` (normalised, 2π), a 1×1 `input_proj`, the post-norm `Transformer` (1 encoder
  and 2 decoder layers of width 64, 4 heads, FFN 128, dropout 0.1; `nn.MultiheadAttention`; the
  positional encoding added to queries and keys in every layer, the learned `query_embed` as the
  decoder's `query_pos` from zero targets; `return_intermediate` with the decoder's final LayerNorm;
  `xavier_uniform_`), `class_embed` Linear(d, classes + 1) and a 3-layer `bbox_embed` MLP with a
  sigmoid, on every decoder layer (`aux_outputs`); `HungarianMatcher` (cost_class 1, cost_bbox 5,
  cost_giou 2, under `torch.no_grad`, scipy's `linear_sum_assignment`; non-finite costs made finite
  first, where upstream's scipy raises); `SetCriterion` (`eos_coef` 0.1 as `empty_weight`, CE + 5 L1 +
  2 GIoU over `num_boxes`, each auxiliary layer matched and weighted the same); box_ops' GIoU
  (`detr_generalized_box_iou`); VOC AP at IoU 0.5 over the classes of `PostProcess`'s detections on
  held-out images (`detr_evaluate_ap50`). 6 object queries. On synthetic colour shapes
  (`data.detr_shapes`, `field._detr_data`).
- `DeepAR`, `MeanScaler`, `FeatureEmbedder`, `StudentTProjection`, `deepar_loss`,
  `deepar_sample_paths`, `mean_weighted_quantile_loss`, `student_t_log_prob`, `student_t_sample`:
  DeepAR (Salinas et al. 2020, "DeepAR: Probabilistic forecasting with autoregressive recurrent
  networks") as GluonTS's `gluonts/torch/model/deepar/module.py` (`DeepARModel`) and
  `lightning_module.py` (`DeepARLightningModule`) lay it out, in plain torch: `embedder`, a
  `FeatureEmbedder` of the series' ID (`embedding_dimension` 24); `scaler`, GluonTS torch's
  `MeanScaler` (mean |value| of the observed context, the batch's mean for a context summing to 0,
  floor 1e-10, detached); `rnn`, `nn.LSTM` (2 layers × 40, dropout 0.1) over the scaled target's
  `lags_seq` (`get_lags_for_frequency("H")` up to a week), hour-of-day / day-of-week / age time
  features and the static features (embedding, the dummy `feat_static_real`, log scale);
  `param_proj`, `StudentTOutput`'s projection (df = 2 + softplus, scale = softplus). Training is
  `unroll_lagged_rnn`, teacher-forced over context_length − 1 + prediction_length steps, the loss
  the t's NLL of the scaled targets (`deepar_loss`: below 0 once its t is sharp and right);
  prediction the model's sampling forward (`deepar_sample_paths`: the LSTM state repeated per path,
  each sample fed back as the newest lag), scored by GluonTS `Evaluator`'s `mean_wQuantileLoss`
  (`mean_weighted_quantile_loss`). Trained by Lightning (`framework_loops.train_lightning`). On
  related hourly series, continuous and count-like (`data.related_series`, `field._deepar_data`).

`vit` and `lstm_lm` were added after the analyzer's defaults of issue 12's first round and scored
once before any of their analyses was read; `mixer` and `tcn` likewise before the second round,
`llama`, `autoencoder` and `recsys` before the third, `moe` and `vae` before the fourth, `unet`,
`seq2seq`, `gnn` and `simclr` before the fifth, `ddpm` and `ctc` before the sixth, `mamba`,
`fttransformer` and `convnext` before the seventh, `bert_mlm`, `siren` and `pointnet` before the eighth,
`t5`, `clip` and `densenet` before the ninth, `reinforce`, `wgan_gp` and `swin` before the tenth,
`dqn`, `distil` and `byol` before the eleventh, `realnvp`, `transe` and `kws` before the twelfth,
`lora`, `vqvae` and `nbeats` before the thirteenth, `word2vec`, `triplet` and `sam` before the
fourteenth, `ppo`, `detector` and `efficientnet` before the fifteenth, `pinn`, `maml` and `pix2pix` before the
sixteenth, `bilstm_crf`, `pixelcnn` and `neural_ode` before the seventeenth, `nerf` and `capsnet` before
the eighteenth, `sac` and `mae` before the nineteenth, `rwkv` and `tabnet` before the twentieth,
`perceiver` and `wavenet` before the twenty-first, `set_transformer` and `conformer` before the
twenty-second, `gat` and `neural_process` before the twenty-third, `kan` and `hypernetwork` before
the twenty-fourth, `dit` before the twenty-fifth, `sae` before the twenty-sixth, `sngan` and
`electra_ft` before the twenty-seventh, `muon_gpt` and `deeplab` before the twenty-eighth,
`decision_transformer` before the twenty-ninth, `patchtst` before the thirtieth, `timm_mixup`
before the thirty-first, `gradual_pruning` and `qat` before the thirty-second, `albert` and `deq`
before the thirty-third, `ddp_wrn` and `moco` before the thirty-fourth, `swa_gc` and `tacotron` before the
thirty-fifth, `dino` and `link_pred` before the thirty-sixth, `detr` and `deepar` before the thirty-seventh
(benchmarks/detection.py `NEVER_SEEN_ARCHS`).

Each model lists its `units`: the modules that partition its parameters in forward order, used to
build one param group per unit (per-block learning rates) and to name what a fault hits; the
`hidden` units among them (the blocks between input and head: where an lr spike or a detach is
drawn); and its `exposed` layers, whose output reaches the loss (or the recurrence) without a normalisation after
it: scaling their weights changes what the model computes (behind a LayerNorm or BatchNorm the
same scaling is normalised away, and the run shrugs it off).
"""
from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .data import (CAPTIONS, CARTPOLE, CLICKS, DENSITY, ETT_LIKE, GRAPH, KNOWLEDGE_GRAPH, LINK_GRAPH, MLM, NERF_SCENE,
                   POINT_MASS, POINT_REACH, RING, MEL_SPEECH, SERIES, SPEECH, SPIRAL, TABLE, TAGGING, TAGS, TOPICS,
                   WAVEFORMS, PointReach, rk4_step, spiral_trajectory)
from .models import TinyGPT

__all__ = ["EncoderClassifier", "ResNet", "GRULM", "ViT", "TiedLSTMLM", "Mixer", "TCN", "Llama", "ConvAutoencoder",
           "RecSys", "MoELM", "VAE", "UNet", "Seq2Seq", "GCN", "SimCLR", "GaussianDiffusion", "Denoiser",
           "CTCRecognizer", "Mamba", "FTTransformer", "ConvNeXt", "BertMLM", "Siren", "PointNet", "t5_sorter", "CLIP",
           "DenseNet", "clip_loss", "ActorCritic", "WGANGP", "gradient_penalty", "sliced_wasserstein",
           "swin_classifier", "mixup_cutmix", "soft_target_cross_entropy", "QNetwork", "KDStudent", "KDTeacher",
           "distillation_loss", "BYOL", "byol_target", "byol_ema_update", "byol_loss", "RealNVP", "flow_nll", "TransE",
           "transe_margin_loss", "hits_at_k", "M5", "keyword_nll_loss", "LoRALinear", "lora_gpt", "VQVAE",
           "VectorQuantizerEMA", "vqvae_loss", "codebook_perplexity", "NBeats", "smape_2_loss", "SkipGramModel",
           "sgns_loss", "word_similarity_spearman", "TripletEmbeddingNet", "batch_hard_triplet_loss", "recall_at_1",
           "WideResNet", "smooth_crossentropy", "SAM", "disable_running_stats", "enable_running_stats",
           "PPOAgent", "TinyFCOS", "sigmoid_focal_loss", "generalized_box_iou_loss", "fcos_targets", "fcos_loss",
           "detection_iou", "EfficientNet", "InvertedResidual", "SqueezeExcite", "ModelEmaV2", "BiLSTMCRF", "crf_nll",
           "crf_log_partition", "crf_path_score", "viterbi_decode", "entity_f1", "MaskedConv2d", "PixelCNN",
           "NeuralODE", "ODEFunc", "odeint_rk4", "trajectory_error", "positional_encoding", "TinyNeRF", "squash",
           "PrimaryCapsule", "DenseCapsule", "CapsuleNet", "margin_loss", "caps_loss", "capsule_accuracy",
           "squashed_gaussian", "GaussianPolicy", "TwinQNetwork", "SoftActorCritic", "get_2d_sincos_pos_embed",
           "MaskedAutoencoderViT", "mae_loss", "patchify", "MAE_PATCH", "RWKV", "RWKVTimeMix", "RWKVChannelMix",
           "wkv", "L2Wrap", "rwkv_loss", "RWKV_LR", "sparsemax", "GhostBatchNorm", "TabNet", "tabnet_loss",
           "TABNET_VIRTUAL_BATCH", "TABNET_LAMBDA_SPARSE", "Perceiver", "PerceiverAttention", "PerceiverLayer",
           "PerceiverFeedForward", "GEGLU", "perceiver_fourier_encode", "PERCEIVER_FREQ_BANDS", "PERCEIVER_MAX_FREQ",
           "WaveNet", "WaveNetBlock", "gated_activation", "SetTransformer", "MAB", "SAB", "ISAB", "PMA",
           "ConditionalNeuralProcess", "cnp_nll", "CNP_SIGMA_FLOOR", "HyperNetwork", "HyperEmbedding", "HyperConvBlock",
           "HyperNetCNN", "DiT", "DiTBlock", "DiTFinalLayer", "DiTTimestepEmbedder", "DiTLabelEmbedder",
           "DiTMlp", "DiTDiffusion", "dit_loss", "dit_modulate", "dit_timestep_embedding", "dit_linear_betas",
           "dit_update_ema", "DIT_TIMESTEPS", "DIT_EMA_DECAY", "SparseAutoencoder", "SAEPreBias", "sae_loss",
           "sae_unit_norm_decoder_", "sae_unit_norm_decoder_grad_adjustment_", "sae_toy_activations", "SAE_INPUTS",
           "SAE_FEATURES", "SAE_LATENTS", "SAE_FEATURE_PROBABILITY", "SAE_L1_COEF", "SAE_MEAN_NORM",
           "sae_activation_mean", "SNGAN", "SNGANGenerator", "SNGANDiscriminator", "sngan_hinge_d_loss",
           "sngan_hinge_g_loss", "sngan_orthogonal_init_", "SNGAN_LATENT",
           "ElectraClassifier", "ElectraEmbeddings", "ElectraEncoder", "ElectraLayer", "ElectraAttention",
           "ElectraSelfAttention", "ElectraSelfOutput", "ElectraIntermediate", "ElectraClassificationHead",
           "electra_param_groups_lrd", "electra_rows", "electra_collate", "shuffled_indices", "electra_sampler", "electra_accuracy",
           "ELECTRA_VOCAB", "ELECTRA_CLASSES", "ELECTRA_MARKERS", "ELECTRA_LENGTHS", "ELECTRA_POSITIONS",
           "ELECTRA_LAYER_DECAY", "ELECTRA_PAD", "ELECTRA_CLS", "ELECTRA_SEP",
           "MuonGPT", "MuonGPTBlock", "MuonGPTAttention", "MuonGPTMLP", "MuonGPTRotary", "MuonGPTLinear",
           "muon_gpt_norm", "muon_gpt_optimizers", "muon_gpt_momentum", "MUON_GPT_MUON_LR", "MUON_GPT_EMBED_LR", "MUON_GPT_HEAD_LR",
           "MUON_GPT_SCALAR_LR", "MUON_GPT_BETAS", "MUON_GPT_EPS", "MUON_GPT_MOMENTUM",
           "DeepLabV3", "DeepLabBackbone", "DeepLabBottleneck", "ASPP", "ASPPConv", "ASPPPooling", "DeepLabHead",
           "FCNHead", "deeplab_criterion", "deeplab_params_to_optimize", "deeplab_confusion_matrix", "deeplab_scores",
           "deeplab_evaluate", "DEEPLAB_CLASSES", "DEEPLAB_VOID", "DEEPLAB_RATES", "DEEPLAB_AUX_WEIGHT", "DEEPLAB_AUX_LR",
           "DecisionTransformer", "dt_action_loss", "dt_rollouts", "dt_random_return", "DT_TARGET_RETURN",
           "DT_EVAL_EPISODES",
           "PatchTST", "RevIN", "PatchTSTPatchify", "PatchTSTPositionalEncoding", "PatchTSTBatchNorm", "PatchTSTAttention",
           "PatchTSTEncoderLayer", "PatchTSTEncoder", "PatchTSTHead", "patchtst_evaluate", "TimmResNet",
           "DEQClassifier", "DEQFixedPoint", "DEQResNetLayer", "deq_anderson",
           "WideResNetDDP", "WRNBasicBlock", "WRNNetworkBlock", "wrn_evaluate", "gloo_process_group", "ddp_wrap",
           "WRNEpochLoader",
           "MoCo", "MocoResNet", "MocoBasicBlock", "MocoSplitBatchNorm", "moco_loss", "moco_knn_top1", "weighted_knn_top1",
           "MOCO_DIM", "MOCO_K", "MOCO_M", "MOCO_T", "MOCO_BN_SPLITS",
           "TimmBasicBlock", "timm_top1", "SwaGcResNet", "swa_gc_top1", "albert_classifier", "albert_collate", "albert_sampler", "ALBERT_EMBEDDING",
           "Tacotron2", "TacotronEncoder", "TacotronDecoder", "TacotronAttention", "TacotronLocationLayer",
           "TacotronPrenet", "TacotronPostnet", "TacotronLinearNorm", "TacotronConvNorm", "tacotron_mask_from_lengths",
           "tacotron2_loss", "tacotron_collate", "TACOTRON_SYMBOLS", "TACOTRON_CHARS", "TACOTRON_MELS",
           "TACOTRON_EMBEDDING", "TACOTRON_PRENET", "TACOTRON_RNN", "TACOTRON_ATTENTION", "TACOTRON_LOCATION_FILTERS",
           "TACOTRON_LOCATION_KERNEL", "TACOTRON_POSTNET",
           "DETR", "DetrJoiner", "DetrBackbone", "DetrBackboneBody", "PositionEmbeddingSine", "DetrTransformer",
           "DetrTransformerEncoder", "DetrTransformerDecoder", "DetrTransformerEncoderLayer",
           "DetrTransformerDecoderLayer", "DetrMLP", "HungarianMatcher", "SetCriterion", "detr_criterion", "detr_loss",
           "detr_weight_dict", "detr_targets", "detr_postprocess", "voc_ap50", "detr_evaluate_ap50",
           "detr_box_cxcywh_to_xyxy", "detr_box_area", "detr_box_iou", "detr_generalized_box_iou", "DETR_HIDDEN",
           "DETR_HEADS", "DETR_ENC_LAYERS", "DETR_DEC_LAYERS", "DETR_FFN", "DETR_DROPOUT", "DETR_QUERIES",
           "DETR_SET_COST", "DETR_LOSS_COEF", "DETR_EOS_COEF", "DETR_LR_BACKBONE_SCALE",
           "SageLinkPredictor", "SAGE", "SAGEConv", "LinkPredictor", "link_pred_loss", "link_pred_clip_",
           "link_pred_hits", "LINK_PRED_HIDDEN", "LINK_PRED_LAYERS", "LINK_PRED_CLIP",
           "ALBERT_HIDDEN", "ALBERT_LAYERS", "AGPVGG", "agp_sparsity", "agp_prune", "prunable", "global_sparsity",
           "AGP_START", "AGP_EVERY", "AGP_EVENTS", "AGP_INITIAL_SPARSITY", "AGP_FINAL_SPARSITY", "PATCHTST_PATCH_LEN",
           "PATCHTST_STRIDE",
                      "ConformerCTC", "ConformerBlock", "ConformerConvModule", "ConformerFeedForward", "ConformerSelfAttention",
           "ConformerSubsampling", "RelativeSelfAttention", "relative_sinusoids", "conformer_ctc_loss", "swish",
           "KAN", "KANLinear", "kan_b_splines", "kan_uniform_grid", "KAN_GRID_SIZE", "KAN_SPLINE_ORDER",
           "build_field_model",
           "DinoResNet", "DinoBasicBlock",
           "DINOHead", "DinoMultiCropWrapper", "DinoTeacher", "DINOLoss", "dino_student", "dino_teacher",
           "dino_ema_update", "dino_cosine_scheduler", "dino_clip_gradients", "dino_cancel_gradients_last_layer",
           "dino_params_groups", "dino_knn_top1",
           "DeepAR", "FeatureEmbedder", "StudentTProjection", "MeanScaler", "deepar_loss", "deepar_sample_paths",
           "student_t_log_prob", "student_t_sample",
           "mean_weighted_quantile_loss", "DEEPAR_LAGS", "DEEPAR_PREDICTION_LENGTH", "DEEPAR_CONTEXT_LENGTH",
           "DEEPAR_HIDDEN", "DEEPAR_LAYERS", "DEEPAR_DROPOUT", "DEEPAR_EMBEDDING", "DEEPAR_SAMPLES", "DEEPAR_QUANTILES",
           "DEEPAR_TIME_FEATURES", "deepar_time_features", "DINO_IMG", "DINO_LOCAL_IMG", "DINO_WIDTH",
           "DINO_OUT_DIM", "DINO_HIDDEN", "DINO_BOTTLENECK", "DINO_LOCAL_CROPS", "DINO_USE_BN_IN_HEAD",
           "nanogpt_init", "FIELD_ARCHS"]


def nanogpt_init(model: TinyGPT) -> TinyGPT:
    """nanoGPT's `_init_weights` on a `TinyGPT`: matrices N(0, 0.02²), the residual projections'
    N(0, (0.02 / sqrt(2·layers))²), biases 0; and the units and exposed layers the faults use."""
    layers = len(model.blocks)
    for name, p in model.named_parameters():  # the tied head is the embedding: named once
        if p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
            nn.init.normal_(p, 0.0, std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
    model.units = ["wte", "wpe", *(f"blocks.{i}" for i in range(layers)), "ln_f"]
    model.exposed = ["wte"]  # as the tied head
    return model


class EncoderClassifier(nn.Module):
    """The 8 rows of a digit as 8 tokens of 8 features: linear embedding, learned positions,
    `nn.TransformerEncoder` (pre-norm, GELU, dropout 0.1), mean pooling, a linear head."""

    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Linear(8, dim)
        self.pos = nn.Parameter(torch.zeros(1, 8, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)
        self.units = ["embed", *(f"encoder.layers.{i}" for i in range(layers)), "norm", "head"]
        self.exposed = ["head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(x) + self.pos)
        return self.head(self.norm(h).mean(dim=1))


class BasicBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu2(x + self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x))))))


class ResNet(nn.Module):
    """A stem conv + BatchNorm, `blocks` basic residual blocks, global average pooling, a linear head."""

    def __init__(self, channels: int = 16, blocks: int = 2) -> None:
        super().__init__()
        self.stem = nn.Sequential()
        self.stem.conv = nn.Conv2d(1, channels, 3, padding=1, bias=False)
        self.stem.bn = nn.BatchNorm2d(channels)
        self.stem.relu = nn.ReLU()
        self.blocks = nn.Sequential(*(BasicBlock(channels) for _ in range(blocks)))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, 10)
        self.units = ["stem", *(f"blocks.{i}" for i in range(blocks)), "head"]
        self.exposed = ["head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.blocks(self.stem(x))).flatten(1))


class GRULM(nn.Module):
    """Character LM as in pytorch/examples' word_language_model: embedding → GRU → linear decoder."""

    def __init__(self, vocab: int, dim: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, hidden, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)
        self.units = ["embed", "rnn", "decoder"]
        self.exposed = ["rnn", "decoder"]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(idx))
        return self.decoder(out)


class PatchEmbed(nn.Module):
    """timm's `PatchEmbed` with the class token and positions that follow it: (B, 1, 8, 8) → (B, 5, dim)."""

    def __init__(self, dim: int, patch: int = 4, image: int = 8) -> None:
        super().__init__()
        self.proj = nn.Conv2d(1, dim, patch, stride=patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.proj(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls_token.expand(len(x), -1, -1), tokens], dim=1) + self.pos_embed


class Attention(nn.Module):
    """timm's `Attention`: one fused qkv projection with biases, scaled dot-product, an output projection."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential()
        self.mlp.fc1 = nn.Linear(dim, 4 * dim)
        self.mlp.act = nn.GELU()
        self.mlp.fc2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """A small vision transformer (timm's `VisionTransformer` layout) with timm's init: truncated
    normal std 0.02 for linear weights, zero biases."""

    def __init__(self, dim: int = 32, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed(dim)
        self.blocks = nn.Sequential(*(ViTBlock(dim, heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
        nn.init.trunc_normal_(self.patch_embed.cls_token, std=0.02)
        self.units = ["patch_embed", *(f"blocks.{i}" for i in range(depth)), "norm", "head"]
        self.exposed = ["head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.blocks(self.patch_embed(x)))[:, 0])


class TiedLSTMLM(nn.Module):
    """pytorch/examples' `RNNModel('LSTM', tie_weights=True)`: uniform(±0.1) init of the embedding
    and decoder, zero decoder bias, dropout 0.2 around a 2-layer LSTM; the decoder's weight IS the
    embedding's (named once, as `encoder.weight`)."""

    def __init__(self, vocab: int, dim: int = 48, layers: int = 2, dropout: float = 0.2) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, layers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(dim, vocab)
        self.decoder.weight = self.encoder.weight
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        self.units = ["encoder", "rnn", "decoder"]
        self.exposed = ["rnn", "encoder"]  # the encoder's weight is also the decoder's

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.drop(self.encoder(idx)))
        return self.decoder(self.drop(out))


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.norm2(x))


class Mixer(nn.Module):
    """MLP-Mixer on (B, 1, 8, 8) digits: 4 patches of 4×4 pixels, `depth` mixer blocks."""

    def __init__(self, dim: int = 32, depth: int = 2, patch: int = 4) -> None:
        super().__init__()
        self.patch = patch
        self.stem = nn.Linear(patch * patch, dim)
        self.blocks = nn.Sequential(*(MixerBlock((8 // patch) ** 2, dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 10)
        self.units = ["stem", *(f"blocks.{i}" for i in range(depth)), "norm", "head"]
        self.exposed = ["head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.patch
        patches = x.unfold(2, p, p).unfold(3, p, p).reshape(len(x), -1, p * p)
        return self.head(self.norm(self.blocks(self.stem(patches))).mean(dim=1))


class TemporalBlock(nn.Module):
    def __init__(self, channels: int, dilation: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 3, padding=dilation, dilation=dilation)
        self.relu = nn.ReLU()
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.relu(self.conv(x)))


class TCN(nn.Module):
    """A digit's 8 rows as 8 time steps of 8 features: a Conv1d stem, dilated residual blocks
    (dilation 1, 2), mean over time, a linear head."""

    def __init__(self, channels: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.stem = nn.Conv1d(8, channels, 3, padding=1)
        self.blocks = nn.Sequential(*(TemporalBlock(channels, 2 ** i) for i in range(depth)))
        self.head = nn.Linear(channels, 10)
        self.units = ["stem", *(f"blocks.{i}" for i in range(depth)), "head"]
        self.exposed = ["stem", "head"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x.transpose(1, 2))).mean(dim=2))


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm: x / sqrt(mean(x²) + eps), times a learned gain (no bias, no mean)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class LlamaAttention(nn.Module):
    """Causal self-attention with rotary embeddings on q and k; wq, wk, wv, wo without biases."""

    def __init__(self, dim: int, heads: int, context: int, theta: float = 10000.0) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        inv_freq = 1.0 / theta ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim)
        angles = torch.outer(torch.arange(context).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (w(x).view(b, t, self.heads, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        cos, sin = self.cos[:t], self.sin[:t]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, c))


class SwiGLU(nn.Module):
    """LLaMA's FeedForward: w2(silu(w1 x) · w3 x), hidden = 2/3 of 4·dim rounded up to `multiple_of`."""

    def __init__(self, dim: int, multiple_of: int = 16) -> None:
        super().__init__()
        hidden = multiple_of * math.ceil(int(2 * 4 * dim / 3) / multiple_of)
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    def __init__(self, dim: int, heads: int, context: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = LlamaAttention(dim, heads, context)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = SwiGLU(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class Llama(nn.Module):
    """A tiny LLaMA (`tok_embeddings`, `layers.i.{attention,feed_forward}`, `norm`, `output`) with
    llama2.c's `_init_weights`: N(0, 0.02²) for linear and embedding weights, N(0, (0.02 /
    sqrt(2·layers))²) for the residual projections `wo` and `w3`."""

    def __init__(self, vocab: int, dim: int = 32, heads: int = 4, layers: int = 2, context: int = 32) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.Sequential(*(LlamaBlock(dim, heads, context) for _ in range(layers)))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("wo.weight", "w3.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
        self.units = ["tok_embeddings", *(f"layers.{i}" for i in range(layers)), "norm", "output"]
        self.hidden = [f"layers.{i}" for i in range(layers)]
        self.exposed = ["output"]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.output(self.norm(self.layers(self.tok_embeddings(idx))))


class ConvAutoencoder(nn.Module):
    """(B, 1, 8, 8) → 16×4×4 → 32×2×2 → back by transposed convs → sigmoid: a reconstruction in [0, 1]."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, channels, 3, stride=2, padding=1), nn.ReLU(),
                                     nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1), nn.ReLU())
        self.decoder = nn.Sequential(nn.ConvTranspose2d(2 * channels, channels, 4, stride=2, padding=1), nn.ReLU(),
                                     nn.ConvTranspose2d(channels, 1, 4, stride=2, padding=1), nn.Sigmoid())
        self.units = ["encoder.0", "encoder.2", "decoder.0", "decoder.2"]
        self.hidden = ["encoder.2", "decoder.0"]
        self.exposed = list(self.units)  # no normalisation anywhere

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


class RecSys(nn.Module):
    """DLRM-style: one embedding per sparse field, a mean `EmbeddingBag` over the item history,
    a bottom MLP on the dense features, concatenated into a top MLP and a one-logit head."""

    def __init__(self, cardinalities: tuple[int, ...], items: int, dense: int, dim: int = 16) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, dim) for n in cardinalities)
        self.history = nn.EmbeddingBag(items, dim, mode="mean")
        self.bottom = nn.Sequential(nn.Linear(dense, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear((len(cardinalities) + 2) * dim, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.head = nn.Linear(32, 1)
        self.units = ["embeddings", "history", "bottom", "top", "head"]
        self.hidden = ["bottom", "top"]
        self.exposed = ["embeddings.0", "top.0", "head"]

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        sparse = [table(batch["sparse"][:, i]) for i, table in enumerate(self.embeddings)]
        features = torch.cat([*sparse, self.history(batch["history"]), self.bottom(batch["dense"])], dim=1)
        return self.head(self.top(features)).squeeze(1)


class SparseMoE(nn.Module):
    """Mixtral's `MixtralSparseMoeBlock`: a router Linear gives each token's expert logits; the top
    `k` experts' softmax weights, renormalised, mix their outputs. Returns (output, aux) with
    Switch's load-balancing loss, experts · Σ_e (share of tokens routed to e) · (mean router prob of e)."""

    def __init__(self, dim: int, experts: int = 4, k: int = 2) -> None:
        super().__init__()
        self.k = k
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.gate(tokens), dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(probs, self.k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(tokens.dtype)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            if rows.numel() == 0:  # no token chose this expert in this batch
                continue
            out = out.index_add(0, rows, (expert(tokens[rows]) * weights[rows, slot, None]).to(out.dtype))
        routed = torch.nn.functional.one_hot(chosen, len(self.experts)).float().sum(1).mean(0) / self.k
        aux = len(self.experts) * (routed * probs.mean(0)).sum()
        return out.reshape(x.shape), aux


class MoEBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.moe = SparseMoE(dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln_1(x)).split(c, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        moe, aux = self.moe(self.ln_2(x))
        return x + moe, aux


class MoELM(nn.Module):
    """A small sparse-MoE character LM (`embed_tokens`, `embed_positions`, `layers.i`, `norm`,
    `lm_head`, untied); `forward` returns (logits, aux) where aux is the layers' mean
    load-balancing loss times `router_aux_coef`, as HF's Mixtral adds it to the LM loss."""

    def __init__(self, vocab: int, dim: int = 32, heads: int = 4, layers: int = 2, context: int = 32,
                 router_aux_coef: float = 0.01) -> None:
        super().__init__()
        self.router_aux_coef = router_aux_coef
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.embed_positions = nn.Embedding(context, dim)
        self.layers = nn.ModuleList(MoEBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.units = ["embed_tokens", "embed_positions", *(f"layers.{i}" for i in range(layers)), "norm", "lm_head"]
        self.hidden = [f"layers.{i}" for i in range(layers)]
        self.exposed = ["lm_head"]

    def forward(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed_tokens(idx) + self.embed_positions(torch.arange(idx.shape[1], device=idx.device))
        aux = []
        for layer in self.layers:
            x, layer_aux = layer(x)
            aux.append(layer_aux)
        return self.lm_head(self.norm(x)), self.router_aux_coef * torch.stack(aux).mean()


def moe_lm_loss(output: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy plus the router's auxiliary loss."""
    logits, aux = output
    return torch.nn.functional.cross_entropy(logits.flatten(0, -2), targets.flatten()) + aux


class VAE(nn.Module):
    """pytorch/examples' VAE on 64 pixels: 64 → 256 → (mu, logvar) of 8 → 256 → 64 logits. Samples
    z = mu + eps·std in training, z = mu in eval. Returns (logits, mu, logvar)."""

    def __init__(self, pixels: int = 64, hidden: int = 256, latent: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(pixels, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, pixels)
        self.units = ["fc1", "fc21", "fc22", "fc3", "fc4"]
        self.hidden = ["fc1", "fc3"]
        self.exposed = list(self.units)  # no normalisation anywhere

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = torch.relu(self.fc1(x.flatten(1)))
        mu, logvar = self.fc21(h), self.fc22(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar) if self.training else mu
        return self.fc4(torch.relu(self.fc3(z))).view_as(x), mu, logvar


def vae_loss(output: tuple[torch.Tensor, torch.Tensor, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """pytorch/examples' `loss_function` (BCE summed over pixels + KL divergence), per sample; the
    decoder gives logits (BCE-with-logits is autocast-safe)."""
    logits, mu, logvar = output
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return (bce + kld) / len(targets)


class DoubleConv(nn.Module):
    """(conv 3×3 → BatchNorm → ReLU) × 2, bias-free convs (milesial/Pytorch-UNet)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.double_conv = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(cin, cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.maxpool_conv(x)


class Up(nn.Module):
    """Transposed-conv upsampling ×2, concatenation with the skip connection, DoubleConv."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(cin, cin // 2, kernel_size=2, stride=2)
        self.conv = DoubleConv(cin, cout)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        x1 = self.up(x1)
        return self.conv(torch.cat([x2, x1], dim=1))


class UNet(nn.Module):
    """inc → down1 → down2 → up1 (skip of down1) → up2 (skip of inc) → outc: (B, 1, 16, 16) images
    to (B, classes, 16, 16) logits."""

    def __init__(self, classes: int, channels: int = 8) -> None:
        super().__init__()
        c = channels
        self.inc = DoubleConv(1, c)
        self.down1 = Down(c, 2 * c)
        self.down2 = Down(2 * c, 4 * c)
        self.up1 = Up(4 * c, 2 * c)
        self.up2 = Up(2 * c, c)
        self.outc = nn.Conv2d(c, classes, kernel_size=1)
        self.units = ["inc", "down1", "down2", "up1", "up2", "outc"]
        self.hidden = ["down1", "down2", "up1", "up2"]
        self.exposed = ["outc"]  # every other conv is followed by a BatchNorm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        return self.outc(self.up2(self.up1(x3, x2), x1))


class PositionalEncoding(nn.Module):
    """The tutorial's sinusoidal positions (a buffer, no parameters), then dropout."""

    def __init__(self, dim: int, dropout: float, maxlen: int = 64) -> None:
        super().__init__()
        den = torch.exp(-torch.arange(0, dim, 2) * math.log(10000) / dim)
        pos = torch.arange(maxlen).unsqueeze(1)
        embedding = torch.zeros(maxlen, dim)
        embedding[:, 0::2], embedding[:, 1::2] = torch.sin(pos * den), torch.cos(pos * den)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pos_embedding", embedding.unsqueeze(0))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.dropout(tokens + self.pos_embedding[:, : tokens.shape[1]])


class Seq2Seq(nn.Module):
    """An encoder-decoder transformer over token IDs; `forward(batch)` takes the dict batch and
    returns (B, T, vocab) logits for the decoder's positions."""

    def __init__(self, vocab: int, dim: int = 32, heads: int = 4, layers: int = 2, pad: int = 0) -> None:
        super().__init__()
        self.dim, self.pad = dim, pad
        self.src_tok_emb = nn.Embedding(vocab, dim)
        self.tgt_tok_emb = nn.Embedding(vocab, dim)
        self.positional_encoding = PositionalEncoding(dim, dropout=0.1)
        self.transformer = nn.Transformer(dim, heads, layers, layers, dim_feedforward=2 * dim, dropout=0.1)
        self.generator = nn.Linear(dim, vocab)
        encoder = [f"transformer.encoder.layers.{i}" for i in range(layers)]
        decoder = [f"transformer.decoder.layers.{i}" for i in range(layers)]
        self.units = ["src_tok_emb", "tgt_tok_emb", *encoder, "transformer.encoder.norm", *decoder,
                      "transformer.decoder.norm", "generator"]
        self.hidden = [*encoder, *decoder]
        self.exposed = ["generator"]

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        src, tgt = batch["input_ids"], batch["decoder_input_ids"]
        src_padding = batch["attention_mask"] == 0
        causal = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool, device=tgt.device).triu(1)
        out = self.transformer(  # sequence-first, as the tutorial's nn.Transformer (batch_first=False)
            self.positional_encoding(self.src_tok_emb(src) * math.sqrt(self.dim)).transpose(0, 1),
            self.positional_encoding(self.tgt_tok_emb(tgt) * math.sqrt(self.dim)).transpose(0, 1),
            tgt_mask=causal, src_key_padding_mask=src_padding, tgt_key_padding_mask=tgt == self.pad,
            memory_key_padding_mask=src_padding)
        return self.generator(out.transpose(0, 1))


def seq2seq_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Token cross-entropy over the labels that are not padding (-100), with label smoothing 0.1."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, -2), labels.flatten(), ignore_index=-100,
                                             label_smoothing=0.1)


class GCNConv(nn.Module):
    """One graph convolution, D^-1/2 (A + I) D^-1/2 X W + b (Kipf's pygcn `GraphConvolution`:
    a `weight` (in, out) and a `bias`, uniform ±1/sqrt(out)), with the messages of `edge_index`
    (2, E: source, target) gathered and summed into their targets by `index_add_`."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(cout)
        self.weight = nn.Parameter(torch.empty(cin, cout).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(cout).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        loops = torch.arange(n, device=x.device)
        src = torch.cat([edge_index[0], loops])
        dst = torch.cat([edge_index[1], loops])
        degree = torch.zeros(n, device=x.device).index_add_(0, dst, torch.ones_like(dst, dtype=torch.float))
        norm = degree[src].rsqrt() * degree[dst].rsqrt()
        h = torch.mm(x, self.weight)
        out = torch.zeros_like(h).index_add_(0, dst, h[src] * norm.unsqueeze(1).to(h.dtype))
        return out + self.bias


class GCN(nn.Module):
    """Full-batch node classifier: dropout → GCNConv → ReLU, twice, dropout → GCNConv to class
    logits; `forward(graph)` takes the dict {`x`: node features, `edge_index`}."""

    def __init__(self, features: int, classes: int, hidden: int = 32, dropout: float = 0.5) -> None:
        super().__init__()
        self.dropout = dropout
        self.convs = nn.ModuleList([GCNConv(features, hidden), GCNConv(hidden, hidden), GCNConv(hidden, classes)])
        self.units = ["convs.0", "convs.1", "convs.2"]
        self.hidden = ["convs.0", "convs.1"]
        self.exposed = list(self.units)  # no normalisation anywhere

    def forward(self, graph: dict[str, torch.Tensor]) -> torch.Tensor:
        x, edge_index = graph["x"], graph["edge_index"]
        for i, conv in enumerate(self.convs):
            x = conv(torch.nn.functional.dropout(x, self.dropout, self.training), edge_index)
            if i < len(self.convs) - 1:
                x = torch.relu(x)
        return x


def _view_encoder(channels: int) -> nn.Sequential:
    """SimCLR's and BYOL's encoder: two BatchNorm convs (8×8 → 4×4) and a global average pool."""
    encoder = nn.Sequential()
    encoder.conv1 = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1, bias=False), nn.BatchNorm2d(channels), nn.ReLU())
    encoder.conv2 = nn.Sequential(nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(2 * channels), nn.ReLU())
    encoder.pool = nn.AdaptiveAvgPool2d(1)
    return encoder


class SimCLR(nn.Module):
    """A BatchNorm CNN encoder (8×8 → 4×4 → pooled 32 features) and a projection head to 16 dims;
    returns the projections z of a (2B, 1, 8, 8) batch of views."""

    def __init__(self, channels: int = 16, projection: int = 16) -> None:
        super().__init__()
        self.encoder = _view_encoder(channels)
        self.projector = nn.Sequential(nn.Linear(2 * channels, 2 * channels), nn.ReLU(),
                                       nn.Linear(2 * channels, projection))
        self.units = ["encoder.conv1", "encoder.conv2", "projector.0", "projector.2"]
        self.hidden = ["encoder.conv2", "projector.0"]
        self.exposed = ["projector.0", "projector.2"]  # no BatchNorm after them (the loss normalises z)

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        return self.projector(self.encoder(views).flatten(1))


def info_nce_loss(z: torch.Tensor, _targets=None, temperature: float = 0.2) -> torch.Tensor:
    """NT-Xent over 2B projections (views i and i + B are a pair): cosine similarities / τ, each
    row's own similarity masked out, cross-entropy towards its pair (SimCLR's `LARGE_NUM` mask)."""
    z = torch.nn.functional.normalize(z, dim=1)
    n = len(z) // 2
    logits = z @ z.T / temperature
    logits = logits - torch.eye(len(z), device=z.device) * 1e9
    pairs = torch.cat([torch.arange(n, 2 * n), torch.arange(n)]).to(z.device)
    return torch.nn.functional.cross_entropy(logits, pairs)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """DDPM's sinusoidal embedding of integer timesteps (the transformer's positions): (B,) → (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, device=t.device) / (half - 1))
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.sin(), args.cos()], dim=-1)


class TimeResBlock(nn.Module):
    """DDPM's ResnetBlock: GroupNorm → SiLU → conv, plus a projection of the time embedding per
    channel, GroupNorm → SiLU → conv, added to the input (a 1×1 conv where the channels change)."""

    def __init__(self, cin: int, cout: int, tdim: int, groups: int = 2) -> None:
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.time_proj = nn.Linear(tdim, cout)
        self.norm2 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(torch.nn.functional.silu(self.norm1(x)))
        h = h + self.time_proj(torch.nn.functional.silu(temb))[:, :, None, None]
        h = self.conv2(torch.nn.functional.silu(self.norm2(h)))
        return self.skip(x) + h


class Denoiser(nn.Module):
    """A small DDPM U-Net for 8×8 images: init conv, a residual block at 8×8, a strided-conv
    downsample, a residual block at 4×4, nearest upsample + conv, concatenation with the 8×8
    skip, a residual block, GroupNorm → SiLU → conv to the predicted noise."""

    def __init__(self, channels: int = 8, tdim: int = 32) -> None:
        super().__init__()
        c = channels
        self.tdim = tdim
        self.time_mlp = nn.Sequential(nn.Linear(tdim, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.init_conv = nn.Conv2d(1, c, 3, padding=1)
        self.down1 = TimeResBlock(c, c, tdim)
        self.downsample = nn.Conv2d(c, c, 3, stride=2, padding=1)
        self.mid = TimeResBlock(c, 2 * c, tdim)
        self.upsample = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(2 * c, c, 3, padding=1))
        self.up1 = TimeResBlock(2 * c, c, tdim)
        self.final = nn.Sequential(nn.GroupNorm(2, c), nn.SiLU(), nn.Conv2d(c, 1, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        temb = self.time_mlp(timestep_embedding(t, self.tdim))
        h0 = self.init_conv(x)
        h1 = self.down1(h0, temb)
        h = self.mid(self.downsample(h1), temb)
        h = self.up1(torch.cat([self.upsample(h), h1], dim=1), temb)
        return self.final(h)


class GaussianDiffusion(nn.Module):
    """DDPM training: the linear β schedule (1e-4 → 0.02 over `timesteps`) and its √ᾱ, √(1−ᾱ) as
    buffers; `forward(x0)` draws t ~ U{0, …, T−1} and ε ~ N(0, I) per sample, noises x0 to x_t and
    returns (the denoiser's ε prediction, ε)."""

    def __init__(self, model: nn.Module, timesteps: int = 1000) -> None:
        super().__init__()
        self.model = model
        self.timesteps = timesteps
        betas = torch.linspace(1e-4, 0.02, timesteps)
        alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.register_buffer("sqrt_alphas_cumprod", alphas_cumprod.sqrt())
        self.register_buffer("sqrt_one_minus_alphas_cumprod", (1.0 - alphas_cumprod).sqrt())
        units = ["time_mlp", "init_conv", "down1", "downsample", "mid", "upsample", "up1", "final"]
        self.units = [f"model.{u}" for u in units]
        self.hidden = ["model.down1", "model.mid", "model.up1"]
        self.exposed = ["model.final.2"]  # every other layer's output meets a GroupNorm on its way to the loss

    def forward(self, x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.randint(0, self.timesteps, (len(x0),), device=x0.device)
        noise = torch.randn_like(x0)
        x_t = self.sqrt_alphas_cumprod[t].view(-1, 1, 1, 1) * x0 + \
            self.sqrt_one_minus_alphas_cumprod[t].view(-1, 1, 1, 1) * noise
        return self.model(x_t, t), noise


def ddpm_loss(output: tuple[torch.Tensor, torch.Tensor], _targets=None) -> torch.Tensor:
    """The simple DDPM objective: the MSE between the predicted and the drawn noise."""
    prediction, noise = output
    return torch.nn.functional.mse_loss(prediction, noise)


class CTCRecognizer(nn.Module):
    """(B, T, features) frames with an `attention_mask` → ((T', B, classes) log-probabilities,
    (B,) output lengths), T' = the frames after the front-end's stride 2."""

    def __init__(self, features: int, classes: int, channels: int = 32, hidden: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(features, channels, 5, stride=2, padding=2, bias=False),
                                  nn.BatchNorm1d(channels), nn.Hardtanh(0, 20))
        self.rnn = nn.LSTM(channels, hidden, layers, batch_first=True, bidirectional=True, dropout=0.1)
        self.fc = nn.Linear(2 * hidden, classes)
        self.units = ["conv", "rnn", "fc"]
        self.hidden = ["conv", "rnn"]
        self.exposed = ["rnn", "fc"]

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = batch["attention_mask"].sum(dim=1)
        x = self.conv(batch["input_features"].transpose(1, 2)).transpose(1, 2)
        out, _ = self.rnn(x)
        log_probs = torch.nn.functional.log_softmax(self.fc(out), dim=-1).transpose(0, 1)
        return log_probs, torch.div(lengths + 2 * 2 - 5, 2, rounding_mode="floor") + 1


CTC_LOSS = nn.CTCLoss(blank=0, zero_infinity=True)


def ctc_loss(output: tuple[torch.Tensor, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """CTC over labels padded with -100 (wav2vec2's `labels >= 0` mask gives the target lengths
    and the flattened targets); mean over the batch of the loss per target symbol."""
    log_probs, lengths = output
    mask = labels >= 0
    return CTC_LOSS(log_probs, labels.masked_select(mask), lengths, mask.sum(dim=-1))


def swish(x: torch.Tensor) -> torch.Tensor:
    """Swish (Ramachandran et al.): x · σ(x), the Conformer's activation (`nn.SiLU`)."""
    return x * torch.sigmoid(x)


class Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swish(x)


def xavier_linear(in_features: int, out_features: int, bias: bool = True) -> nn.Linear:
    """sooftware/conformer's `Linear`: an `nn.Linear` with Xavier-uniform weights and zero biases."""
    linear = nn.Linear(in_features, out_features, bias=bias)
    nn.init.xavier_uniform_(linear.weight)
    if bias:
        nn.init.zeros_(linear.bias)
    return linear


class ConformerSubsampling(nn.Module):
    """The 2-D conv subsampling: the (B, T, F) frames as a 1-channel image through two 3×3 convs
    of stride 2, unpadded, each with a ReLU, to (B, T', d · F') with T' = ⌊(⌊(T − 1)/2⌋ − 1)/2⌋
    (F' likewise); the output lengths as sooftware writes them, L // 4 − 1 (never past the frames
    the convs keep)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, channels, 3, stride=2), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, stride=2), nn.ReLU())

    @staticmethod
    def output_size(size: int) -> int:
        return ((size - 1) // 2 - 1) // 2

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.conv(x.unsqueeze(1))  # (B, d, T', F')
        return out.permute(0, 2, 1, 3).flatten(2), torch.div(lengths, 4, rounding_mode="floor") - 1


class ConformerFeedForward(nn.Module):
    """The macaron feed-forward module: LayerNorm → Linear(d, 4d) → Swish → dropout → Linear(4d, d)
    → dropout (its block adds half of it to the residual)."""

    def __init__(self, dim: int, expansion: int = 4, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), xavier_linear(dim, dim * expansion), Swish(), nn.Dropout(dropout),
                                 xavier_linear(dim * expansion, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def relative_sinusoids(length: int, dim: int) -> torch.Tensor:
    """Transformer-XL's sinusoids of the relative positions length − 1, …, 0, …, −(length − 1)
    (row m: position length − 1 − m; sin on even, cos on odd features, frequencies 10000^(−2i/d)),
    (2·length − 1, dim)."""
    position = (length - 1 - torch.arange(2 * length - 1, dtype=torch.float32)).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(2 * length - 1, dim)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


class RelativeSelfAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL's relative positions, as the Conformer takes it:
    per head, score(i, j) = ((q_i + u) · k_j + (q_i + v) · W_p r_{i−j}) / √d_head with learned
    biases u, v (Xavier-uniform) and r the relative sinusoids (`relative_sinusoids`) projected by a
    bias-free W_p; softmax over j, dropout, the values, an output projection. No mask: sooftware's
    encoder passes none, padded frames are attended to. `last_attention` keeps the weights."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.heads, self.dim_head = heads, dim // heads
        self.query, self.key, self.value = (xavier_linear(dim, dim) for _ in range(3))
        self.pos = xavier_linear(dim, dim, bias=False)
        self.u_bias = nn.Parameter(nn.init.xavier_uniform_(torch.empty(heads, self.dim_head)))
        self.v_bias = nn.Parameter(nn.init.xavier_uniform_(torch.empty(heads, self.dim_head)))
        self.dropout = nn.Dropout(dropout)
        self.out = xavier_linear(dim, dim)
        self.last_attention: torch.Tensor | None = None

    def split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], self.heads, self.dim_head).transpose(-3, -2)  # (…, H, T, d_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, dim = x.shape
        q = self.query(x).view(b, t, self.heads, self.dim_head)
        k, v = self.split(self.key(x)), self.split(self.value(x))
        r = self.split(self.pos(relative_sinusoids(t, dim).to(x)))  # (H, 2T − 1, d_head)
        content = ((q + self.u_bias).transpose(1, 2)) @ k.transpose(-1, -2)  # (B, H, T, T)
        by_offset = ((q + self.v_bias).transpose(1, 2)) @ r.transpose(-1, -2)  # (B, H, T, 2T − 1)
        index = (t - 1 - torch.arange(t, device=x.device).unsqueeze(1) + torch.arange(t, device=x.device))
        position = by_offset.gather(-1, index.expand(b, self.heads, t, t))  # row i − j of the sinusoids
        weights = torch.softmax((content + position) / math.sqrt(self.dim_head), dim=-1)
        self.last_attention = weights.detach()
        context = (self.dropout(weights) @ v).transpose(1, 2).reshape(b, t, dim)
        return self.out(context)


class ConformerSelfAttention(nn.Module):
    """The multi-headed self-attention module: LayerNorm → `RelativeSelfAttention` → dropout."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attention = RelativeSelfAttention(dim, heads, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.attention(self.norm(x)))


class ConformerConvModule(nn.Module):
    """The convolution module on (B, T, d): LayerNorm, then over time (B, d, T): a pointwise conv
    to 2d channels → GLU over the channels (the first half × σ(the second)) → a depthwise conv of
    `kernel` (odd, 'same' padding, no bias) → BatchNorm1d → Swish → a pointwise conv → dropout."""

    def __init__(self, dim: int, kernel: int = 15, dropout: float = 0.1) -> None:
        super().__init__()
        assert kernel % 2 == 1
        self.norm = nn.LayerNorm(dim)
        self.pointwise_in = nn.Conv1d(dim, 2 * dim, 1)
        self.glu = nn.GLU(dim=1)
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=(kernel - 1) // 2, groups=dim, bias=False)
        self.batch_norm = nn.BatchNorm1d(dim)
        self.activation = Swish()
        self.pointwise_out = nn.Conv1d(dim, dim, 1)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.glu(self.pointwise_in(self.norm(x).transpose(1, 2)))
        h = self.activation(self.batch_norm(self.depthwise(h)))
        return self.dropout(self.pointwise_out(h)).transpose(1, 2)


class ConformerBlock(nn.Module):
    """Gulati et al.'s block (eq. 1): x + ½ FFN(x), + MHSA, + Conv, + ½ FFN, then LayerNorm."""

    def __init__(self, dim: int, heads: int, kernel: int, dropout: float = 0.1, half_step: float = 0.5) -> None:
        super().__init__()
        self.half_step = half_step
        self.ff1 = ConformerFeedForward(dim, dropout=dropout)
        self.attn = ConformerSelfAttention(dim, heads, dropout)
        self.conv = ConformerConvModule(dim, kernel, dropout)
        self.ff2 = ConformerFeedForward(dim, dropout=dropout)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.half_step * self.ff1(x)
        x = x + self.attn(x)
        x = x + self.conv(x)
        x = x + self.half_step * self.ff2(x)
        return self.norm(x)


class ConformerCTC(nn.Module):
    """sooftware/conformer's `Conformer` (Gulati et al.'s encoder and a CTC head), small: the conv
    subsampling (`ConformerSubsampling`, ×4 in time and in the bands) → Linear(d · F', d) and
    dropout (its `input_projection`) → `layers` `ConformerBlock`s → a bias-free Linear to the blank
    and the tokens → log_softmax; its forward takes the speech collator's dict (`input_features`
    (B, T, F), `attention_mask`) and returns ((B, T', classes) log-probabilities, (B,) lengths
    L // 4 − 1) as sooftware's does. Its Linears Xavier-uniform with zero biases (its `Linear`),
    its convs PyTorch's defaults. Small: d 32, 2 blocks, 4 heads of 8, conv kernel 15, dropout 0.1
    everywhere (sooftware's defaults 512, 17, 8, 31; its README's example encoder_dim 32, 3 layers)."""

    def __init__(self, classes: int, features: int = MEL_SPEECH.features, dim: int = 32, layers: int = 2,
                 heads: int = 4, kernel: int = 15, dropout: float = 0.1) -> None:
        super().__init__()
        self.conv_subsample = ConformerSubsampling(dim)
        self.input_projection = nn.Sequential(xavier_linear(dim * ConformerSubsampling.output_size(features), dim),
                                              nn.Dropout(dropout))
        self.layers = nn.ModuleList(ConformerBlock(dim, heads, kernel, dropout) for _ in range(layers))
        self.fc = xavier_linear(dim, classes, bias=False)
        self.units = ["conv_subsample", "input_projection", *(f"layers.{i}" for i in range(layers)), "fc"]
        self.hidden = [f"layers.{i}" for i in range(layers)]
        # Only the head: every block ends in its LayerNorm, so scaling anything before it is
        # normalised away (the subsampling's last conv ×300: loss 0.04 on, seeds 2 and 3; the last
        # block's ff2 output Linear or conv pointwise_out ×100-300: a jump to 0.4-2.5, back by 10
        # steps, seeds 0-2).
        self.exposed = ["fc"]

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = self.conv_subsample(batch["input_features"], batch["attention_mask"].sum(dim=1))
        x = self.input_projection(x)
        for layer in self.layers:
            x = layer(x)
        return torch.log_softmax(self.fc(x), dim=-1), lengths


CONFORMER_CTC_LOSS = nn.CTCLoss(blank=0)


def conformer_ctc_loss(output: tuple[torch.Tensor, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """sooftware's README: `nn.CTCLoss()` (blank 0, mean over the batch of the loss per target
    token, no `zero_infinity`) on the log-probabilities as (T', B, C) with the encoder's output
    lengths; the labels are token IDs 0 … symbols − 1 padded with -100 (the target lengths from the
    mask), the head's index t + 1 token t's, 0 the blank."""
    log_probs, lengths = output
    mask = labels >= 0
    return CONFORMER_CTC_LOSS(log_probs.transpose(0, 1), labels.masked_select(mask) + 1, lengths, mask.sum(dim=-1))


class MambaBlock(nn.Module):
    """mamba-minimal's `MambaBlock`: in_proj to (x, z), depthwise causal Conv1d on x, SiLU, the
    selective SSM (Δ, B, C from x by x_proj, Δ through dt_proj and softplus, A = −exp(A_log), a
    D skip), y · SiLU(z), out_proj. dt_proj is initialised as `mamba_simple.Mamba` does it (Δ
    log-uniform in [1e-3, 1e-1] through the inverse softplus as its bias)."""

    def __init__(self, dim: int, state: int = 8, conv: int = 4, expand: int = 2) -> None:
        super().__init__()
        inner, self.state = expand * dim, state
        self.dt_rank = math.ceil(dim / 16)
        self.in_proj = nn.Linear(dim, 2 * inner, bias=False)
        self.conv1d = nn.Conv1d(inner, inner, conv, groups=inner, padding=conv - 1)
        self.x_proj = nn.Linear(inner, self.dt_rank + 2 * state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, inner)
        nn.init.uniform_(self.dt_proj.weight, -self.dt_rank ** -0.5, self.dt_rank ** -0.5)
        dt = torch.exp(torch.rand(inner) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3)).clamp(min=1e-4)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.arange(1, state + 1, dtype=torch.float32).repeat(inner, 1)))
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        x, z = self.in_proj(x).chunk(2, dim=-1)
        x = torch.nn.functional.silu(self.conv1d(x.transpose(1, 2))[:, :, :length].transpose(1, 2))
        delta, B, C = self.x_proj(x).split([self.dt_rank, self.state, self.state], dim=-1)
        delta = torch.nn.functional.softplus(self.dt_proj(delta))
        y = selective_scan(x, delta, -torch.exp(self.A_log.float()), B, C, self.D.float())
        return self.out_proj(y * torch.nn.functional.silu(z))


def selective_scan(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                   D: torch.Tensor) -> torch.Tensor:
    """mamba-minimal's selective scan, h_t = exp(Δ_t A) h_{t−1} + Δ_t B_t u_t, y_t = C_t h_t + D u_t
    over (batch, length, inner) inputs and an (inner, state) A, with the recurrence composed as
    a parallel (Hillis–Steele) scan in log2(length) steps instead of one Python step per token:
    the same sums (`sequential_scan` is the reference)."""
    a = torch.exp(delta.unsqueeze(-1) * A)
    h = delta.unsqueeze(-1) * B.unsqueeze(2) * u.unsqueeze(-1)
    offset = 1
    while offset < u.shape[1]:  # (a, h)_t ∘ (a, h)_{t−offset}: h_t += a_t h_{t−offset}, a_t *= a_{t−offset}
        h = torch.cat([h[:, :offset], h[:, offset:] + a[:, offset:] * h[:, :-offset]], dim=1)
        a = torch.cat([a[:, :offset], a[:, offset:] * a[:, :-offset]], dim=1)
        offset *= 2
    return (h * C.unsqueeze(2)).sum(-1) + u * D


def sequential_scan(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor,
                    D: torch.Tensor) -> torch.Tensor:
    """mamba-minimal's `selective_scan` as written there: one step of the recurrence per token."""
    deltaA = torch.exp(delta.unsqueeze(-1) * A)
    deltaB_u = delta.unsqueeze(-1) * B.unsqueeze(2) * u.unsqueeze(-1)
    h = torch.zeros(u.shape[0], u.shape[2], A.shape[1], dtype=deltaA.dtype)
    ys = []
    for t in range(u.shape[1]):
        h = deltaA[:, t] * h + deltaB_u[:, t]
        ys.append(torch.einsum("bdn,bn->bd", h, C[:, t]))
    return torch.stack(ys, dim=1) + u * D


class MambaResidualBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = RMSNorm(dim)  # mamba-minimal's: x · rsqrt(mean(x²) + eps) · weight, as LLaMA's
        self.mixer = MambaBlock(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mixer(self.norm(x))


class Mamba(nn.Module):
    """mamba-minimal's `Mamba` LM: embedding → residual Mamba blocks (pre-RMSNorm) → norm_f → an
    lm_head tied to the embedding. A_log and D are exempt from weight decay (`no_decay`, their
    `_no_weight_decay` in mamba_simple)."""

    def __init__(self, vocab: int, dim: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(MambaResidualBlock(dim) for _ in range(layers))
        self.norm_f = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embedding.weight
        nn.init.normal_(self.embedding.weight, std=0.02)  # mamba_simple's _init_weights
        for layer in self.layers:  # GPT-2's rescaling of the residual writes, as mamba_simple does
            nn.init.kaiming_uniform_(layer.mixer.out_proj.weight, a=math.sqrt(5))
            with torch.no_grad():
                layer.mixer.out_proj.weight /= math.sqrt(layers)
        self.units = ["embedding", *(f"layers.{i}" for i in range(layers)), "norm_f"]
        self.hidden = [f"layers.{i}" for i in range(layers)]
        self.exposed = ["embedding", f"layers.{layers - 1}.mixer.out_proj"]  # the tied head; a residual write
        self.no_decay = ("A_log", "D")

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm_f(x))


class NumericalFeatureTokenizer(nn.Module):
    """rtdl's tokenizer of numeric features: token_j = x_j · W_j + b_j, one d-vector pair per feature."""

    def __init__(self, features: int, dim: int) -> None:
        super().__init__()
        bound = dim ** -0.5
        self.weight = nn.Parameter(torch.empty(features, dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(features, dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight[None] * x[..., None] + self.bias[None]


class CategoricalFeatureTokenizer(nn.Module):
    """rtdl's tokenizer of categorical features: one embedding table over every column's categories
    (offsets as a buffer) and a bias per column."""

    def __init__(self, cardinalities: tuple[int, ...], dim: int) -> None:
        super().__init__()
        self.register_buffer("category_offsets", torch.tensor([0, *cardinalities[:-1]]).cumsum(0))
        bound = dim ** -0.5
        self.embeddings = nn.Embedding(sum(cardinalities), dim)
        nn.init.uniform_(self.embeddings.weight, -bound, bound)
        self.bias = nn.Parameter(torch.empty(len(cardinalities), dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embeddings(x + self.category_offsets[None]) + self.bias[None]


class CLSToken(nn.Module):
    """rtdl's [CLS] token: a learned d-vector appended to every row's tokens."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        bound = dim ** -0.5
        self.weight = nn.Parameter(torch.empty(dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, self.weight.expand(len(x), 1, -1)], dim=1)


class FTBlock(nn.Module):
    """An FT-Transformer block with pre-normalisation: attention (its LayerNorm skipped in the first
    block, as rtdl does), then a ReGLU feed-forward; dropout 0.2 on attention, 0.1 in the FFN."""

    def __init__(self, dim: int, heads: int, first: bool) -> None:
        super().__init__()
        self.attention_normalization = nn.Identity() if first else nn.LayerNorm(dim)
        self.attention = nn.MultiheadAttention(dim, heads, dropout=0.2, batch_first=True)
        self.ffn_normalization = nn.LayerNorm(dim)
        hidden = int(dim * 4 / 3)
        self.linear_first = nn.Linear(dim, 2 * hidden)
        self.ffn_dropout = nn.Dropout(0.1)
        self.linear_second = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.attention_normalization(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        a, b = self.linear_first(self.ffn_normalization(x)).chunk(2, dim=-1)
        return x + self.linear_second(self.ffn_dropout(a * torch.relu(b)))


class FTTransformer(nn.Module):
    """Gorishniy et al.'s FT-Transformer (rtdl's layout): numeric and categorical feature tokens, a
    [CLS] token appended last, pre-norm Transformer blocks, a head (LayerNorm → ReLU → Linear) on
    the [CLS] token. Its batch is a dict of `x_num` and `x_cat`. The tokenizers, the [CLS] token,
    norms and biases are exempt from weight decay (`no_decay`, rtdl's `make_parameter_groups`)."""

    def __init__(self, numeric: int, cardinalities: tuple[int, ...], classes: int, dim: int = 32, heads: int = 4,
                 layers: int = 3) -> None:
        super().__init__()
        self.num_tokenizer = NumericalFeatureTokenizer(numeric, dim)
        self.cat_tokenizer = CategoricalFeatureTokenizer(cardinalities, dim)
        self.cls_token = CLSToken(dim)
        self.blocks = nn.ModuleList(FTBlock(dim, heads, first=i == 0) for i in range(layers))
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.ReLU(), nn.Linear(dim, classes))
        self.units = ["num_tokenizer", "cat_tokenizer", "cls_token", *(f"blocks.{i}" for i in range(layers)), "head"]
        self.hidden = [f"blocks.{i}" for i in range(layers)]
        self.exposed = ["num_tokenizer", "head.2"]  # the first block's attention has no LayerNorm before it
        self.no_decay = ("num_tokenizer", "cat_tokenizer", "cls_token")

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        tokens = torch.cat([self.num_tokenizer(batch["x_num"]), self.cat_tokenizer(batch["x_cat"])], dim=1)
        x = self.cls_token(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x[:, -1])


def smoothed_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy with label smoothing 0.1 (ConvNeXt's recipe)."""
    return torch.nn.functional.cross_entropy(logits, targets, label_smoothing=0.1)


class ConvNeXtLayerNorm(nn.Module):
    """ConvNeXt's LayerNorm over the channels of a channels-first (B, C, H, W) tensor."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(1, keepdim=True)
        var = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


def drop_path(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """timm's stochastic depth: each sample's residual branch dropped with probability p, kept ones ÷ (1 − p)."""
    if p == 0.0 or not training:
        return x
    keep = x.new_empty(x.shape[0], *(1,) * (x.dim() - 1)).bernoulli_(1 - p)
    return x * keep / (1 - p)


class ConvNeXtBlock(nn.Module):
    """ConvNeXt's block: depthwise 7×7 conv → channels-last LayerNorm → Linear ×4 → GELU → Linear,
    layer scale γ, stochastic depth on the residual branch."""

    def __init__(self, dim: int, drop: float, layer_scale: float) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale * torch.ones(dim))
        self.drop = drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.dwconv(x).permute(0, 2, 3, 1))
        h = (self.gamma * self.pwconv2(self.act(self.pwconv1(h)))).permute(0, 3, 1, 2)
        return x + drop_path(h, self.drop, self.training)


class ConvNeXt(nn.Module):
    """facebookresearch/ConvNeXt's classifier, small: a patchify stem (2×2 conv, stride 2, then a
    channels-first LayerNorm), stages of ConvNeXt blocks, downsampling layers (LayerNorm, 2×2
    conv stride 2) between them, global average pooling, LayerNorm, a linear head; trunc-normal
    init (std 0.02), biases 0, stochastic depth rising linearly to `drop_path_rate`."""

    def __init__(self, classes: int, dims: tuple[int, ...] = (16, 32), depths: tuple[int, ...] = (2, 2),
                 drop_path_rate: float = 0.1, layer_scale: float = 1e-6) -> None:
        super().__init__()
        self.downsample_layers = nn.ModuleList([nn.Sequential(nn.Conv2d(3, dims[0], 2, stride=2),
                                                              ConvNeXtLayerNorm(dims[0]))])
        for i in range(len(dims) - 1):
            self.downsample_layers.append(nn.Sequential(ConvNeXtLayerNorm(dims[i]),
                                                        nn.Conv2d(dims[i], dims[i + 1], 2, stride=2)))
        rates = torch.linspace(0, drop_path_rate, sum(depths)).tolist()
        self.stages = nn.ModuleList(
            nn.Sequential(*(ConvNeXtBlock(dim, rates[sum(depths[:i]) + j], layer_scale) for j in range(depth)))
            for i, (dim, depth) in enumerate(zip(dims, depths)))
        self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], classes)
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)
        stages = len(dims)
        self.units = [u for i in range(stages) for u in (f"downsample_layers.{i}", f"stages.{i}")] + ["norm", "head"]
        self.hidden = self.units[1:-2]
        self.exposed = ["head", f"stages.{stages - 1}.{depths[-1] - 1}.pwconv2"]  # a residual write (× γ)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for downsample, stage in zip(self.downsample_layers, self.stages):
            x = stage(downsample(x))
        return self.head(self.norm(x.mean((-2, -1))))


class BertMLM(nn.Module):
    """`BertForMaskedLM` from a small `BertConfig` (built, not downloaded), as `mlm`; `forward(batch)`
    takes the dict batch (`input_ids`, `attention_mask`) and returns the (B, T, vocab) logits of
    the MLM head, whose decoder is the word embeddings (`tie_word_embeddings`, the default)."""

    def __init__(self, vocab: int, dim: int = 64, heads: int = 4, layers: int = 2, positions: int = 32) -> None:
        super().__init__()
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(vocab_size=vocab, hidden_size=dim, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=4 * dim, max_position_embeddings=positions, pad_token_id=0)
        self.mlm = BertForMaskedLM(config)
        encoder = [f"mlm.bert.encoder.layer.{i}" for i in range(layers)]
        self.units = ["mlm.bert.embeddings", *encoder, "mlm.cls"]
        self.hidden = encoder
        # The tied decoder (the word embeddings), and a query projection: every other output meets a LayerNorm.
        self.exposed = ["mlm.bert.embeddings.word_embeddings", f"{encoder[-1]}.attention.self.query"]

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.mlm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


class SineLayer(nn.Module):
    """SIREN's `SineLayer`: sin(ω0 · (W x + b)), W uniform in ±1/in for the first layer and in
    ±sqrt(6/in)/ω0 after it (the bias keeps `nn.Linear`'s init)."""

    def __init__(self, features: int, out: int, first: bool, omega_0: float = 30.0) -> None:
        super().__init__()
        self.omega_0 = omega_0
        self.linear = nn.Linear(features, out)
        bound = 1 / features if first else math.sqrt(6 / features) / omega_0
        nn.init.uniform_(self.linear.weight, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sin(self.omega_0 * self.linear(x))


class Siren(nn.Module):
    """vsitzmann/siren's `Siren` with `outermost_linear=True`: a first sine layer, `hidden_layers`
    sine layers, a linear output initialised as the hidden layers are; (N, 2) coordinates in
    [−1, 1]² → (N, 1) values."""

    def __init__(self, features: int = 2, width: int = 64, hidden_layers: int = 2, out: int = 1,
                 omega_0: float = 30.0) -> None:
        super().__init__()
        layers = [SineLayer(features, width, True, omega_0),
                  *(SineLayer(width, width, False, omega_0) for _ in range(hidden_layers)), nn.Linear(width, out)]
        bound = math.sqrt(6 / width) / omega_0
        nn.init.uniform_(layers[-1].weight, -bound, bound)
        self.net = nn.Sequential(*layers)
        self.units = [f"net.{i}" for i in range(len(layers))]
        self.hidden = self.units[1:-1]
        self.exposed = [*(f"net.{i}.linear" for i in range(len(layers) - 1)), self.units[-1]]  # no normalisation

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        return self.net(coords)


def _shared_mlp(*widths: int, last_relu: bool = True) -> nn.Sequential:
    """PointNet's shared per-point MLP: 1×1 `Conv1d` + `BatchNorm1d` (+ ReLU) per width."""
    layers = []
    for i, (features, out) in enumerate(zip(widths, widths[1:])):
        layers += [nn.Conv1d(features, out, 1), nn.BatchNorm1d(out)]
        if last_relu or i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class TNet(nn.Module):
    """PointNet's input transform net (`STN3d`): a shared MLP over the (B, 3, N) points, a max-pool,
    an MLP to a 3×3 matrix whose last Linear starts at the identity (zero weights, the identity
    as its bias: the transform starts as no transform)."""

    def __init__(self, k: int = 3) -> None:
        super().__init__()
        self.k = k
        self.mlp = _shared_mlp(k, 16, 32, 64)
        self.fc = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(),
                                nn.Linear(32, 16), nn.BatchNorm1d(16), nn.ReLU())
        self.transform = nn.Linear(16, k * k)
        nn.init.zeros_(self.transform.weight)
        with torch.no_grad():
            self.transform.bias.copy_(torch.eye(k).flatten())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transform(self.fc(self.mlp(x).max(dim=2).values)).view(-1, self.k, self.k)


class PointNet(nn.Module):
    """PointNet's classifier (`PointNetCls` without the feature transform): (B, N, 3) points → the
    T-net's 3×3 transform applied to every point → shared MLP 3→32→32→64 (no ReLU after the
    last BatchNorm) → max over points → Linear/BatchNorm/ReLU 64→32→16 with dropout 0.3 → the
    logits; returns (logits, transform)."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.stn = TNet(3)
        self.mlp1 = _shared_mlp(3, 32, 32)
        self.mlp2 = _shared_mlp(32, 64, last_relu=False)
        self.head = nn.Sequential(nn.Linear(64, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 16),
                                  nn.Dropout(0.3), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, classes))
        self.units = ["stn", "mlp1", "mlp2", "head"]
        self.hidden = ["stn", "mlp1", "mlp2"]
        self.exposed = ["head.7", "stn.transform"]  # the logits; the transform (the BatchNorms follow every other)

    def forward(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        transform = self.stn(points.transpose(1, 2))
        x = torch.bmm(points, transform).transpose(1, 2)
        return self.head(self.mlp2(self.mlp1(x)).max(dim=2).values), transform


def pointnet_loss(output: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy plus 0.001 × the transform's orthogonality regulariser, the batch mean of
    ‖A Aᵀ − I‖_F (fxia22's `feature_transform_regularizer`, applied to the input transform)."""
    logits, transform = output
    identity = torch.eye(transform.shape[-1], dtype=transform.dtype)
    regulariser = torch.linalg.matrix_norm(transform @ transform.transpose(1, 2) - identity).mean()
    return torch.nn.functional.cross_entropy(logits, targets) + 0.001 * regulariser


def t5_sorter(vocab: int, dim: int = 64, heads: int = 4, layers: int = 2) -> nn.Module:
    """`T5ForConditionalGeneration` from a small `T5Config` (built, not downloaded), tagged with its
    units (`T5Sorter`); pad 0 is the decoder's start token, EOS 1."""
    from transformers import T5Config, T5ForConditionalGeneration

    class T5Sorter(T5ForConditionalGeneration):
        """The T5 model itself (so that the Trainer and the recorder see T5's own parameter names),
        with the zoo's `units`, `hidden` and `exposed`."""

        def __init__(self, config: T5Config) -> None:
            super().__init__(config)
            encoder = [f"encoder.block.{i}" for i in range(config.num_layers)]
            decoder = [f"decoder.block.{i}" for i in range(config.num_decoder_layers)]
            self.units = ["shared", *encoder, "encoder.final_layer_norm", *decoder, "decoder.final_layer_norm"]
            self.hidden = [*encoder, *decoder]
            # The shared embeddings (the tied head: logits scale with them), the last feed-forward output
            # (into the residual stream before the final RMS norm, which rescales but keeps its direction).
            self.exposed = ["shared", f"{decoder[-1]}.layer.2.DenseReluDense.wo"]

    config = T5Config(vocab_size=vocab, d_model=dim, d_kv=dim // heads, d_ff=2 * dim, num_layers=layers,
                      num_decoder_layers=layers, num_heads=heads, relative_attention_num_buckets=16,
                      relative_attention_max_distance=32, dropout_rate=0.1, pad_token_id=0, eos_token_id=1,
                      decoder_start_token_id=0)
    return T5Sorter(config)


class CLIP(nn.Module):
    """A CLIP-style two-tower model on (B, 1, 8, 8) digits: `image` (two convs, GELU, flattened) and `text` (token and
    position embeddings, one pre-LN `TransformerEncoderLayer`, a final LayerNorm, the masked mean
    over the caption's tokens) projected without bias to `embed` dims and L2-normalised;
    `forward(batch)` returns (image features, text features, logit scale), the scale being
    exp(`logit_scale`), initialised to 1/0.07 as CLIP does."""

    def __init__(self, vocab: int, length: int, width: int = 32, embed: int = 32) -> None:
        super().__init__()
        self.image = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.GELU(), nn.Conv2d(16, width, 3, stride=2,
                                                                                         padding=1),
                                   nn.GELU(), nn.Flatten())
        self.image_proj = nn.Linear(width * 16, embed, bias=False)  # the 4×4 map flattened: digits need their layout
        self.token = nn.Embedding(vocab, width, padding_idx=0)
        self.position = nn.Embedding(length, width)
        self.text = nn.TransformerEncoder(nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0,
                                                                     batch_first=True, norm_first=True), 1,
                                          enable_nested_tensor=False)
        self.text_norm = nn.LayerNorm(width)
        self.text_proj = nn.Linear(width, embed, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        # Text tower first: a detached text encoder leaves its embeddings without gradient, not the image tower.
        self.units = ["token", "position", "text", "text_norm", "text_proj", "image", "image_proj"]
        self.loose = ("logit_scale",)
        """Parameters of no unit: a group of their own, without weight decay (open_clip's exclusion)."""
        self.hidden = ["image", "text"]
        # No norm between them and the towers' L2 normalisation (which may shrug a scaling off; the truth says so).
        self.exposed = ["token", "image.0"]

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        image = nn.functional.normalize(self.image_proj(self.image(batch["pixel_values"])), dim=-1)
        ids = batch["input_ids"]
        keep = ids != 0
        x = self.token(ids) + self.position(torch.arange(ids.shape[1]))
        x = self.text_norm(self.text(x, src_key_padding_mask=~keep))
        pooled = (x * keep.unsqueeze(-1)).sum(1) / keep.sum(1, keepdim=True).clamp(min=1)
        text = nn.functional.normalize(self.text_proj(pooled), dim=-1)
        return image, text, self.logit_scale.exp()

    def clamp_logit_scale(self) -> None:
        """open_clip's `logit_scale.clamp_(0, ln 100)` after each optimizer step."""
        with torch.no_grad():
            self.logit_scale.clamp_(0, math.log(100))


def clip_loss(output: tuple[torch.Tensor, torch.Tensor, torch.Tensor], _targets=None) -> torch.Tensor:
    """CLIP's symmetric cross-entropy: image i's caption is caption i, and caption i's image is image i."""
    image, text, scale = output
    logits = scale * image @ text.T
    targets = torch.arange(len(logits))
    return (nn.functional.cross_entropy(logits, targets) + nn.functional.cross_entropy(logits.T, targets)) / 2


class DenseLayer(nn.Module):
    """torchvision's `_DenseLayer`: BN-ReLU-Conv1×1 to 4 × growth, BN-ReLU-Conv3×3 to growth; the
    output is the input with the new features concatenated."""

    def __init__(self, features: int, growth: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.BatchNorm2d(features), nn.Conv2d(features, 4 * growth, 1, bias=False)
        self.norm2, self.conv2 = nn.BatchNorm2d(4 * growth), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        new = self.conv2(torch.relu(self.norm2(self.conv1(torch.relu(self.norm1(x))))))
        return torch.cat([x, new], 1)


class DenseNet(nn.Module):
    """DenseNet-BC on (B, 1, 8, 8) digits: a 3×3 stem conv, dense blocks of `layers` layers with
    transitions (BN-ReLU-Conv1×1, compression 0.5, 2×2 average pool) between them, a final
    BatchNorm, ReLU, global average pool and Linear."""

    def __init__(self, classes: int, growth: int = 8, layers: tuple[int, ...] = (3, 3)) -> None:
        super().__init__()
        features = 2 * growth
        self.stem = nn.Conv2d(1, features, 3, padding=1, bias=False)
        self.units = ["stem"]
        for b, count in enumerate(layers):
            block = nn.Sequential()
            for _ in range(count):
                block.append(DenseLayer(features, growth))
                features += growth
            self.add_module(f"block{b + 1}", block)
            self.units.append(f"block{b + 1}")
            if b < len(layers) - 1:
                out = features // 2
                self.add_module(f"transition{b + 1}", nn.Sequential(
                    nn.BatchNorm2d(features), nn.ReLU(), nn.Conv2d(features, out, 1, bias=False), nn.AvgPool2d(2)))
                self.units.append(f"transition{b + 1}")
                features = out
        self.norm = nn.BatchNorm2d(features)
        self.head = nn.Linear(features, classes)
        self.units += ["norm", "head"]
        self.hidden = self.units[1:-2]
        self.exposed = ["head", "stem"]  # the logits; the stem's features reach the transition un-normalised

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for unit in self.units[:-2]:
            x = getattr(self, unit)(x)
        return self.head(torch.relu(self.norm(x)).mean((-2, -1)))


class ActorCritic(nn.Module):
    """A categorical policy (`pi1`, `pi2`: Linear + tanh; `pi_head`: the actions' logits) and a
    separate value baseline (`value1`: Linear + tanh; `value_head`); `forward(observations)`
    returns (logits, values), `policy(observations)` the logits alone."""

    def __init__(self, observations: int, actions: int, width: int = 32) -> None:
        super().__init__()
        self.pi1, self.pi2 = nn.Linear(observations, width), nn.Linear(width, width)
        self.pi_head = nn.Linear(width, actions)
        self.value1, self.value_head = nn.Linear(observations, width), nn.Linear(width, 1)
        with torch.no_grad():  # SB3's init: orthogonal, gain √2 in the bodies, 0.01 on the policy head
            for layer in (self.pi1, self.pi2, self.value1):
                nn.init.orthogonal_(layer.weight, math.sqrt(2))
            nn.init.orthogonal_(self.pi_head.weight, 0.01)
            for layer in (self.pi1, self.pi2, self.value1, self.pi_head, self.value_head):
                nn.init.zeros_(layer.bias)
        self.units = ["pi1", "pi2", "pi_head", "value1", "value_head"]
        self.hidden = ["pi1", "pi2"]
        self.exposed = ["pi1", "pi_head"]  # no normalisation anywhere: the first layer's tanh, the logits

    def policy(self, observations: torch.Tensor) -> torch.Tensor:
        """The actions' logits alone (what acting needs)."""
        return self.pi_head(torch.tanh(self.pi2(torch.tanh(self.pi1(observations)))))

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(observations), self.value_head(torch.tanh(self.value1(observations))).squeeze(-1)


def _mlp(inputs: int, width: int, outputs: int) -> nn.Sequential:
    from collections import OrderedDict

    return nn.Sequential(OrderedDict(fc0=nn.Linear(inputs, width), act0=nn.ReLU(), fc1=nn.Linear(width, width),
                                     act1=nn.ReLU(), out=nn.Linear(width, outputs)))


class WGANGP(nn.Module):
    """WGAN-GP's two networks: `generator` (noise → a 2-D point) and `critic` (a point → a score),
    ReLU MLPs without normalisation (the penalty is per sample: no BatchNorm in the critic)."""

    def __init__(self, noise: int, width: int = 64) -> None:
        super().__init__()
        self.generator, self.critic = _mlp(noise, width, 2), _mlp(2, width, 1)
        layers = ("fc0", "fc1", "out")
        self.units = [f"{net}.{layer}" for net in ("generator", "critic") for layer in layers]
        self.hidden = ["generator.fc0", "generator.fc1"]
        self.exposed = ["generator.out", "critic.out"]  # the samples; the critic's score


def gradient_penalty(critic: nn.Module, real: torch.Tensor, fake: torch.Tensor,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Gulrajani et al.'s penalty: (‖∇ₓ critic(x̂)‖₂ − 1)² at x̂ uniformly between each real and fake
    point, differentiable (create_graph) so that the critic's step follows it."""
    alpha = torch.rand(len(real), 1, generator=generator)
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    (grad,) = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
    return ((grad.norm(2, dim=1) - 1) ** 2).mean()


def sliced_wasserstein(samples: torch.Tensor, real: torch.Tensor, directions: torch.Tensor) -> float:
    """The sliced 1-Wasserstein distance between two equally sized point sets: the mean over unit
    `directions` of the mean gap between their sorted projections."""
    gaps = (samples.float() @ directions.T).sort(0).values - (real @ directions.T).sort(0).values
    return float(gaps.abs().mean())


def swin_classifier(classes: int, image: int = 8, channels: int = 1) -> nn.Module:
    """`SwinForImageClassification` from a small `SwinConfig` (built, not downloaded): 2×2 patches,
    stage 1 at 4×4 tokens with 2×2 windows (the second block's shifted by 1), patch merging to
    2×2, stage 2 (one window: Swin shifts nothing there), stochastic depth 0.1; `forward(x)`
    returns the logits, the zoo's `units`, `hidden` and `exposed` tagged on (`SwinClassifier`)."""
    from transformers import SwinConfig, SwinForImageClassification

    class SwinClassifier(SwinForImageClassification):
        """The Swin model itself (so that the recorder sees its own parameter names), with the zoo's units."""

        def __init__(self, config: SwinConfig) -> None:
            super().__init__(config)
            blocks = [[f"swin.encoder.layers.{s}.blocks.{b}" for b in range(depth)]
                      for s, depth in enumerate(config.depths)]
            self.units = ["swin.embeddings", *blocks[0], "swin.encoder.layers.0.downsample", *blocks[1],
                          "swin.layernorm", "classifier"]
            self.hidden = self.units[1:-2]
            # The logits; the last block's MLP output (into the residual stream before the final LayerNorm).
            self.exposed = ["classifier", f"{blocks[1][-1]}.mlp.fc2"]

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:  # noqa: D102 - logits only, for the loop's loss
            return super().forward(pixel_values=pixel_values).logits

    config = SwinConfig(image_size=image, patch_size=2, num_channels=channels, embed_dim=32, depths=[2, 2],
                        num_heads=[2, 4], window_size=2, mlp_ratio=2.0, drop_path_rate=0.1, num_labels=classes)
    return SwinClassifier(config)


def mixup_cutmix(classes: int, seed: int, *, mixup_alpha: float = 0.8, cutmix_alpha: float = 1.0,
                 smoothing: float = 0.1, off_from: int | None = None):
    """timm's `Mixup` as the loop calls it on each training batch: with probability ½ mixup (the
    batch blended with its flip by λ ~ Beta(0.8, 0.8)), else cutmix (a box of area 1 − λ,
    λ ~ Beta(1, 1), pasted from the flip, λ corrected to the box's real area); targets become
    λ·y + (1 − λ)·y_flip of label-smoothed one-hots. Returns `mix(x, y) -> (x, soft y)`.
    `off_from`: after that many calls (a micro-batch a call) the batch is left as it is and its
    targets are the smoothed one-hots (timm's `mixup_enabled = False` after `--mixup-off-epoch`: λ = 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)  # timm draws λ and the box with numpy too
    calls = 0

    def mix(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal calls
        calls += 1
        off, on = smoothing / classes, 1 - smoothing + smoothing / classes
        one_hot = torch.full((len(y), classes), off).scatter_(1, y.unsqueeze(1), on)
        if off_from is not None and calls > off_from:
            return x, one_hot
        if rng.random() < 0.5:
            lam = float(rng.beta(mixup_alpha, mixup_alpha))
            x = lam * x + (1 - lam) * x.flip(0)
        else:
            lam = float(rng.beta(cutmix_alpha, cutmix_alpha))
            height, width = x.shape[-2:]
            cut_h, cut_w = int(height * math.sqrt(1 - lam)), int(width * math.sqrt(1 - lam))
            cy, cx = int(rng.integers(height)), int(rng.integers(width))
            top, bottom = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, height)
            left, right = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, width)
            x = x.clone()
            x[..., top:bottom, left:right] = x.flip(0)[..., top:bottom, left:right]
            lam = 1 - (bottom - top) * (right - left) / (height * width)
        return x, lam * one_hot + (1 - lam) * one_hot.flip(0)

    return mix


def soft_target_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """timm's `SoftTargetCrossEntropy` on the mixed soft targets; plain cross-entropy on class
    indices (the eval loop's unmixed batches)."""
    if not targets.is_floating_point():
        return torch.nn.functional.cross_entropy(logits, targets)
    return torch.sum(-targets * torch.log_softmax(logits, -1), -1).mean()


class QNetwork(nn.Module):
    """The PyTorch DQN tutorial's `DQN`: observations → 128 → 128 → one Q-value per action, ReLU."""

    def __init__(self, observations: int, actions: int, width: int = 128) -> None:
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(observations, width), nn.Linear(width, width)
        self.layer3 = nn.Linear(width, actions)
        self.units = ["layer1", "layer2", "layer3"]
        self.hidden = ["layer1", "layer2"]
        self.exposed = ["layer1", "layer3"]  # no normalisation anywhere: the first layer, the Q-values

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.layer3(torch.relu(self.layer2(torch.relu(self.layer1(observations)))))


class KDTeacher(nn.Module):
    """The distillation tutorial's `DeepNN`, small: conv 16 → conv 16 → pool → conv 32 → conv 32 → pool,
    then Linear(128, 128) → ReLU → dropout → Linear(128, classes)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(32 * 2 * 2, 128), nn.ReLU(), nn.Dropout(0.1),
                                        nn.Linear(128, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


class KDStudent(nn.Module):
    """The distillation tutorial's `LightNN`, small: conv 8 → pool → conv 8 → pool, then
    Linear(32, 64) → ReLU → dropout → Linear(64, classes)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Linear(8 * 2 * 2, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, classes))
        self.units = ["features.0", "features.3", "classifier.0", "classifier.3"]
        self.hidden = ["features.0", "features.3", "classifier.0"]
        self.exposed = ["features.0", "classifier.3"]  # no normalisation anywhere: the first conv, the logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).flatten(1))


def distillation_loss(student: torch.Tensor, targets: torch.Tensor, teacher: torch.Tensor, *,
                      temperature: float = 2.0, alpha: float = 0.5) -> torch.Tensor:
    """Hinton et al.'s loss: α·T²·KL(softmax(teacher/T) ‖ softmax(student/T)) (batchmean, as the
    tutorials write it with `kl_div` on log-probabilities) + (1 − α)·cross-entropy on the labels."""
    soft = torch.nn.functional.kl_div(torch.log_softmax(student / temperature, -1),
                                      torch.log_softmax(teacher / temperature, -1), reduction="batchmean",
                                      log_target=True)
    return alpha * temperature ** 2 * soft + (1 - alpha) * torch.nn.functional.cross_entropy(student, targets)


def _byol_mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    """byol-pytorch's `MLP`: Linear → BatchNorm1d → ReLU → Linear."""
    return nn.Sequential(nn.Linear(inputs, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, outputs))


class BYOL(nn.Module):
    """BYOL's online network: `encoder` (conv → BN → ReLU, strided conv → BN → ReLU, pooled: 32
    features), `projector` (32 → 64 → 16) and `predictor` (16 → 64 → 16); `forward(views)` returns
    the predictions of a (2B, 1, 8, 8) batch of views. The target network is `byol_target(model)`."""

    def __init__(self, channels: int = 16, hidden: int = 64, projection: int = 16) -> None:
        super().__init__()
        self.encoder = _view_encoder(channels)
        self.encoder.flatten = nn.Flatten()
        self.projector = _byol_mlp(2 * channels, hidden, projection)
        self.predictor = _byol_mlp(projection, hidden, projection)
        self.units = ["encoder.conv1", "encoder.conv2", "projector", "predictor"]
        self.hidden = ["encoder.conv1", "encoder.conv2", "projector"]
        self.exposed = ["projector.3", "predictor.3"]  # no normalisation after them (the loss's cosine aside)

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        return self.predictor(self.projector(self.encoder(views)))


def byol_target(model: BYOL) -> nn.Module:
    """BYOL's target network: a copy of the online encoder and projector, gradient-free (byol-pytorch's
    `_get_target_encoder`: `copy.deepcopy`, `requires_grad` off); `forward(views)` gives projections."""
    import copy

    target = nn.Sequential(copy.deepcopy(model.encoder), copy.deepcopy(model.projector))
    return target.requires_grad_(False)


def byol_ema_update(target: nn.Module, model: BYOL, tau: float = 0.99) -> None:
    """byol-pytorch's `update_moving_average`: each target weight ← τ·target + (1 − τ)·online; the
    BatchNorm running statistics copied."""
    online = nn.Sequential(model.encoder, model.projector)
    with torch.no_grad():
        for theirs, ours in zip(target.parameters(), online.parameters()):
            theirs.lerp_(ours, 1 - tau)
        for theirs, ours in zip(target.buffers(), online.buffers()):
            theirs.copy_(ours)


def byol_loss(predictions: torch.Tensor, _targets, projections: torch.Tensor) -> torch.Tensor:
    """BYOL's symmetric loss over 2B views (i and i + B are a pair): 2 − 2·cos(online prediction of
    one view, target projection of the other), averaged over both directions."""
    n = len(predictions) // 2
    other = torch.cat([projections[n:], projections[:n]])
    cos = torch.nn.functional.cosine_similarity(predictions, other.detach(), dim=-1)
    return (2 - 2 * cos).mean()


class AffineCoupling(nn.Module):
    """One RealNVP coupling: the `mask`ed half passes, the other half becomes x·exp(s) + t, with
    s = scale·tanh(s_net(masked)) and t = t_net(masked); `forward(x, sldj)` returns (y, sldj + Σ s),
    the running sum of log|det| passed along as Chris Chute's coupling layers pass `sldj`."""

    def __init__(self, mask: torch.Tensor, hidden: int) -> None:
        super().__init__()
        dims = len(mask)
        self.register_buffer("mask", mask)
        self.s_net = nn.Sequential(nn.Linear(dims, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden),
                                   nn.LeakyReLU(), nn.Linear(hidden, dims))
        self.t_net = nn.Sequential(nn.Linear(dims, hidden), nn.LeakyReLU(), nn.Linear(hidden, hidden),
                                   nn.LeakyReLU(), nn.Linear(hidden, dims))
        self.scale = nn.Parameter(torch.ones(dims))

    def forward(self, x: torch.Tensor, sldj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        masked = x * self.mask
        s = self.scale * torch.tanh(self.s_net(masked)) * (1 - self.mask)
        t = self.t_net(masked) * (1 - self.mask)
        return masked + (1 - self.mask) * (x * torch.exp(s) + t), sldj + s.sum(-1)


class RealNVP(nn.Module):
    """RealNVP over `dims`-D points: `couplings` affine couplings, masks alternating between the
    even and the odd dimensions; `forward(x)` maps data to the latent: (z, summed log|det|)."""

    def __init__(self, dims: int = 8, couplings: int = 6, hidden: int = 64) -> None:
        super().__init__()
        even = (torch.arange(dims) % 2 == 0).float()
        self.couplings = nn.ModuleList(AffineCoupling(even if i % 2 == 0 else 1 - even, hidden)
                                       for i in range(couplings))
        self.units = [f"couplings.{i}" for i in range(couplings)]
        self.hidden = self.units[:-1]
        self.exposed = [f"couplings.{i}.t_net.4" for i in range(couplings)]  # the shifts: no tanh after them

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sldj = x.new_zeros(len(x))
        for coupling in self.couplings:
            x, sldj = coupling(x, sldj)
        return x, sldj


def flow_nll(output: tuple[torch.Tensor, torch.Tensor], _targets=None) -> torch.Tensor:
    """The flow's negative log-likelihood under a standard normal prior, in nats per dimension
    (what flow code logs, bits/dim's natural-log twin): −(log N(z; 0, I) + log|det|) / dims, the
    prior written out as Chris Chute's `RealNVPLoss` does (torch.distributions would raise on NaN)."""
    z, log_det = output
    prior = (-0.5 * (z ** 2 + math.log(2 * math.pi))).sum(-1)
    return -(prior + log_det).mean() / z.shape[-1]


class TransE(nn.Module):
    """TransE (OpenKE's layout): `forward({"positive", "negative"})` gives the L`p_norm` distances
    ‖h + r − t‖ of each positive triple and of its corrupted twin."""

    def __init__(self, entities: int, relations: int, dim: int = 32, p_norm: int = 1) -> None:
        super().__init__()
        self.ent_embeddings = nn.Embedding(entities, dim)
        self.rel_embeddings = nn.Embedding(relations, dim)
        bound = 6 / math.sqrt(dim)
        nn.init.uniform_(self.ent_embeddings.weight, -bound, bound)
        nn.init.uniform_(self.rel_embeddings.weight, -bound, bound)
        with torch.no_grad():
            self.rel_embeddings.weight.div_(self.rel_embeddings.weight.norm(dim=1, keepdim=True))
        self.normalize_entities()
        self.p_norm = p_norm
        self.units = ["ent_embeddings", "rel_embeddings"]
        self.hidden = ["rel_embeddings", "ent_embeddings"]  # the last is the one detached: the entities
        self.exposed = ["ent_embeddings", "rel_embeddings"]

    def distance(self, triples: torch.Tensor) -> torch.Tensor:
        h, r, t = self.ent_embeddings(triples[:, 0]), self.rel_embeddings(triples[:, 1]), \
            self.ent_embeddings(triples[:, 2])
        return torch.norm(h + r - t, p=self.p_norm, dim=-1)

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.distance(batch["positive"]), self.distance(batch["negative"])

    def normalize_entities(self) -> None:
        """The paper's step 5: every entity embedding back to unit L2 norm."""
        with torch.no_grad():
            weight = self.ent_embeddings.weight
            weight.div_(weight.norm(dim=1, keepdim=True))


TRANSE_MARGIN = 2.0
"""TransE's margin γ (the paper searched 1, 2, 10)."""


def transe_margin_loss(distances: tuple[torch.Tensor, torch.Tensor], _targets=None) -> torch.Tensor:
    """OpenKE's `MarginLoss`: mean(max(d⁺ − d⁻, −γ)) + γ = mean(max(0, γ + d⁺ − d⁻))."""
    positive, negative = distances
    return (torch.max(positive - negative, torch.tensor(-TRANSE_MARGIN)) + TRANSE_MARGIN).mean()


def hits_at_k(model: TransE, triples: torch.Tensor, k: int = 10) -> float:
    """The share of held-out triples whose tail ranks in the top `k` of all entities by distance
    from h + r (raw, tail prediction), without gradient."""
    with torch.no_grad():
        query = model.ent_embeddings(triples[:, 0]) + model.rel_embeddings(triples[:, 1])
        distances = torch.cdist(query, model.ent_embeddings.weight, p=model.p_norm)
        truth = distances.gather(1, triples[:, 2:3])
        return float(((distances < truth).sum(1) < k).float().mean())


class M5(nn.Module):
    """The torchaudio tutorial's M5 (`n_channel` 16) on 4 kHz clips: its output is (B, 1, classes) log-probabilities."""

    def __init__(self, classes: int = 10, channels: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(1, channels, kernel_size=40, stride=8)
        self.bn1 = nn.BatchNorm1d(channels)
        self.conv2 = nn.Conv1d(channels, channels, kernel_size=3)
        self.bn2 = nn.BatchNorm1d(channels)
        self.conv3 = nn.Conv1d(channels, 2 * channels, kernel_size=3)
        self.bn3 = nn.BatchNorm1d(2 * channels)
        self.conv4 = nn.Conv1d(2 * channels, 2 * channels, kernel_size=3)
        self.bn4 = nn.BatchNorm1d(2 * channels)
        self.pool1, self.pool2, self.pool3, self.pool4 = (nn.MaxPool1d(4) for _ in range(4))
        self.fc1 = nn.Linear(2 * channels, classes)
        self.units = ["conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "conv4", "bn4", "fc1"]
        self.hidden = self.units[:-1]
        self.exposed = ["bn4", "fc1"]  # the last norm's affine and the head: nothing normalises after them

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool1(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool2(torch.relu(self.bn2(self.conv2(x))))
        x = self.pool3(torch.relu(self.bn3(self.conv3(x))))
        x = self.pool4(torch.relu(self.bn4(self.conv4(x))))
        x = torch.nn.functional.avg_pool1d(x, x.shape[-1]).permute(0, 2, 1)
        return torch.log_softmax(self.fc1(x), dim=2)


def keyword_nll_loss(log_probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The tutorial's `F.nll_loss(output.squeeze(), target)` (squeezing the pooled time axis only)."""
    return torch.nn.functional.nll_loss(log_probs.squeeze(1), targets)


class LoRALinear(nn.Linear):
    """loralib's `lora.Linear` with `merge_weights=False`: W x + b (frozen) + (x Aᵀ Bᵀ)·alpha/r."""

    def __init__(self, in_features: int, out_features: int, r: int = 8, lora_alpha: int = 16) -> None:
        super().__init__(in_features, out_features)
        self.r, self.lora_alpha, self.scaling = r, lora_alpha, lora_alpha / r
        self.lora_A = nn.Parameter(self.weight.new_zeros((r, in_features)))
        self.lora_B = nn.Parameter(self.weight.new_zeros((out_features, r)))
        self.weight.requires_grad = False
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = nn.functional.linear(x, self.weight, bias=self.bias)
        result += (x @ self.lora_A.transpose(0, 1) @ self.lora_B.transpose(0, 1)) * self.scaling
        return result


LORA_TARGETS = ("attn.c_attn", "attn.c_proj", "c_fc", "mlp_proj")
"""The Linears of each block that get LoRA (PEFT's target_modules: every Linear but the head)."""


def lora_gpt(vocab: int, r: int = 8, lora_alpha: int = 16) -> TinyGPT:
    """The `gpt` model with `LORA_TARGETS` swapped for `LoRALinear`s, then loralib's
    `mark_only_lora_as_trainable(model, bias="none")`; load the base with `strict=False`."""
    model = nanogpt_init(TinyGPT(vocab=vocab, context=CONTEXT, width=32, heads=4, layers=2))
    for block in model.blocks:
        for target in LORA_TARGETS:
            parent, _, name = target.rpartition(".")
            owner = block.get_submodule(parent) if parent else block
            old = getattr(owner, name)
            setattr(owner, name, LoRALinear(old.in_features, old.out_features, r, lora_alpha))
    for name, param in model.named_parameters():
        param.requires_grad = "lora_" in name
    # The last is the one detached: the head and final norm are frozen, so a detached last block
    # would leave the loss without a graph (backward() raises); the blocks after it still learn.
    model.hidden = [f"blocks.{i}" for i in reversed(range(len(model.blocks)))]
    model.exposed = ["wte", f"blocks.{len(model.blocks) - 1}.mlp_proj"]  # the tied head; a residual write
    return model


class Residual(nn.Module):
    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self._block = nn.Sequential(nn.ReLU(True), nn.Conv2d(channels, hidden, 3, padding=1, bias=False),
                                    nn.ReLU(True), nn.Conv2d(hidden, channels, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self._block(x)


class ResidualStack(nn.Module):
    def __init__(self, channels: int, hidden: int, layers: int) -> None:
        super().__init__()
        self._layers = nn.ModuleList(Residual(channels, hidden) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self._layers:
            x = layer(x)
        return torch.relu(x)


class VectorQuantizerEMA(nn.Module):
    """The repository's `VectorQuantizerEMA`; `forward(z)` → (loss, quantized, perplexity, encodings)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, commitment_cost: float = 0.25,
                 decay: float = 0.99, epsilon: float = 1e-5) -> None:
        super().__init__()
        self._embedding = nn.Embedding(num_embeddings, embedding_dim)
        self._embedding.weight.data.normal_()
        self._commitment_cost, self._decay, self._epsilon = commitment_cost, decay, epsilon
        # The EMA state of a codebook that has seen each code once where it lies. The repository
        # starts from zero counts and fresh normal sums, which sends every code the first batch
        # misses to ~1e5 (sums / ε) for its first ~1000 steps: one code in use in a 150-step run.
        self.register_buffer("_ema_cluster_size", torch.ones(num_embeddings))
        self._ema_w = nn.Parameter(self._embedding.weight.detach().clone())

    def forward(self, inputs: torch.Tensor):
        inputs = inputs.permute(0, 2, 3, 1).contiguous()
        flat_input = inputs.view(-1, self._embedding.embedding_dim)
        codebook = self._embedding.weight
        distances = (flat_input ** 2).sum(1, keepdim=True) + (codebook ** 2).sum(1) - 2 * flat_input @ codebook.t()
        encodings = torch.zeros(len(flat_input), len(codebook), device=inputs.device)
        encodings.scatter_(1, distances.argmin(1, keepdim=True), 1)
        quantized = (encodings @ codebook).view(inputs.shape)
        if self.training:
            with torch.no_grad():
                n_codes, decay = len(codebook), self._decay
                self._ema_cluster_size.mul_(decay).add_(encodings.sum(0), alpha=1 - decay)
                n = self._ema_cluster_size.sum()
                self._ema_cluster_size.copy_((self._ema_cluster_size + self._epsilon)
                                             / (n + n_codes * self._epsilon) * n)
                self._ema_w.mul_(decay).add_(encodings.t() @ flat_input.float(), alpha=1 - decay)
                codebook.copy_(self._ema_w / self._ema_cluster_size.unsqueeze(1))
        loss = self._commitment_cost * nn.functional.mse_loss(quantized.detach(), inputs)
        quantized = inputs + (quantized - inputs).detach()
        avg_probs = encodings.mean(0)
        perplexity = torch.exp(-(avg_probs * torch.log(avg_probs + 1e-10)).sum())
        return loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity, encodings


class VQVAE(nn.Module):
    """The repository's `Model` (decay > 0: the EMA quantiser), small: 16×16 colour images → 4×4 codes."""

    def __init__(self, channels: int = 3, hiddens: int = 32, residual_hiddens: int = 8, residual_layers: int = 2,
                 num_embeddings: int = 64, embedding_dim: int = 16) -> None:
        super().__init__()
        self._encoder = nn.Module()
        self._encoder._conv_1 = nn.Conv2d(channels, hiddens // 2, 4, stride=2, padding=1)
        self._encoder._conv_2 = nn.Conv2d(hiddens // 2, hiddens, 4, stride=2, padding=1)
        self._encoder._conv_3 = nn.Conv2d(hiddens, hiddens, 3, padding=1)
        self._encoder._residual_stack = ResidualStack(hiddens, residual_hiddens, residual_layers)
        self._pre_vq_conv = nn.Conv2d(hiddens, embedding_dim, 1)
        self._vq_vae = VectorQuantizerEMA(num_embeddings, embedding_dim)
        self._decoder = nn.Module()
        self._decoder._conv_1 = nn.Conv2d(embedding_dim, hiddens, 3, padding=1)
        self._decoder._residual_stack = ResidualStack(hiddens, residual_hiddens, residual_layers)
        self._decoder._conv_trans_1 = nn.ConvTranspose2d(hiddens, hiddens // 2, 4, stride=2, padding=1)
        self._decoder._conv_trans_2 = nn.ConvTranspose2d(hiddens // 2, channels, 4, stride=2, padding=1)
        encoder = [f"_encoder.{n}" for n in ("_conv_1", "_conv_2", "_conv_3", "_residual_stack")]
        decoder = [f"_decoder.{n}" for n in ("_conv_1", "_residual_stack", "_conv_trans_1", "_conv_trans_2")]
        self.units = [*encoder, "_pre_vq_conv", "_vq_vae", *decoder]
        self.hidden = [*encoder[1:], "_pre_vq_conv"]  # detached last: the codes' inputs, commitment loss included
        self.exposed = ["_pre_vq_conv", "_decoder._conv_trans_2"]  # no normalisation anywhere

    def forward(self, x: torch.Tensor):
        e = self._encoder
        z = e._residual_stack(e._conv_3(torch.relu(e._conv_2(torch.relu(e._conv_1(x))))))
        loss, quantized, perplexity, _ = self._vq_vae(self._pre_vq_conv(z))
        d = self._decoder
        x_recon = d._conv_trans_2(torch.relu(d._conv_trans_1(d._residual_stack(d._conv_1(quantized)))))
        return loss, x_recon, perplexity


def vqvae_loss(output: tuple[torch.Tensor, torch.Tensor, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """The repository's `recon_error = mse(recon, data) / data_variance; loss = recon_error + vq_loss`
    (the standardised images' variance is 1)."""
    vq_loss, x_recon, _ = output
    return nn.functional.mse_loss(x_recon, targets) + vq_loss


def codebook_perplexity(model: VQVAE, images: torch.Tensor) -> float:
    """exp(entropy) of the codes' use on `images` (eval mode, no EMA update, no gradient): the
    number of codes in use, as the repository logs `perplexity`."""
    model.eval()
    with torch.no_grad():
        perplexity = float(model(images)[2])
    model.train()
    return perplexity


class NBeatsBlock(nn.Module):
    """ElementAI's `NBeatsBlock` with its `GenericBasis`: θ → (backcast θ[:inputs], forecast θ[-horizon:])."""

    def __init__(self, inputs: int, horizon: int, layers: int = 4, width: int = 128) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(inputs, width), *(nn.Linear(width, width) for _ in range(layers - 1))])
        self.basis_parameters = nn.Linear(width, inputs + horizon)
        self.inputs, self.horizon = inputs, horizon

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for layer in self.layers:
            x = torch.relu(layer(x))
        theta = self.basis_parameters(x)
        return theta[:, : self.inputs], theta[:, -self.horizon:]


class NBeatsStack(nn.Module):
    """Blocks in doubly residual stacking: `forward(residuals, forecast)` → both after its blocks."""

    def __init__(self, inputs: int, horizon: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(NBeatsBlock(inputs, horizon) for _ in range(blocks))

    def forward(self, residuals: torch.Tensor, forecast: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for block in self.blocks:
            backcast, block_forecast = block(residuals)
            residuals = residuals - backcast
            forecast = forecast + block_forecast
        return residuals, forecast


class NBeats(nn.Module):
    """N-BEATS generic: ElementAI's `NBeats.forward` over the time-reversed input, its forecast
    started at the last observed value (`x[:, -1:]`); no input mask (no series is padded)."""

    def __init__(self, inputs: int, horizon: int, stacks: int = 3, blocks: int = 2) -> None:
        super().__init__()
        self.stacks = nn.ModuleList(NBeatsStack(inputs, horizon, blocks) for _ in range(stacks))
        self.units = [f"stacks.{i}" for i in range(stacks)]
        self.hidden = self.units[:-1]
        self.exposed = ["stacks.0.blocks.0.layers.0", f"stacks.{stacks - 1}.blocks.{blocks - 1}.basis_parameters"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residuals, forecast = x.flip(dims=(1,)), x[:, -1:]
        for stack in self.stacks:
            residuals, forecast = stack(residuals, forecast)
        return forecast


def smape_2_loss(forecast: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """ElementAI's `smape_2_loss`: 200 · mean(|f − y| / (|f.data| + |y.data|)), in %. Its
    `divide_no_nan` is left out: it turns a NaN forecast's terms into 0, so a run whose weights
    are NaN would log a loss of 0; the series are positive, so no denominator is 0."""
    return 200 * ((forecast - target).abs() / (forecast.detach().abs() + target.abs())).mean()


class SkipGramModel(nn.Module):
    """Skip-gram with negative sampling as Andras7/word2vec-pytorch (after Adoni's) writes it:
    centre ("u") and context ("v") `nn.Embedding(vocab, dim, sparse=True)` tables, u uniform in
    ±1/dim and v zeros; `forward({"pos_u", "pos_v", "neg_v"})` gives the clamped (±10) scores
    u·v of each pair and u·v_neg of its negatives (`sgns_loss` takes them)."""

    def __init__(self, vocab: int, dim: int = 32) -> None:
        super().__init__()
        self.u_embeddings = nn.Embedding(vocab, dim, sparse=True)
        self.v_embeddings = nn.Embedding(vocab, dim, sparse=True)
        nn.init.uniform_(self.u_embeddings.weight.data, -1.0 / dim, 1.0 / dim)
        nn.init.constant_(self.v_embeddings.weight.data, 0)
        self.units = ["u_embeddings", "v_embeddings"]
        self.hidden = ["u_embeddings", "v_embeddings"]  # no layer between the tables and the loss
        self.exposed = ["u_embeddings", "v_embeddings"]

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        emb_u = self.u_embeddings(batch["pos_u"])
        emb_v = self.v_embeddings(batch["pos_v"])
        emb_neg_v = self.v_embeddings(batch["neg_v"])
        score = torch.clamp(torch.sum(torch.mul(emb_u, emb_v), dim=1), max=10, min=-10)
        neg_score = torch.clamp(torch.bmm(emb_neg_v, emb_u.unsqueeze(2)).squeeze(2), max=10, min=-10)
        return score, neg_score


def sgns_loss(scores: tuple[torch.Tensor, torch.Tensor], _targets=None) -> torch.Tensor:
    """The repository's loss: mean(−log σ(u·v) − Σ log σ(−u·v_neg))."""
    score, neg_score = scores
    return torch.mean(-nn.functional.logsigmoid(score) - torch.sum(nn.functional.logsigmoid(-neg_score), dim=1))


def word_similarity_spearman(model: SkipGramModel, pairs: torch.Tensor, scores: torch.Tensor) -> float:
    """Spearman's ρ between the cosine similarity of each pair's u vectors (the vectors the
    repository saves) and its relatedness score, as gensim's `evaluate_word_pairs` reports it."""
    from scipy.stats import spearmanr

    with torch.no_grad():
        vectors = model.u_embeddings.weight
        cosine = nn.functional.cosine_similarity(vectors[pairs[:, 0]], vectors[pairs[:, 1]], dim=1)
    if not torch.isfinite(cosine).all():
        return math.nan
    return float(spearmanr(cosine.numpy(), scores.numpy()).statistic)


class TripletEmbeddingNet(nn.Module):
    """pytorch-metric-learning's MNIST example `Net` on 8×8 digits (conv 32, conv 64, max-pool,
    `Dropout2d(0.25)`, a Linear to the embedding), its output L2-normalised as FaceNet's."""

    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout2d(0.25)
        self.fc1 = nn.Linear(64 * 2 * 2, dim)
        self.units = ["conv1", "conv2", "fc1"]
        self.hidden = ["conv1", "conv2"]
        self.exposed = ["conv1", "fc1"]  # no normalisation but the embedding's own L2 one

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.max_pool2d(torch.relu(self.conv2(torch.relu(self.conv1(x)))), 2)
        return nn.functional.normalize(self.fc1(torch.flatten(self.dropout1(x), 1)), p=2, dim=1)


TRIPLET_MARGIN = 0.2
"""The triplet loss's margin (FaceNet's α = 0.2)."""


def batch_hard_triplet_loss(embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Hermans et al.'s batch-hard mining inside a P × K batch (pytorch-metric-learning's
    `BatchHardMiner`: indices chosen without gradient): each anchor with its farthest positive
    and its nearest negative, into `nn.TripletMarginLoss(margin=0.2)` (L2 distance, mean over
    anchors). 0 for a batch whose every anchor already satisfies the margin."""
    with torch.no_grad():
        distance = torch.cdist(embeddings, embeddings)
        same = labels[:, None] == labels[None]
        self_pair = torch.eye(len(labels), dtype=torch.bool)
        positive = distance.masked_fill(~same | self_pair, -math.inf).argmax(1)
        negative = distance.masked_fill(same, math.inf).argmin(1)
    return nn.TripletMarginLoss(margin=TRIPLET_MARGIN)(embeddings, embeddings[positive], embeddings[negative])


def recall_at_1(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    """Recall@1 over a held-out set, each image a query against all the others (eval mode, no
    gradient): the share whose nearest neighbour by embedding distance has its class, as
    pytorch-metric-learning's `AccuracyCalculator` reports `precision_at_1`."""
    model.eval()
    with torch.no_grad():
        embeddings = model(images)
    model.train()
    if not torch.isfinite(embeddings).all():
        return math.nan
    distance = torch.cdist(embeddings, embeddings).fill_diagonal_(math.inf)
    return float((labels[distance.argmin(1)] == labels).float().mean())


class BasicUnit(nn.Module):
    """davda54/sam's `BasicUnit` (example/model/wide_res_net.py): pre-activation BN-ReLU-conv twice, a residual."""

    def __init__(self, channels: int, dropout: float) -> None:
        super().__init__()
        self.block = nn.Sequential(OrderedDict([
            ("0_normalization", nn.BatchNorm2d(channels)),
            ("1_activation", nn.ReLU(inplace=False)),
            ("2_convolution", nn.Conv2d(channels, channels, (3, 3), stride=1, padding=1, bias=False)),
            ("3_normalization", nn.BatchNorm2d(channels)),
            ("4_activation", nn.ReLU(inplace=False)),
            ("5_dropout", nn.Dropout(dropout, inplace=False)),
            ("6_convolution", nn.Conv2d(channels, channels, (3, 3), stride=1, padding=1, bias=False)),
        ]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class DownsampleUnit(nn.Module):
    """davda54/sam's `DownsampleUnit`: BN-ReLU shared by a strided conv pair and a 1×1 shortcut conv."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, dropout: float) -> None:
        super().__init__()
        self.norm_act = nn.Sequential(OrderedDict([
            ("0_normalization", nn.BatchNorm2d(in_channels)),
            ("1_activation", nn.ReLU(inplace=False)),
        ]))
        self.block = nn.Sequential(OrderedDict([
            ("0_convolution", nn.Conv2d(in_channels, out_channels, (3, 3), stride=stride, padding=1, bias=False)),
            ("1_normalization", nn.BatchNorm2d(out_channels)),
            ("2_activation", nn.ReLU(inplace=False)),
            ("3_dropout", nn.Dropout(dropout, inplace=False)),
            ("4_convolution", nn.Conv2d(out_channels, out_channels, (3, 3), stride=1, padding=1, bias=False)),
        ]))
        self.downsample = nn.Conv2d(in_channels, out_channels, (1, 1), stride=stride, padding=0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm_act(x)
        return self.block(x) + self.downsample(x)


class WideResNet(nn.Module):
    """davda54/sam's `WideResNet` (Zagoruyko & Komodakis), its names and init (convs
    kaiming-normal fan-in, BN 1/0, the classifier zeros): `depth` 10 gives one `BasicUnit`
    after each group's `DownsampleUnit`; 16×16 inputs pool 4×4 at the end (the repository's 8×8
    for CIFAR's 32×32)."""

    def __init__(self, depth: int = 10, width_factor: int = 1, dropout: float = 0.0, in_channels: int = 3,
                 labels: int = 4, pooled: int = 4) -> None:
        super().__init__()
        self.filters = [16, 1 * 16 * width_factor, 2 * 16 * width_factor, 4 * 16 * width_factor]
        self.block_depth = (depth - 4) // (3 * 2)
        block = lambda i, stride: nn.Sequential(  # noqa: E731 - the repository's `Block`
            DownsampleUnit(self.filters[i - 1], self.filters[i], stride, dropout),
            *(BasicUnit(self.filters[i], dropout) for _ in range(self.block_depth)))
        self.f = nn.Sequential(OrderedDict([
            ("0_convolution", nn.Conv2d(in_channels, self.filters[0], (3, 3), stride=1, padding=1, bias=False)),
            ("1_block", block(1, 1)),
            ("2_block", block(2, 2)),
            ("3_block", block(3, 2)),
            ("4_normalization", nn.BatchNorm2d(self.filters[3])),
            ("5_activation", nn.ReLU(inplace=False)),
            ("6_pooling", nn.AvgPool2d(kernel_size=pooled)),
            ("7_flattening", nn.Flatten()),
            ("8_classification", nn.Linear(in_features=self.filters[3], out_features=labels)),
        ]))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight.data, mode="fan_in", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.weight.data.zero_()
                m.bias.data.zero_()
        self.units = ["f.0_convolution", "f.1_block", "f.2_block", "f.3_block", "f.4_normalization",
                      "f.8_classification"]
        self.hidden = ["f.1_block", "f.2_block", "f.3_block"]
        self.exposed = ["f.8_classification"]  # every conv's output meets a BatchNorm next

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x)


def smooth_crossentropy(pred: torch.Tensor, gold: torch.Tensor, smoothing: float = 0.1) -> torch.Tensor:
    """davda54/sam's `smooth_crossentropy`, meaned as its loop does (`loss.mean()`): the KL
    divergence to the smoothed one-hot target (0 at best, cross-entropy less the target's entropy)."""
    n_class = pred.size(1)
    one_hot = torch.full_like(pred, fill_value=smoothing / (n_class - 1))
    one_hot.scatter_(dim=1, index=gold.unsqueeze(1), value=1.0 - smoothing)
    log_prob = nn.functional.log_softmax(pred, dim=1)
    return nn.functional.kl_div(input=log_prob, target=one_hot, reduction="none").sum(-1).mean()


class SAM(torch.optim.Optimizer):
    """davda54/sam's `SAM` (Foret et al.), as written there: `first_step` climbs to w + e(w),
    e(w) = rho · g / ‖g‖ (the old weights kept in its state), `second_step` puts the weights back
    (`p.data = old_p`) and steps the base optimizer on the gradient taken at w + e(w); its
    param groups are the base optimizer's."""

    def __init__(self, params, base_optimizer, rho: float = 0.05, adaptive: bool = False, **kwargs) -> None:
        assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"
        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super().__init__(params, defaults)
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def first_step(self, zero_grad: bool = False) -> None:
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)  # climb to the local maximum "w + e(w)"
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad: bool = False) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.data = self.state[p]["old_p"]  # get back to "w" from "w + e(w)"
        self.base_optimizer.step()  # do the actual "sharpness-aware" update
        if zero_grad:
            self.zero_grad()

    def _grad_norm(self) -> torch.Tensor:
        shared_device = self.param_groups[0]["params"][0].device
        return torch.norm(torch.stack([
            ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device)
            for group in self.param_groups for p in group["params"] if p.grad is not None]), p=2)

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        self.base_optimizer.param_groups = self.param_groups


def disable_running_stats(model: nn.Module) -> None:
    """davda54/sam's `bypass_bn.disable_running_stats`: BatchNorm momentum 0 for the second pass."""
    def _disable(module: nn.Module) -> None:
        if isinstance(module, nn.BatchNorm2d):
            module.backup_momentum = module.momentum
            module.momentum = 0

    model.apply(_disable)


def enable_running_stats(model: nn.Module) -> None:
    """davda54/sam's `bypass_bn.enable_running_stats`: the BatchNorm momentum back for the first pass."""
    def _enable(module: nn.Module) -> None:
        if isinstance(module, nn.BatchNorm2d) and hasattr(module, "backup_momentum"):
            module.momentum = module.backup_momentum

    model.apply(_enable)


def _cleanrl_layer(layer: nn.Linear, std: float = math.sqrt(2)) -> nn.Linear:
    """CleanRL's `layer_init`: orthogonal weights of gain `std`, biases 0."""
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class PPOAgent(nn.Module):
    """CleanRL's `ppo.py` `Agent`: a separate critic and actor, each Linear(obs, 64) → tanh →
    Linear(64, 64) → tanh → a head (the critic's of std 1, the actor's logits of std 0.01), every
    layer `layer_init`ed; `forward(observations)` gives (logits, values), `policy` the logits and
    `value` the values (what the rollout needs, without gradient)."""

    def __init__(self, observations: int, actions: int, width: int = 64) -> None:
        super().__init__()
        self.critic = nn.Sequential(_cleanrl_layer(nn.Linear(observations, width)), nn.Tanh(),
                                    _cleanrl_layer(nn.Linear(width, width)), nn.Tanh(),
                                    _cleanrl_layer(nn.Linear(width, 1), std=1.0))
        self.actor = nn.Sequential(_cleanrl_layer(nn.Linear(observations, width)), nn.Tanh(),
                                   _cleanrl_layer(nn.Linear(width, width)), nn.Tanh(),
                                   _cleanrl_layer(nn.Linear(width, actions), std=0.01))
        self.units = ["critic.0", "critic.2", "critic.4", "actor.0", "actor.2", "actor.4"]
        self.hidden = ["actor.0", "actor.2"]
        self.exposed = ["actor.0", "actor.4"]  # no normalisation anywhere: the first layer's tanh, the logits

    def policy(self, observations: torch.Tensor) -> torch.Tensor:
        return self.actor(observations)

    def value(self, observations: torch.Tensor) -> torch.Tensor:
        return self.critic(observations).squeeze(-1)

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.policy(observations), self.value(observations)


def _conv_bn_relu(inputs: int, outputs: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(outputs),
                         nn.ReLU())


class TinyFCOS(nn.Module):
    """A single-level FCOS detector as torchvision's `FCOSHead` lays it out: a small conv backbone
    (conv-BN-ReLU, stride 4 in all), then a classification tower (conv 3×3 + GroupNorm(16) + ReLU)
    into `cls_logits` (one logit a class and a location, bias −log((1 − 0.01) / 0.01): the 0.01
    prior) and a regression tower into `bbox_reg` (ReLU'd left, top, right, bottom distances of
    each location to its box, in strides); torchvision's init (normal std 0.01, biases 0) in the
    heads. No centerness branch, one feature level (no FPN). `forward(images)` gives
    (class logits (B, C, H, W), ltrb (B, 4, H, W))."""

    stride = 4

    def __init__(self, classes: int, width: int = 32) -> None:
        super().__init__()
        self.backbone = nn.Sequential(OrderedDict(
            stem=_conv_bn_relu(1, 16, 1), layer1=_conv_bn_relu(16, width, 2), layer2=_conv_bn_relu(width, width, 2),
            layer3=_conv_bn_relu(width, width, 1)))
        self.cls_tower, self.bbox_tower = (
            nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.GroupNorm(16, width), nn.ReLU()) for _ in range(2))
        self.cls_logits = nn.Conv2d(width, classes, 3, padding=1)
        self.bbox_reg = nn.Conv2d(width, 4, 3, padding=1)
        for layer in (self.cls_tower[0], self.bbox_tower[0], self.cls_logits, self.bbox_reg):
            nn.init.normal_(layer.weight, std=0.01)
            nn.init.constant_(layer.bias, 0.0)
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - 0.01) / 0.01))
        self.units = ["backbone.stem", "backbone.layer1", "backbone.layer2", "backbone.layer3", "cls_tower",
                      "cls_logits", "bbox_tower", "bbox_reg"]
        self.hidden = ["backbone.stem", "backbone.layer1", "backbone.layer2", "backbone.layer3"]
        self.exposed = ["cls_logits", "bbox_reg"]  # each head's output: every other conv meets a norm next

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.backbone(images)
        return self.cls_logits(self.cls_tower(features)), torch.relu(self.bbox_reg(self.bbox_tower(features)))


def sigmoid_focal_loss(logits: torch.Tensor, targets: torch.Tensor, alpha: float = 0.25,
                       gamma: float = 2.0) -> torch.Tensor:
    """torchvision.ops.sigmoid_focal_loss (Lin et al.'s), summed: BCE-with-logits × (1 − p_t)^γ,
    weighted α on positives and 1 − α on negatives (torchvision is not a dependency here)."""
    p = torch.sigmoid(logits)
    ce = nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce * (1 - p_t) ** gamma
    return ((alpha * targets + (1 - alpha) * (1 - targets)) * loss).sum()


def generalized_box_iou_loss(boxes: torch.Tensor, targets: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """torchvision.ops.generalized_box_iou_loss of paired (N, 4) x1y1x2y2 boxes, summed: 1 − IoU
    plus the share of the enclosing box that neither covers."""
    x1, y1 = torch.max(boxes[:, 0], targets[:, 0]), torch.max(boxes[:, 1], targets[:, 1])
    x2, y2 = torch.min(boxes[:, 2], targets[:, 2]), torch.min(boxes[:, 3], targets[:, 3])
    inter = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])  # noqa: E731
    union = area(boxes) + area(targets) - inter
    iou = inter / (union + eps)
    hull = ((torch.max(boxes[:, 2], targets[:, 2]) - torch.min(boxes[:, 0], targets[:, 0]))
            * (torch.max(boxes[:, 3], targets[:, 3]) - torch.min(boxes[:, 1], targets[:, 1])))
    return (1 - iou + (hull - union) / (hull + eps)).sum()


def fcos_targets(targets: torch.Tensor, size: tuple[int, int], stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FCOS's assignment on one level: a location (its cell's centre) is positive for a box that
    contains it, the smallest such box where several do. `targets` (B, K, 5) int64 rows of
    (class, x1, y1, x2, y2), class −1 padding. Returns each location's class (B, H·W; −1
    background) and its box (B, H·W, 4)."""
    rows, cols = size
    ys, xs = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    centres = torch.stack([(xs.flatten() + 0.5) * stride, (ys.flatten() + 0.5) * stride], 1)  # (L, 2)
    boxes = targets[..., 1:].float()  # (B, K, 4)
    inside = ((centres[None, :, None, 0] > boxes[:, None, :, 0]) & (centres[None, :, None, 0] < boxes[:, None, :, 2])
              & (centres[None, :, None, 1] > boxes[:, None, :, 1]) & (centres[None, :, None, 1] < boxes[:, None, :, 3])
              & (targets[:, None, :, 0] >= 0))  # (B, L, K)
    area = ((boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1]))[:, None, :].expand_as(inside)
    chosen = torch.where(inside, area, torch.full_like(area, math.inf)).argmin(-1)  # (B, L)
    labels = torch.gather(targets[..., 0], 1, chosen).where(inside.any(-1), torch.full_like(chosen, -1))
    return labels, torch.gather(boxes, 1, chosen.unsqueeze(-1).expand(-1, -1, 4))


def _decoded_boxes(ltrb: torch.Tensor, stride: int) -> torch.Tensor:
    """(B, 4, H, W) ltrb distances in strides → (B, H·W, 4) x1y1x2y2 boxes around each location's centre."""
    _, _, rows, cols = ltrb.shape
    ys, xs = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    cx, cy = ((xs.flatten() + 0.5) * stride).to(ltrb), ((ys.flatten() + 0.5) * stride).to(ltrb)
    d = ltrb.flatten(2).transpose(1, 2) * stride
    return torch.stack([cx - d[..., 0], cy - d[..., 1], cx + d[..., 2], cy + d[..., 3]], -1)


def fcos_loss(output: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """torchvision's `FCOSHead.compute_loss` without centerness, as its loss dict: `loss_cls`,
    the sigmoid focal loss over every location and class, and `loss_box`, the GIoU loss of the
    positive locations' decoded boxes, each summed and divided by the positives (at least 1)."""
    logits, ltrb = output
    classes, (_, _, rows, cols) = logits.shape[1], logits.shape
    labels, boxes = fcos_targets(targets, (rows, cols), TinyFCOS.stride)
    positive = labels >= 0
    one_hot = nn.functional.one_hot(labels.clamp(min=0), classes).float() * positive.unsqueeze(-1)
    positives = max(1, int(positive.sum()))
    predicted = _decoded_boxes(ltrb, TinyFCOS.stride)
    return {"loss_cls": sigmoid_focal_loss(logits.flatten(2).transpose(1, 2), one_hot) / positives,
            "loss_box": generalized_box_iou_loss(predicted[positive], boxes[positive]) / positives}


def detection_iou(model: nn.Module, images: torch.Tensor, targets: torch.Tensor) -> float:
    """Held-out box quality: for each object, the IoU with its box of the box predicted at the
    location that scores its class highest in its image (an image holds at most one object of a
    class), averaged over the objects; eval mode, no gradient."""
    model.eval()
    with torch.no_grad():
        logits, ltrb = model(images)
    model.train()
    predicted = _decoded_boxes(ltrb, TinyFCOS.stride)  # (B, L, 4)
    image, slot = torch.nonzero(targets[..., 0] >= 0, as_tuple=True)
    best = logits.flatten(2)[image, targets[image, slot, 0]].argmax(-1)
    box, truth = predicted[image, best], targets[image, slot, 1:].float()
    x1, y1 = torch.max(box[:, 0], truth[:, 0]), torch.max(box[:, 1], truth[:, 1])
    x2, y2 = torch.min(box[:, 2], truth[:, 2]), torch.min(box[:, 3], truth[:, 3])
    inter = (x2 - x1).clamp(min=0) * (y2 - y1).clamp(min=0)
    area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])  # noqa: E731
    return float((inter / (area(box) + area(truth) - inter).clamp(min=1e-7)).mean())


class SqueezeExcite(nn.Module):
    """timm's `SqueezeExcite` of an MBConv block: global average pool → 1×1 conv to
    `reduced` channels → SiLU → 1×1 conv back → sigmoid gate on the channels."""

    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.conv_reduce, self.act1 = nn.Conv2d(channels, reduced, 1), nn.SiLU()
        self.conv_expand = nn.Conv2d(reduced, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.conv_expand(self.act1(self.conv_reduce(x.mean((2, 3), keepdim=True)))))


class InvertedResidual(nn.Module):
    """timm's `InvertedResidual` (MBConv): 1×1 expansion conv-BN-SiLU (absent at ratio 1: timm's
    `DepthwiseSeparableConv`), k×k depthwise conv-BN-SiLU, squeeze-excitation (reduced from the
    block's input channels × 0.25), 1×1 projection conv-BN (no activation), and where the shape is
    kept a residual with drop-path."""

    def __init__(self, inputs: int, outputs: int, kernel: int, stride: int, expand: int, drop: float) -> None:
        super().__init__()
        mid = inputs * expand
        self.conv_pw = nn.Sequential(nn.Conv2d(inputs, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU()) \
            if expand != 1 else nn.Identity()
        self.conv_dw = nn.Sequential(nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
                                     nn.BatchNorm2d(mid), nn.SiLU())
        self.se = SqueezeExcite(mid, max(1, int(inputs * 0.25)))
        self.conv_pwl = nn.Sequential(nn.Conv2d(mid, outputs, 1, bias=False), nn.BatchNorm2d(outputs))
        self.residual, self.drop = stride == 1 and inputs == outputs, drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_pwl(self.se(self.conv_dw(self.conv_pw(x))))
        return x + drop_path(h, self.drop, self.training) if self.residual else h


class EfficientNet(nn.Module):
    """timm's `EfficientNet` built from B0's block strings, narrow and shallow for 16×16 colour
    patterns: a 3×3 stem conv-BN-SiLU (stride 1 here, B0's 2), stages `ds_r1_k3_s1_c16`,
    `ir_r2_k3_s2_e4_c24`, `ir_r2_k5_s2_e4_c40` (B0's e6 at e4) with SE 0.25, a 1×1 head conv to
    128 channels + BN + SiLU, global average pooling, dropout 0.2, a linear classifier; drop-path
    rising linearly to `drop_path_rate` over the blocks; timm's `_init_weight_goog` (convs
    N(0, √(2 / fan_out)), BN 1 and 0, the classifier uniform ±1/√classes)."""

    stages = ((1, 3, 1, 1, 16), (2, 3, 2, 4, 24), (2, 5, 2, 4, 40))
    """(repeats, kernel, stride, expansion, channels) of each stage."""

    def __init__(self, classes: int, drop_path_rate: float = 0.2, head: int = 128) -> None:
        super().__init__()
        self.conv_stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.SiLU())
        total, blocks, inputs = sum(s[0] for s in self.stages), [], 16
        for repeats, kernel, stride, expand, outputs in self.stages:
            stage = []
            for i in range(repeats):
                rate = drop_path_rate * (len(stage) + sum(len(b) for b in blocks)) / total
                stage.append(InvertedResidual(inputs, outputs, kernel, stride if i == 0 else 1, expand, rate))
                inputs = outputs
            blocks.append(nn.Sequential(*stage))
        self.blocks = nn.Sequential(*blocks)
        self.conv_head = nn.Sequential(nn.Conv2d(inputs, head, 1, bias=False), nn.BatchNorm2d(head), nn.SiLU())
        self.dropout, self.classifier = nn.Dropout(0.2), nn.Linear(head, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                fan_out = module.kernel_size[0] * module.kernel_size[1] * module.out_channels // module.groups
                nn.init.normal_(module.weight, 0, math.sqrt(2.0 / fan_out))
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear):
                bound = 1 / math.sqrt(module.weight.size(0))
                nn.init.uniform_(module.weight, -bound, bound)
                nn.init.zeros_(module.bias)
        block_names = [f"blocks.{i}.{j}" for i, stage in enumerate(self.blocks) for j in range(len(stage))]
        self.units = ["conv_stem", *block_names, "conv_head", "classifier"]
        self.hidden = block_names
        # The logits; the last block's SE gate logits (into a sigmoid): every other conv meets a BatchNorm next.
        self.exposed = ["classifier", f"{block_names[-1]}.se.conv_expand"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.conv_head(self.blocks(self.conv_stem(x)))
        return self.classifier(self.dropout(features.mean((2, 3))))


class ModelEmaV2:
    """timm's `ModelEmaV2`: a deep copy of the model in eval mode, never trained, its every
    floating state entry (weights and BatchNorm's running stats) moved to decay × itself +
    (1 − decay) × the model's after each optimizer step (`update`), integer entries copied."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        import copy

        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        self.decay = decay

    def update(self, model: nn.Module) -> None:
        with torch.no_grad():
            for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
                if ema_v.is_floating_point():
                    ema_v.mul_(self.decay).add_(model_v, alpha=1 - self.decay)
                else:
                    ema_v.copy_(model_v)


def _derivative(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dy/dx of a pointwise y(x), differentiable (create_graph) so that the loss on it trains the
    net, as DeepXDE's `grad.jacobian` takes it; zero where y does not depend on x (a network whose
    features were cut from its input)."""
    if not y.requires_grad:
        return torch.zeros_like(x)
    (dy,) = torch.autograd.grad(y.sum(), x, create_graph=True, allow_unused=True, materialize_grads=True)
    return dy


class PoissonPINN(nn.Module):
    """A physics-informed network as DeepXDE's `FNN` builds it for its 1-D Poisson example
    (Raissi et al.'s PINN): a tanh MLP 1 → `width` ×3 → 1, Glorot-normal weights, zero biases.
    `forward` takes the collocation and boundary points and returns the PDE residual
    −u″(x) − π² sin(πx) at the collocation points (u″ by `torch.autograd.grad` on the inputs with
    `create_graph=True`, under `enable_grad` so that an eval loop can measure it too) and u at
    the boundary."""

    def __init__(self, width: int = 32, depth: int = 3) -> None:
        super().__init__()
        widths = [1, *([width] * depth), 1]
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        for layer in self.linears:
            nn.init.xavier_normal_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.units = [f"linears.{i}" for i in range(len(self.linears))]
        self.hidden = self.units[1:-1]
        self.exposed = list(self.units)  # no normalisation anywhere

    def u(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.linears[:-1]:
            x = torch.tanh(layer(x))
        return self.linears[-1](x)

    def forward(self, points: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.enable_grad():
            x = points["domain"].detach().requires_grad_(True)
            u_xx = _derivative(_derivative(self.u(x), x), x)
        return -u_xx - math.pi ** 2 * torch.sin(math.pi * x), self.u(points["boundary"])


def pinn_loss(output: tuple[torch.Tensor, torch.Tensor], boundary_values: torch.Tensor) -> dict[str, torch.Tensor]:
    """DeepXDE's loss terms, each a mean square, weight 1: the PDE residual's and the boundary
    condition's (logged apart, as DeepXDE's `LossHistory` keeps them)."""
    residual, boundary = output
    return {"loss_pde": (residual ** 2).mean(), "loss_bc": nn.functional.mse_loss(boundary, boundary_values)}


def l2_relative_error(model: PoissonPINN, grid: int) -> float:
    """DeepXDE's "l2 relative error" metric of u against the exact sin(πx) on `grid` held-out
    points (eval mode, no gradient)."""
    x = torch.linspace(-1, 1, grid).unsqueeze(1)
    model.eval()
    with torch.no_grad():
        u = model.u(x)
    model.train()
    exact = torch.sin(math.pi * x)
    return float((u - exact).norm() / exact.norm())


class SineMAML(nn.Module):
    """MAML (Finn et al.) on sinusoid regression as tristandeleu/pytorch-maml writes it, with
    `torch.func.functional_call` where it uses torchmeta's `MetaModule(params=...)`: Finn's
    regressor (1 → 40 → 40 → 1, ReLU); `forward` takes a meta-batch of tasks and, for each,
    adapts fast weights by `inner_steps` SGD steps on the support loss (`update_parameters`:
    `torch.autograd.grad` with `create_graph=True` while training, second-order MAML; first-order
    in eval, whose values are the same), then predicts its query points with them."""

    def __init__(self, width: int = 40, inner_lr: float = 0.01, inner_steps: int = 1) -> None:
        super().__init__()
        self.net, self.inner_lr, self.inner_steps = _mlp(1, width, 1), inner_lr, inner_steps
        self.units = ["net.fc0", "net.fc1", "net.out"]
        self.hidden = ["net.fc0", "net.fc1"]
        self.exposed = list(self.units)

    def adapt(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        params = dict(self.net.named_parameters())
        for _ in range(self.inner_steps):
            loss = nn.functional.mse_loss(torch.func.functional_call(self.net, params, (x,)), y)
            grads = torch.autograd.grad(loss, list(params.values()), create_graph=self.training, allow_unused=True,
                                        materialize_grads=True)
            params = {name: p - self.inner_lr * g for (name, p), g in zip(params.items(), grads)}
        return params

    def forward(self, tasks: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.enable_grad():
            return torch.stack([torch.func.functional_call(self.net, self.adapt(sx, sy), (qx,))
                                for sx, sy, qx in zip(tasks["support_x"], tasks["support_y"], tasks["query_x"])])


class UnetGenerator(nn.Module):
    """pix2pix's `UnetGenerator` (junyanz/pytorch-CycleGAN-and-pix2pix `networks.py`), its
    recursive `UnetSkipConnectionBlock`s unrolled: 4×4 stride-2 convs down (LeakyReLU 0.2 before
    each but the first, BatchNorm after each but the outermost and innermost), transposed convs
    up (ReLU before, BatchNorm after, dropout 0.5 in the innermost-but-one), each up block's
    output concatenated with its mirror's input, Tanh out; no bias before a BatchNorm."""

    def __init__(self, inputs: int = 1, outputs: int = 3, ngf: int = 16, downs: int = 4) -> None:
        super().__init__()
        widths = [ngf * min(2 ** i, 8) for i in range(downs)]
        self.down = nn.ModuleList()
        for i, width in enumerate(widths):
            conv = nn.Conv2d(inputs if i == 0 else widths[i - 1], width, 4, 2, 1, bias=i in (0, downs - 1))
            norm = nn.BatchNorm2d(width) if 0 < i < downs - 1 else nn.Identity()
            self.down.append(nn.Sequential(nn.Identity() if i == 0 else nn.LeakyReLU(0.2), conv, norm))
        self.up = nn.ModuleList()
        for i in reversed(range(downs)):
            into = widths[i] * (1 if i == downs - 1 else 2)
            if i == 0:
                self.up.append(nn.Sequential(nn.ReLU(), nn.ConvTranspose2d(into, outputs, 4, 2, 1), nn.Tanh()))
                continue
            layers = [nn.ReLU(), nn.ConvTranspose2d(into, widths[i - 1], 4, 2, 1, bias=False),
                      nn.BatchNorm2d(widths[i - 1])]
            self.up.append(nn.Sequential(*layers, *([nn.Dropout(0.5)] if i == downs - 2 else [])))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
        for i, block in enumerate(self.up):
            x = block(x if i == 0 else torch.cat([x, skips[-1 - i]], 1))
        return x


class NLayerDiscriminator(nn.Module):
    """pix2pix's PatchGAN `NLayerDiscriminator` (`--netD basic` with `n_layers`): 4×4 convs,
    stride 2 then 1, BatchNorm and LeakyReLU 0.2, one logit per patch."""

    def __init__(self, inputs: int = 4, ndf: int = 16, n_layers: int = 2) -> None:
        super().__init__()
        layers, width = [nn.Conv2d(inputs, ndf, 4, 2, 1), nn.LeakyReLU(0.2)], ndf
        for n in range(1, n_layers + 1):
            wider = ndf * min(2 ** n, 8)
            layers += [nn.Conv2d(width, wider, 4, 2 if n < n_layers else 1, 1, bias=False), nn.BatchNorm2d(wider),
                       nn.LeakyReLU(0.2)]
            width = wider
        layers.append(nn.Conv2d(width, 1, 4, 1, 1))
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def _pix2pix_init(module: nn.Module) -> None:
    """pix2pix's `init_weights(init_type='normal', init_gain=0.02)`: convs N(0, 0.02), zero bias;
    BatchNorm weights N(1, 0.02)."""
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


class Pix2Pix(nn.Module):
    """pix2pix's two networks: `netG` (edges → a colour image, `UnetGenerator`) and `netD` (an
    (edges, image) pair → patch logits, `NLayerDiscriminator`), both `init_weights`'d."""

    def __init__(self) -> None:
        super().__init__()
        self.netG, self.netD = UnetGenerator(), NLayerDiscriminator()
        self.apply(_pix2pix_init)
        generator = [f"netG.down.{i}" for i in range(len(self.netG.down))] + \
            [f"netG.up.{i}" for i in range(len(self.netG.up))]
        self.units = [*generator, "netD.model"]
        self.hidden = generator[1:-1]
        self.exposed = ["netG.up.3.1", "netD.model.8"]  # the image before its tanh; the patch logits


def pix2pix_l1_error(model: Pix2Pix, edges: torch.Tensor, photos: torch.Tensor) -> float:
    """The mean absolute error of the generator's images against the held-out photos, in pixel
    units of [0, 1] (eval mode, no gradient; pix2pix's test.py without `--eval` keeps train mode,
    here the BatchNorm running statistics are used)."""
    model.eval()
    with torch.no_grad():
        error = float((model.netG(edges) - photos).abs().mean()) / 2
    model.train()
    return error


START_TAG, STOP_TAG = len(TAGS), len(TAGS) + 1
"""The CRF's START and STOP tags, after the data's tags (`data.TAGS`)."""


class BiLSTMCRF(nn.Module):
    """The PyTorch tutorial's `BiLSTM_CRF` ("Advanced: Making Dynamic Decisions and the Bi-LSTM
    CRF"): `word_embeds` → a one-layer bidirectional `lstm` (hidden_dim // 2 a direction, its
    initial state drawn from randn at every call, as the tutorial's `init_hidden`) →
    `hidden2tag` emission scores over the tags and START/STOP; `transitions[i, j]` the score of
    going to tag i from tag j, randn-initialised, with nothing going to START nor leaving STOP
    (−10000). Batched over right-padded sentences (token 0), where the tutorial tags one
    sentence at a time: `forward` returns (emissions (B, T, K), transitions, mask (B, T)), the
    tutorial's `_get_lstm_features` and what `crf_nll` and `viterbi_decode` need."""

    def __init__(self, vocab: int, tags: int, embedding_dim: int = 16, hidden_dim: int = 32) -> None:
        super().__init__()
        self.tagset_size, self.hidden_dim = tags + 2, hidden_dim
        self.word_embeds = nn.Embedding(vocab, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True, batch_first=True)
        self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
        self.transitions = nn.Parameter(torch.randn(self.tagset_size, self.tagset_size))
        self.transitions.data[START_TAG, :] = -10000
        self.transitions.data[:, STOP_TAG] = -10000
        self.units = ["word_embeds", "lstm", "hidden2tag"]
        self.hidden = ["word_embeds", "lstm"]
        self.exposed = ["lstm", "hidden2tag"]
        self.loose = ("transitions",)  # a bare parameter of the model, as the tutorial keeps it

    def forward(self, sentences: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = (torch.randn(2, len(sentences), self.hidden_dim // 2),
                  torch.randn(2, len(sentences), self.hidden_dim // 2))
        lstm_out, _ = self.lstm(self.word_embeds(sentences), hidden)
        return self.hidden2tag(lstm_out), self.transitions, sentences != 0


def crf_log_partition(feats: torch.Tensor, transitions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The tutorial's `_forward_alg`, batched: log Σ over tag paths of exp(score), by the forward
    algorithm (log-sum-exp over the previous tag at each word; a padded word leaves a sentence's
    forward variables as they were), then the transition to STOP; (B,)."""
    forward_var = torch.full((len(feats), transitions.shape[0]), -10000.0)
    forward_var[:, START_TAG] = 0.0
    for t in range(feats.shape[1]):
        scores = forward_var.unsqueeze(1) + transitions.unsqueeze(0)  # [b, next tag, previous tag]
        forward_var = torch.where(mask[:, t, None], torch.logsumexp(scores, dim=2) + feats[:, t], forward_var)
    return torch.logsumexp(forward_var + transitions[STOP_TAG], dim=1)


def crf_path_score(feats: torch.Tensor, transitions: torch.Tensor, mask: torch.Tensor,
                   tags: torch.Tensor) -> torch.Tensor:
    """The tutorial's `_score_sentence`, batched: the score of the gold path (START, its tags,
    STOP): transitions plus emissions over each sentence's words; (B,)."""
    path = torch.cat([torch.full((len(tags), 1), START_TAG), tags.clamp(min=0)], dim=1)
    steps = transitions[path[:, 1:], path[:, :-1]] + feats.gather(2, path[:, 1:, None]).squeeze(2)
    last = path.gather(1, mask.sum(1, keepdim=True)).squeeze(1)
    return (steps * mask).sum(1) + transitions[STOP_TAG, last]


def crf_nll(output: tuple[torch.Tensor, torch.Tensor, torch.Tensor], tags: torch.Tensor) -> torch.Tensor:
    """The tutorial's `neg_log_likelihood`: forward score − gold score, a sentence's NLL (nats,
    summed over its words, as the tutorial's), averaged over the batch."""
    feats, transitions, mask = output
    return (crf_log_partition(feats, transitions, mask) - crf_path_score(feats, transitions, mask, tags)).mean()


def viterbi_decode(feats: torch.Tensor, transitions: torch.Tensor, mask: torch.Tensor
                   ) -> tuple[torch.Tensor, list[list[int]]]:
    """The tutorial's `_viterbi_decode`, batched: (each sentence's best path score (B,), its best
    tag path over its words)."""
    forward_var = torch.full((len(feats), transitions.shape[0]), -10000.0)
    forward_var[:, START_TAG] = 0.0
    backpointers = []
    for t in range(feats.shape[1]):
        best, previous = (forward_var.unsqueeze(1) + transitions.unsqueeze(0)).max(dim=2)
        forward_var = torch.where(mask[:, t, None], best + feats[:, t], forward_var)
        backpointers.append(previous)
    terminal = forward_var + transitions[STOP_TAG]
    scores, last = terminal.max(dim=1)
    paths = []
    for b, length in enumerate(mask.sum(1).tolist()):
        path = [int(last[b])]
        for t in range(length - 1, 0, -1):
            path.append(int(backpointers[t][b, path[-1]]))
        paths.append(path[::-1])
    return scores, paths


def _entity_spans(tags: list[int]) -> set[tuple[int, int, int]]:
    """(start, end, type) of each entity in a tag path (conlleval's chunks: a B- begins one, an
    I- continues one of its type and begins one otherwise; O, START and STOP end one)."""
    spans, start, kind = set(), None, None
    for i, tag in enumerate([*tags, 0]):
        inside = tag in (1, 2, 3, 4)
        tag_kind = (tag - 1) // 2 if inside else None
        if start is not None and (not inside or tag % 2 == 1 or tag_kind != kind):
            spans.add((start, i, kind))
            start = None
        if inside and start is None:
            start, kind = i, tag_kind
    return spans


def entity_f1(model: BiLSTMCRF, sentences: torch.Tensor, tags: torch.Tensor) -> float:
    """The entity-level F1 (exact spans and types, as seqeval scores NER) of the Viterbi paths on
    held-out sentences (eval mode, no gradient)."""
    model.eval()
    with torch.no_grad():
        _, paths = viterbi_decode(*model(sentences))
    model.train()
    found = gold = right = 0
    for path, truth, length in zip(paths, tags.tolist(), (sentences != 0).sum(1).tolist()):
        predicted, expected = _entity_spans(path), _entity_spans(truth[:length])
        found, gold, right = found + len(predicted), gold + len(expected), right + len(predicted & expected)
    return 2 * right / (found + gold) if found + gold else 1.0


class MaskedConv2d(nn.Conv2d):
    """PixelCNN's masked convolution as common PyTorch code writes it: a `mask` buffer that
    zeroes the kernel below the centre row and right of the centre (type A: the centre too, so
    a pixel never sees itself; type B: the centre kept), multiplied into `weight.data` in place
    at every `forward` (so an optimizer's step on a masked entry is undone at the next call)."""

    def __init__(self, mask_type: str, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register_buffer("mask", torch.ones_like(self.weight))
        _, _, height, width = self.weight.shape
        self.mask[:, :, height // 2, width // 2 + (mask_type == "B"):] = 0
        self.mask[:, :, height // 2 + 1:] = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.weight.data *= self.mask
        return super().forward(x)


class PixelCNNResidual(nn.Module):
    """van den Oord et al.'s residual block (2016, fig. 5): ReLU, 1×1 2h → h, ReLU, 3×3 type-B
    masked h → h, ReLU, 1×1 h → 2h, added to its input (a 1×1 conv on one colour channel needs
    no mask)."""

    def __init__(self, h: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.ReLU(), nn.Conv2d(2 * h, h, 1), nn.ReLU(), MaskedConv2d("B", h, h, 3, padding=1),
                                 nn.ReLU(), nn.Conv2d(h, 2 * h, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


class PixelCNN(nn.Module):
    """A PixelCNN over one grey channel: a 7×7 type-A masked conv to 2h features, `blocks`
    residual blocks, ReLU, 1×1, ReLU, 1×1 to `levels` logits per pixel ((B, levels, H, W): the
    cross-entropy over the levels is the NLL in nats per dimension)."""

    def __init__(self, levels: int, h: int = 16, blocks: int = 4) -> None:
        super().__init__()
        self.conv_in = MaskedConv2d("A", 1, 2 * h, 7, padding=3)
        self.blocks = nn.ModuleList(PixelCNNResidual(h) for _ in range(blocks))
        self.head = nn.Sequential(nn.ReLU(), nn.Conv2d(2 * h, 2 * h, 1), nn.ReLU(), nn.Conv2d(2 * h, levels, 1))
        self.units = ["conv_in", *(f"blocks.{i}" for i in range(blocks)), "head"]
        self.hidden = [f"blocks.{i}" for i in range(blocks)]
        self.exposed = ["conv_in", "blocks.0.net.3", "head.3"]  # the type-A conv, a type-B conv, the logits

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_in(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class ODEFunc(nn.Module):
    """torchdiffeq's `ode_demo.py` `ODEFunc`: dy/dt = net(y³), net 2 → 50 → 2 with a tanh,
    weights N(0, 0.1), zero biases."""

    def __init__(self, width: int = 50) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, width), nn.Tanh(), nn.Linear(width, 2))
        for module in self.net.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0, std=0.1)
                nn.init.constant_(module.bias, val=0)

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.net(y ** 3)


def odeint_rk4(func: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], y0: torch.Tensor,
               t: torch.Tensor) -> torch.Tensor:
    """`torchdiffeq.odeint(func, y0, t, method="rk4")` on t's own grid, written out: one RK4 step
    (`data.rk4_step`, torchdiffeq's 3/8 rule) between consecutive times, every state kept;
    (len(t), *y0.shape), differentiable through every step (the demo without `--adjoint`)."""
    ys = [y0]
    for t0, t1 in zip(t[:-1], t[1:]):
        ys.append(rk4_step(func, t0, t1 - t0, ys[-1]))
    return torch.stack(ys)


class NeuralODE(nn.Module):
    """The demo's model: `func` integrated from a batch of states (M, 1, 2) over `batch_t`, the
    first `batch_time` observation times (the same for every batch); (batch_time, M, 1, 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.func = ODEFunc()
        self.register_buffer("batch_t", spiral_trajectory()[0][: SPIRAL.batch_time].clone())
        self.units = ["func.net.0", "func.net.2"]
        self.hidden = ["func.net.0"]
        self.exposed = ["func.net.0", "func.net.2"]

    def forward(self, batch_y0: torch.Tensor) -> torch.Tensor:
        return odeint_rk4(self.func, batch_y0, self.batch_t)


def trajectory_error(model: NeuralODE) -> float:
    """The demo's test loss: the mean absolute error of the whole trajectory integrated from
    true_y0 (every observation time) to the true one (eval mode, no gradient)."""
    t, true_y = spiral_trajectory()
    model.eval()
    with torch.no_grad():
        error = float((odeint_rk4(model.func, true_y[0], t) - true_y).abs().mean())
    model.train()
    return error


def positional_encoding(x: torch.Tensor, frequencies: int) -> torch.Tensor:
    """tiny_nerf's `posenc`: x, then sin and cos of 2^i · x for i < `frequencies` (3 + 3 · 2 · L
    features for a 3-D point)."""
    encoded = [x]
    for i in range(frequencies):
        for fn in (torch.sin, torch.cos):
            encoded.append(fn(2.0 ** i * x))
    return torch.cat(encoded, -1)


class TinyNeRF(nn.Module):
    """bmild/nerf's `tiny_nerf.ipynb`: its `init_model` MLP (`depth` ReLU Dense layers of `width`,
    the encoded input concatenated back after the fifth (`i % 4 == 0 and i > 0`), a Dense of 4:
    RGB and density; Keras's Dense init, glorot-uniform weights and zero biases) and its
    `render_rays`: `samples` depths from near to far along each ray, each moved by a uniform
    draw within its bin in training (`rand=True`, stratified), not in eval; the points encoded
    (`positional_encoding`, L = `frequencies`), σ = relu, rgb = sigmoid, `dists` between samples
    (1e10 after the last, not scaled by the ray's length, as the notebook's), α = 1 − exp(−σ·dist),
    weights α · exclusive cumprod(1 − α + 1e-10), the ray's colour Σ weights · rgb. `forward(rays)`
    renders (R, 6) rays (origin, direction) to (R, 3) colours."""

    def __init__(self, depth: int = 8, width: int = 64, frequencies: int = 6, samples: int = 24,
                 near: float = 2.0, far: float = 6.0) -> None:
        super().__init__()
        self.frequencies, self.samples, self.near, self.far = frequencies, samples, near, far
        inputs = 3 + 3 * 2 * frequencies
        self.layers, features = nn.ModuleList(), inputs
        for i in range(depth):
            self.layers.append(nn.Linear(features, width))
            features = width + inputs if i % 4 == 0 and i > 0 else width
        self.output = nn.Linear(features, 4)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        self.units = [*(f"layers.{i}" for i in range(depth)), "output"]
        self.hidden = [f"layers.{i}" for i in range(depth)]
        self.exposed = ["layers.0", f"layers.{depth // 2 + 1}", "output"]  # the first, the one after the skip, the head

    def network(self, points: torch.Tensor) -> torch.Tensor:
        inputs = positional_encoding(points, self.frequencies)
        h = inputs
        for i, layer in enumerate(self.layers):
            h = torch.relu(layer(h))
            if i % 4 == 0 and i > 0:
                h = torch.cat([h, inputs], -1)
        return self.output(h)

    def forward(self, rays: torch.Tensor) -> torch.Tensor:
        rays_o, rays_d = rays[:, :3], rays[:, 3:]
        z_vals = torch.linspace(self.near, self.far, self.samples).expand(len(rays), -1)
        if self.training:
            z_vals = z_vals + torch.rand(len(rays), self.samples) * (self.far - self.near) / self.samples
        points = rays_o[:, None, :] + rays_d[:, None, :] * z_vals[..., None]
        raw = self.network(points)
        sigma_a, rgb = torch.relu(raw[..., 3]), torch.sigmoid(raw[..., :3])
        dists = torch.cat([z_vals[:, 1:] - z_vals[:, :-1], torch.full_like(z_vals[:, :1], 1e10)], -1)
        alpha = 1.0 - torch.exp(-sigma_a * dists)
        transmitted = torch.cumprod(1.0 - alpha + 1e-10, -1)
        weights = alpha * torch.cat([torch.ones_like(transmitted[:, :1]), transmitted[:, :-1]], -1)
        return (weights[..., None] * rgb).sum(-2)


def squash(s: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sabour et al.'s squash, as XifengGuo/CapsNet-Pytorch writes it: s · |s|² / (1 + |s|²) / (|s| + 1e-8)."""
    norm = s.norm(dim=dim, keepdim=True)
    return s * (norm ** 2 / (1 + norm ** 2) / (norm + 1e-8))


class PrimaryCapsule(nn.Module):
    """XifengGuo's `PrimaryCapsule`: one conv whose output is viewed as capsules of `dim_caps`
    consecutive values (`view(batch, -1, dim_caps)` straight on (B, C, H, W), as there), squashed."""

    def __init__(self, in_channels: int, out_channels: int, dim_caps: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        self.dim_caps = dim_caps
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return squash(self.conv2d(x).view(len(x), -1, self.dim_caps))


class DenseCapsule(nn.Module):
    """XifengGuo's `DenseCapsule`: predictions û_j|i = W_ij u_i (W 0.01 · randn), routing by
    agreement (`routings` iterations: c = softmax of the logits b over the output capsules,
    v = squash(Σ_i c_ij û_j|i), b += v · û); û detached in every iteration but the last, as
    there (the Keras original's stop-gradient)."""

    def __init__(self, in_num_caps: int, in_dim_caps: int, out_num_caps: int, out_dim_caps: int,
                 routings: int = 3) -> None:
        super().__init__()
        if routings < 1:
            raise ValueError("routings must be at least 1")
        self.routings = routings
        self.weight = nn.Parameter(0.01 * torch.randn(out_num_caps, in_num_caps, out_dim_caps, in_dim_caps))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        # There torch.matmul(self.weight, u[:, None, :, :, None]) and broadcast products summed; the
        # same sums as einsums (a third of the step's time at batch 32 went to the broadcasts).
        u_hat = torch.einsum("jiop,bip->bjio", self.weight, u)
        u_hat_detached = u_hat.detach()
        b = torch.zeros(u_hat.shape[:3])
        for _ in range(self.routings - 1):
            c = torch.softmax(b, dim=1)
            v = squash(torch.einsum("bji,bjio->bjo", c, u_hat_detached))
            b = b + torch.einsum("bjo,bjio->bji", v, u_hat_detached)
        c = torch.softmax(b, dim=1)
        return squash(torch.einsum("bji,bjio->bjo", c, u_hat))


class CapsuleNet(nn.Module):
    """Sabour et al.'s CapsNet as XifengGuo/CapsNet-Pytorch writes it, narrower: a 9×9 conv + ReLU,
    `PrimaryCapsule` (a 9×9 stride-2 conv viewed as 8-D capsules), `DenseCapsule` (one 16-D
    capsule a class, 3 routing iterations); the class scores are the capsules' lengths; the
    `decoder` (Linear-ReLU-Linear-ReLU-Linear-sigmoid) reconstructs the image from the capsules
    masked by the true class in training (`forward(x, y)`) and by the longest capsule when no
    label is given. Returns (lengths (B, classes), reconstruction (B, pixels), x flattened: the
    reconstruction's target, which the repository's `caps_loss(y, y_pred, x, x_recon)` reads)."""

    def __init__(self, classes: int = 10, size: int = 28, channels: int = 32, capsule_types: int = 8,
                 routings: int = 3) -> None:
        super().__init__()
        self.classes = classes
        self.conv1 = nn.Conv2d(1, channels, 9)
        self.primarycaps = PrimaryCapsule(channels, capsule_types * 8, 8, 9, 2)
        grid = ((size - 8) - 9) // 2 + 1
        self.digitcaps = DenseCapsule(capsule_types * grid * grid, 8, classes, 16, routings)
        self.decoder = nn.Sequential(nn.Linear(16 * classes, 128), nn.ReLU(), nn.Linear(128, 256), nn.ReLU(),
                                     nn.Linear(256, size * size), nn.Sigmoid())
        self.units = ["conv1", "primarycaps", "digitcaps", "decoder"]
        self.hidden = ["conv1", "primarycaps"]
        self.exposed = ["conv1", "digitcaps", "decoder.4"]

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        capsules = self.digitcaps(self.primarycaps(torch.relu(self.conv1(x))))
        length = capsules.norm(dim=-1)
        index = length.argmax(1) if y is None else y
        mask = nn.functional.one_hot(index, self.classes).to(capsules.dtype)
        reconstruction = self.decoder((capsules * mask[:, :, None]).flatten(1))
        return length, reconstruction, x.flatten(1)


CAPSNET_RECONSTRUCTION = 0.0005
"""The reconstruction loss's weight on the summed squared error (Sabour et al.'s; XifengGuo's
`lam_recon` 0.0005 · 784 on the mean)."""


def margin_loss(length: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sabour et al.'s margin loss, summed over the classes: T_k max(0, 0.9 − |v_k|)² + 0.5 (1 − T_k)
    max(0, |v_k| − 0.1)²; (B,)."""
    present = nn.functional.one_hot(labels, length.shape[1]).to(length.dtype)
    return (present * (0.9 - length).clamp(min=0) ** 2 + 0.5 * (1 - present) * (length - 0.1).clamp(min=0) ** 2
            ).sum(1)


def caps_loss(output: tuple[torch.Tensor, torch.Tensor, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """XifengGuo's `caps_loss`: the margin loss averaged over the batch + 0.0005 × the summed
    squared reconstruction error (its `lam_recon` × the mean over pixels)."""
    length, reconstruction, images = output
    reconstruction_error = ((reconstruction - images) ** 2).mean()
    return margin_loss(length, labels).mean() + CAPSNET_RECONSTRUCTION * images.shape[1] * reconstruction_error


def capsule_accuracy(model: CapsuleNet, images: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of held-out images whose longest capsule is their class (eval mode, no gradient,
    no label given: XifengGuo's `test`)."""
    model.eval()
    with torch.no_grad():
        accuracy = float((model(images)[0].argmax(1) == labels).float().mean())
    model.train()
    return accuracy


def _pranz24_init(module: nn.Module) -> None:
    """pranz24/pytorch-soft-actor-critic's `weights_init_`: xavier-uniform weights (gain 1), zero biases."""
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight, gain=1)
        nn.init.constant_(module.bias, 0)


LOG_SIG_MAX, LOG_SIG_MIN = 2, -20
"""The policy's log-std clamp (pranz24's)."""
SAC_EPSILON = 1e-6
"""pranz24's epsilon in the tanh correction's log."""


def squashed_gaussian(mean: torch.Tensor, log_std: torch.Tensor, action_scale: float = 1.0,
                      action_bias: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pranz24's `GaussianPolicy.sample` after the network: a reparameterised draw x_t of
    N(mean, exp(log_std)), the action tanh(x_t) · scale + bias, its log-probability with the tanh
    correction −log(scale · (1 − tanh² x_t) + 1e-6) summed over the action's dimensions (B, 1),
    and the deterministic action tanh(mean) · scale + bias. `Normal(..., validate_args=False)`:
    with torch's default validation a NaN mean raises ValueError in pranz24's run; here it reaches
    the loss, which the loop's NaN check stops (as every loop here)."""
    normal = torch.distributions.Normal(mean, log_std.exp(), validate_args=False)
    x_t = normal.rsample()
    y_t = torch.tanh(x_t)
    action = y_t * action_scale + action_bias
    log_prob = normal.log_prob(x_t) - torch.log(action_scale * (1 - y_t.pow(2)) + SAC_EPSILON)
    return action, log_prob.sum(1, keepdim=True), torch.tanh(mean) * action_scale + action_bias


class GaussianPolicy(nn.Module):
    """pranz24's `GaussianPolicy`: Linear-ReLU-Linear-ReLU, a `mean_linear` and a `log_std_linear`
    head (log-std clamped to [−20, 2]); `forward(state)` gives (mean, log_std), `sample(state)`
    `squashed_gaussian`'s (action, log_prob, mean)."""

    def __init__(self, num_inputs: int, num_actions: int, hidden_dim: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(num_inputs, hidden_dim)
        self.linear2 = nn.Linear(hidden_dim, hidden_dim)
        self.mean_linear = nn.Linear(hidden_dim, num_actions)
        self.log_std_linear = nn.Linear(hidden_dim, num_actions)
        self.apply(_pranz24_init)

    def forward(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.relu(self.linear2(torch.relu(self.linear1(state))))
        return self.mean_linear(x), torch.clamp(self.log_std_linear(x), min=LOG_SIG_MIN, max=LOG_SIG_MAX)

    def sample(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return squashed_gaussian(*self(state))


class TwinQNetwork(nn.Module):
    """pranz24's `QNetwork`: two Q heads in one module (Q1: linear1-3, Q2: linear4-6), each
    Linear-ReLU-Linear-ReLU-Linear on the state and action concatenated; (Q1, Q2), each (B, 1)."""

    def __init__(self, num_inputs: int, num_actions: int, hidden_dim: int) -> None:
        super().__init__()
        self.linear1 = nn.Linear(num_inputs + num_actions, hidden_dim)
        self.linear2 = nn.Linear(hidden_dim, hidden_dim)
        self.linear3 = nn.Linear(hidden_dim, 1)
        self.linear4 = nn.Linear(num_inputs + num_actions, hidden_dim)
        self.linear5 = nn.Linear(hidden_dim, hidden_dim)
        self.linear6 = nn.Linear(hidden_dim, 1)
        self.apply(_pranz24_init)

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xu = torch.cat([state, action], 1)
        x1 = self.linear3(torch.relu(self.linear2(torch.relu(self.linear1(xu)))))
        x2 = self.linear6(torch.relu(self.linear5(torch.relu(self.linear4(xu)))))
        return x1, x2


class SoftActorCritic(nn.Module):
    """What pranz24's `SAC` agent trains, as one module for the recorder: its `policy`
    (`GaussianPolicy`), its `critic` (`TwinQNetwork`) and the entropy temperature's `log_alpha`
    (0 at the start, as there); the target critic is a copy the loop keeps outside it
    (`training.train_sac`), moved by Polyak averaging, never by an optimizer. Hidden width 64
    where pranz24 takes 256. `forward(state, action)` is the critic's."""

    def __init__(self, observations: int, actions: int, hidden_dim: int = 64) -> None:
        super().__init__()
        self.policy = GaussianPolicy(observations, actions, hidden_dim)
        self.critic = TwinQNetwork(observations, actions, hidden_dim)
        self.log_alpha = nn.Parameter(torch.zeros(1))
        self.units = ["policy.linear1", "policy.linear2", "policy.mean_linear", "policy.log_std_linear",
                      *(f"critic.linear{i}" for i in range(1, 7))]
        self.loose = ("log_alpha",)  # a bare parameter with its own Adam, as pranz24 keeps it
        self.hidden = ["policy.linear1", "policy.linear2"]
        self.exposed = ["policy.linear1", "policy.mean_linear", "critic.linear3"]  # no normalisation anywhere

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.critic(state, action)


def get_2d_sincos_pos_embed(embed_dim: int, grid_size: int, cls_token: bool = False) -> np.ndarray:
    """facebookresearch/mae's `util/pos_embed.py`: fixed 2-D sin-cos positions (grid_size², embed_dim),
    half the channels from the grid's rows, half from its columns; a zero row first for the cls token."""
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.stack(np.meshgrid(grid_w, grid_h), axis=0).reshape([2, 1, grid_size, grid_size])
    emb = np.concatenate([_1d_sincos_pos_embed(embed_dim // 2, grid[0]),
                          _1d_sincos_pos_embed(embed_dim // 2, grid[1])], axis=1)
    if cls_token:
        emb = np.concatenate([np.zeros([1, embed_dim]), emb], axis=0)
    return emb


def _1d_sincos_pos_embed(embed_dim: int, pos: np.ndarray) -> np.ndarray:
    """mae's `get_1d_sincos_pos_embed_from_grid`: sin and cos of pos · 1/10000^(2i/D)."""
    omega = np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0)
    omega = 1.0 / 10000 ** omega
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def patchify(imgs: torch.Tensor, p: int) -> torch.Tensor:
    """mae's `patchify`: (N, C, H, W) → (N, L, p²·C), each patch's pixels row by row, channels last."""
    c, h = imgs.shape[1], imgs.shape[2] // p
    x = imgs.reshape(imgs.shape[0], c, h, p, h, p)
    x = torch.einsum("nchpwq->nhwpqc", x)
    return x.reshape(imgs.shape[0], h * h, p ** 2 * c)


MAE_PATCH = 4
"""The MAE's patch size on the 28 × 28 digits (7 × 7 = 49 patches)."""


class MAEPatchEmbed(nn.Module):
    """timm's `PatchEmbed` as mae builds it: a p×p stride-p conv, flattened to (B, L, dim)."""

    def __init__(self, image: int, patch: int, channels: int, dim: int) -> None:
        super().__init__()
        self.num_patches = (image // patch) ** 2
        self.proj = nn.Conv2d(channels, dim, patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class MaskedAutoencoderViT(nn.Module):
    """He et al.'s masked autoencoder as facebookresearch/mae's `models_mae.py` writes it, small:
    `patchify` the (B, 1, 28, 28) images into 4×4 patches (49), `random_masking` per sample (the
    argsort of uniform noise, the first 25 % kept: 12 visible), an encoder of timm `Block`s
    (pre-norm attention with qkv bias, MLP ratio 4, GELU) over the visible patches and a cls token,
    fixed 2-D sin-cos positions; a light decoder (`decoder_embed`, a shared `mask_token` in every
    masked place, unshuffled by `ids_restore`, its own sin-cos positions, `Block`s, `decoder_pred`
    to the patch's pixels); the loss the MSE on the masked patches only, each target patch
    normalised by its own mean and variance (`norm_pix_loss`, the repository's pre-training
    recipe). mae's init: xavier-uniform Linears (and the patch conv as one), zero biases, LayerNorm
    1/0, cls and mask tokens N(0, 0.02). Widths 64 / 32, depths 4 / 2, 4 heads, where ViT-B's MAE
    takes 768 / 512, 12 / 8, 12 / 16. The fixed positions are buffers (mae: parameters with
    `requires_grad=False`, which no optimizer holds); the cls and mask tokens are `loose`, each in
    a group of its own without weight decay (timm's `add_weight_decay` in mae decays them, being
    3-D: 0.05 × lr a step on 96 values). `forward(imgs)` gives (loss, pred, mask), as there."""

    def __init__(self, img_size: int = 28, patch_size: int = MAE_PATCH, in_chans: int = 1, embed_dim: int = 64,
                 depth: int = 4, num_heads: int = 4, decoder_embed_dim: int = 32, decoder_depth: int = 2,
                 decoder_num_heads: int = 4, mask_ratio: float = 0.75, norm_pix_loss: bool = True) -> None:
        super().__init__()
        self.patch_size, self.in_chans, self.mask_ratio, self.norm_pix_loss = patch_size, in_chans, mask_ratio, \
            norm_pix_loss
        self.patch_embed = MAEPatchEmbed(img_size, patch_size, in_chans, embed_dim)
        num_patches, grid = self.patch_embed.num_patches, img_size // patch_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.register_buffer("pos_embed", torch.from_numpy(
            get_2d_sincos_pos_embed(embed_dim, grid, cls_token=True)).float().unsqueeze(0))
        self.blocks = nn.ModuleList(ViTBlock(embed_dim, num_heads) for _ in range(depth))
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim, bias=True)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        self.register_buffer("decoder_pos_embed", torch.from_numpy(
            get_2d_sincos_pos_embed(decoder_embed_dim, grid, cls_token=True)).float().unsqueeze(0))
        self.decoder_blocks = nn.ModuleList(ViTBlock(decoder_embed_dim, decoder_num_heads)
                                            for _ in range(decoder_depth))
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim, eps=1e-6)
        self.decoder_pred = nn.Linear(decoder_embed_dim, patch_size ** 2 * in_chans, bias=True)
        for block in (*self.blocks, *self.decoder_blocks):  # mae's norm_layer: LayerNorm(eps=1e-6)
            block.norm1.eps = block.norm2.eps = 1e-6
        nn.init.xavier_uniform_(self.patch_embed.proj.weight.data.view([embed_dim, -1]))
        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.mask_token, std=0.02)
        self.apply(self._init_weights)
        self.units = ["patch_embed", *(f"blocks.{i}" for i in range(depth)), "norm", "decoder_embed",
                      *(f"decoder_blocks.{i}" for i in range(decoder_depth)), "decoder_norm", "decoder_pred"]
        self.loose = ("cls_token", "mask_token")
        self.hidden = [f"blocks.{i}" for i in range(depth)]
        # The patch conv and the decoder's input feed residual streams whose blocks are normalised
        # only inside their branches; the prediction feeds the loss directly.
        self.exposed = ["patch_embed.proj", "decoder_embed", "decoder_pred"]

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def patchify(self, imgs: torch.Tensor) -> torch.Tensor:
        return patchify(imgs, self.patch_size)

    def random_masking(self, x: torch.Tensor, mask_ratio: float):
        """mae's per-sample random masking by argsort of uniform noise; (kept tokens, mask 1 where
        removed, ids_restore)."""
        n, length, dim = x.shape
        len_keep = int(length * (1 - mask_ratio))
        noise = torch.rand(n, length, device=x.device)
        ids_shuffle = torch.argsort(noise, dim=1)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :len_keep]
        x_masked = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, dim))
        mask = torch.ones([n, length], device=x.device)
        mask[:, :len_keep] = 0
        mask = torch.gather(mask, dim=1, index=ids_restore)
        return x_masked, mask, ids_restore

    def forward_encoder(self, x: torch.Tensor, mask_ratio: float):
        x = self.patch_embed(x)
        x = x + self.pos_embed[:, 1:, :]
        x, mask, ids_restore = self.random_masking(x, mask_ratio)
        cls_token = self.cls_token + self.pos_embed[:, :1, :]
        x = torch.cat((cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x), mask, ids_restore

    def forward_decoder(self, x: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
        x = self.decoder_embed(x)
        mask_tokens = self.mask_token.repeat(x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        x = torch.cat([x[:, :1, :], x_], dim=1)
        x = x + self.decoder_pos_embed
        for blk in self.decoder_blocks:
            x = blk(x)
        x = self.decoder_pred(self.decoder_norm(x))
        return x[:, 1:, :]

    def forward_loss(self, imgs: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        target = self.patchify(imgs)
        if self.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.0e-6) ** 0.5
        loss = (pred - target) ** 2
        loss = loss.mean(dim=-1)
        return (loss * mask).sum() / mask.sum()

    def forward(self, imgs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        latent, mask, ids_restore = self.forward_encoder(imgs, self.mask_ratio)
        pred = self.forward_decoder(latent, ids_restore)
        return self.forward_loss(imgs, pred, mask), pred, mask


def mae_loss(output: tuple[torch.Tensor, torch.Tensor, torch.Tensor], labels: torch.Tensor) -> torch.Tensor:
    """mae's `train_one_epoch`: `loss, _, _ = model(samples, mask_ratio=...)`, the labels unread."""
    return output[0]


WKV_MIN_VALUE = -1e38
"""The running maximum's start in RWKV-v4's CUDA kernel (`MIN_VALUE`)."""


def wkv(time_decay: torch.Tensor, time_first: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """RWKV-v4's WKV over (B, T, C) keys and values, one Python step per token as its CUDA kernel's
    `kernel_forward` loops (autograd does the backward): with w = −exp(time_decay) and
    u = time_first, y_t = (Σ_{i<t} e^{(t−1−i)w + k_i} v_i + e^{u + k_t} v_t) / (the same with v = 1),
    the running sums a, b kept divided by e^p, p their running maximum exponent (no overflow).
    In float32 whatever the inputs' dtype, as the kernel's wrapper casts them; the output in the
    inputs' dtype."""
    dtype = k.dtype
    w, u, k, v = -torch.exp(time_decay.float()), time_first.float(), k.float(), v.float()
    aa = torch.zeros_like(k[:, 0])
    bb = torch.zeros_like(k[:, 0])
    pp = torch.full_like(k[:, 0], WKV_MIN_VALUE)
    ys = []
    for t in range(k.shape[1]):
        kk, vv = k[:, t], v[:, t]
        ww = u + kk
        p = torch.maximum(pp, ww)
        e1, e2 = torch.exp(pp - p), torch.exp(ww - p)
        ys.append((e1 * aa + e2 * vv) / (e1 * bb + e2))
        ww = w + pp
        p = torch.maximum(ww, kk)
        e1, e2 = torch.exp(ww - p), torch.exp(kk - p)
        aa, bb, pp = e1 * aa + e2 * vv, e1 * bb + e2, p
    return torch.stack(ys, dim=1).to(dtype)


def _rwkv_channel_ramp(dim: int) -> torch.Tensor:
    """RWKV's `ddd`: i / dim for channel i, shaped (1, 1, dim)."""
    return (torch.arange(dim, dtype=torch.float32) / dim).view(1, 1, dim)


class RWKVTimeMix(nn.Module):
    """RWKV-v4's `RWKV_TimeMix`: x mixed with the previous token's x (`time_shift`, a ZeroPad2d
    that moves the sequence one step down) by `time_mix_k/v/r`, then key, value and receptance
    (no biases), sigmoid(r) · WKV(k, v), `output`; its "fancy init" of `time_decay`
    (−5 + 8 (h / (C − 1))^(0.7 + 1.3 · layer / (layers − 1))), `time_first` (ln 0.3 and a ±0.5
    zigzag) and the mixes (the channel ramp to the power 1 − layer / layers)."""

    def __init__(self, dim: int, layer_id: int, layers: int) -> None:
        super().__init__()
        ratio_0_to_1 = layer_id / (layers - 1)
        ratio_1_to_almost0 = 1.0 - layer_id / layers
        ddd = _rwkv_channel_ramp(dim)
        decay_speed = torch.tensor([-5 + 8 * (h / (dim - 1)) ** (0.7 + 1.3 * ratio_0_to_1) for h in range(dim)])
        self.time_decay = nn.Parameter(decay_speed)
        zigzag = torch.tensor([(i + 1) % 3 - 1 for i in range(dim)]) * 0.5
        self.time_first = nn.Parameter(torch.ones(dim) * math.log(0.3) + zigzag)
        self.time_mix_k = nn.Parameter(torch.pow(ddd, ratio_1_to_almost0))
        self.time_mix_v = nn.Parameter(torch.pow(ddd, ratio_1_to_almost0) + 0.3 * ratio_0_to_1)
        self.time_mix_r = nn.Parameter(torch.pow(ddd, 0.5 * ratio_1_to_almost0))
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim, bias=False)
        self.receptance = nn.Linear(dim, dim, bias=False)
        self.output = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xx = self.time_shift(x)
        xk = x * self.time_mix_k + xx * (1 - self.time_mix_k)
        xv = x * self.time_mix_v + xx * (1 - self.time_mix_v)
        xr = x * self.time_mix_r + xx * (1 - self.time_mix_r)
        k, v, sr = self.key(xk), self.value(xv), torch.sigmoid(self.receptance(xr))
        return self.output(sr * wkv(self.time_decay, self.time_first, k, v))


class RWKVChannelMix(nn.Module):
    """RWKV-v4's `RWKV_ChannelMix`: time-shifted mixes for key and receptance, relu(key)² through
    `value` (4× wide), gated by sigmoid(receptance)."""

    def __init__(self, dim: int, layer_id: int, layers: int) -> None:
        super().__init__()
        ratio_1_to_almost0 = 1.0 - layer_id / layers
        ddd = _rwkv_channel_ramp(dim)
        self.time_mix_k = nn.Parameter(torch.pow(ddd, ratio_1_to_almost0))
        self.time_mix_r = nn.Parameter(torch.pow(ddd, ratio_1_to_almost0))
        self.time_shift = nn.ZeroPad2d((0, 0, 1, -1))
        self.key = nn.Linear(dim, 4 * dim, bias=False)
        self.receptance = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xx = self.time_shift(x)
        xk = x * self.time_mix_k + xx * (1 - self.time_mix_k)
        xr = x * self.time_mix_r + xx * (1 - self.time_mix_r)
        k = torch.square(torch.relu(self.key(xk)))
        return torch.sigmoid(self.receptance(xr)) * self.value(k)


class RWKVBlock(nn.Module):
    """RWKV-v4's `Block`: `ln0` on the embedding in the first block only, then x + att(ln1 x) and
    x + ffn(ln2 x)."""

    def __init__(self, dim: int, layer_id: int, layers: int) -> None:
        super().__init__()
        self.layer_id = layer_id
        if layer_id == 0:
            self.ln0 = nn.LayerNorm(dim)
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.att = RWKVTimeMix(dim, layer_id, layers)
        self.ffn = RWKVChannelMix(dim, layer_id, layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.layer_id == 0:
            x = self.ln0(x)
        x = x + self.att(self.ln1(x))
        return x + self.ffn(self.ln2(x))


RWKV_LR = 3e-3
"""The RWKV LM's `lr_init` (its Adam's peak lr, and the bound of its embedding's uniform init):
v4neo's 6e-4 is for 12 layers of 768 (8e-4 in its L6-D512 example), trained for 20 × 1000 steps
where a run here has 150."""
RWKV_ZERO_INIT = (".att.key.", ".att.receptance.", ".att.output.", ".ffn.value.", ".ffn.receptance.")
"""The matrices RWKV-v4neo's `generate_init_weight` starts at zero."""


class RWKV(nn.Module):
    """BlinkDL/RWKV-LM's RWKV-v4 LM (v4neo's `RWKV` module: `emb`, `blocks`, `ln_out`, `head`
    without bias, untied), small: width 32 and 2 layers where its smallest takes 768 and 12, no
    `head_qk`, no dropout. Its `generate_init_weight`: LayerNorms and every `time_*` parameter
    as built; `emb` uniform in ±`lr_init`; the `RWKV_ZERO_INIT` matrices zero; `head` orthogonal
    with gain 0.5 · sqrt(vocab / width); every other matrix orthogonal with gain
    sqrt(rows / columns) where it has more rows than columns, else 1. `lr_scale`: v4neo's
    `layerwise_lr` groups (`my_lr_scale` 2 for `time_decay`, 3 for `time_first`, 1 for the rest),
    all without weight decay."""

    def __init__(self, vocab: int, dim: int = 32, layers: int = 2, lr_init: float = RWKV_LR) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.blocks = nn.Sequential(*(RWKVBlock(dim, i, layers) for i in range(layers)))
        self.ln_out = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "ln_" in name or ".ln" in name or "time_" in name:
                    continue
                if name == "emb.weight":
                    nn.init.uniform_(p, a=-lr_init, b=lr_init)
                elif any(key in f".{name}" for key in RWKV_ZERO_INIT):
                    nn.init.zeros_(p)
                else:
                    gain = math.sqrt(p.shape[0] / p.shape[1]) if p.shape[0] > p.shape[1] else 1.0
                    nn.init.orthogonal_(p, gain=gain * (0.5 if name == "head.weight" else 1.0))
        self.units = ["emb", *(f"blocks.{i}" for i in range(layers)), "ln_out", "head"]
        self.hidden = [f"blocks.{i}" for i in range(layers)]
        # The head feeds the loss; the last channel mix's value writes the residual stream ln_out reads.
        self.exposed = ["head", f"blocks.{layers - 1}.ffn.value"]
        self.lr_scale = {"time_decay": 2.0, "time_first": 3.0}

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_out(self.blocks(self.emb(idx))))


class L2Wrap(torch.autograd.Function):
    """RWKV's `L2Wrap`: the loss passes unchanged; its backward also sends each position's largest
    logit a gradient of 1e-4 / (B · T) times that logit (pulling the logits towards 0)."""

    @staticmethod
    def forward(ctx, loss: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(y)
        return loss

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        (y,) = ctx.saved_tensors
        factor = 1e-4 / (y.shape[0] * y.shape[1])
        maxx, ids = torch.max(y, -1, keepdim=True)
        gy = torch.zeros_like(y)
        gy.scatter_(-1, ids, maxx * factor)
        return grad_output, gy


def rwkv_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """RWKV-v4neo's `training_step`: the next-token cross-entropy through `L2Wrap`."""
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, -2), targets.flatten())
    return L2Wrap.apply(loss, logits)


def sparsemax(z: torch.Tensor) -> torch.Tensor:
    """Martins & Astudillo's sparsemax over the last dimension, by sorting: the Euclidean projection
    of z onto the simplex. With z sorted in decreasing order and k the largest rank at which
    1 + k·z₍ₖ₎ > Σ_{j≤k} z₍ⱼ₎, the threshold is τ = (Σ_{j≤k} z₍ⱼ₎ − 1) / k and the output max(z − τ, 0).
    Shifted by the row's maximum first (the same output, smaller numbers). Autograd through the
    sort and the gather gives sparsemax's Jacobian (on the support, the identity less 1/k). A row
    with NaN has no rank that passes the test: its support is taken as 1, so the NaN reaches the
    output (pytorch-tabnet's sparsemax gathers at index −1 there and raises on the CPU)."""
    z = z - z.max(-1, keepdim=True).values
    ordered = z.sort(-1, descending=True).values
    ranks = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    cumulative = ordered.cumsum(-1)
    support = (1 + ranks * ordered > cumulative).sum(-1, keepdim=True).clamp(min=1)
    tau = (cumulative.gather(-1, support - 1) - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def _tabnet_glu_init(layer: nn.Linear, inputs: int, outputs: int) -> None:
    """pytorch-tabnet's `initialize_glu`: xavier-normal at gain √((in + out) / √in)."""
    nn.init.xavier_normal_(layer.weight, gain=math.sqrt((inputs + outputs) / math.sqrt(inputs)))


def _tabnet_non_glu_init(layer: nn.Linear, inputs: int, outputs: int) -> None:
    """pytorch-tabnet's `initialize_non_glu`: xavier-normal at gain √((in + out) / √(4·in))."""
    nn.init.xavier_normal_(layer.weight, gain=math.sqrt((inputs + outputs) / math.sqrt(4 * inputs)))


TABNET_VIRTUAL_BATCH = 32
"""Ghost batch norm's virtual batch: pytorch-tabnet's `virtual_batch_size` 128 at its batch 1024,
here 32 at batch 256 (the same 8 virtual batches a batch)."""
TABNET_LAMBDA_SPARSE = 1e-3
"""pytorch-tabnet's `lambda_sparse`: the weight of the masks' entropy in the loss."""


class GhostBatchNorm(nn.Module):
    """Hoffer et al.'s ghost batch norm as pytorch-tabnet's `GBN`: one `BatchNorm1d` applied to
    each virtual batch of the batch in turn (⌈B / virtual⌉ chunks, each normalised by its own
    statistics, the running statistics updated once a chunk)."""

    def __init__(self, features: int, virtual_batch_size: int, momentum: float) -> None:
        super().__init__()
        self.virtual_batch_size = virtual_batch_size
        self.bn = nn.BatchNorm1d(features, momentum=momentum)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        chunks = math.ceil(x.shape[0] / self.virtual_batch_size)
        return torch.cat([self.bn(part) for part in x.chunk(chunks, 0)], 0)


class TabNetGLULayer(nn.Module):
    """pytorch-tabnet's `GLU_Layer`: a bias-free Linear to twice the width (its own, or one shared
    by every step), ghost batch norm, then the gated linear unit a ⊙ σ(b)."""

    def __init__(self, inputs: int, outputs: int, fc: nn.Linear | None, virtual_batch_size: int,
                 momentum: float) -> None:
        super().__init__()
        self.outputs = outputs
        self.fc = fc if fc is not None else nn.Linear(inputs, 2 * outputs, bias=False)
        _tabnet_glu_init(self.fc, inputs, 2 * outputs)  # a shared layer re-drawn by each user, as there
        self.bn = GhostBatchNorm(2 * outputs, virtual_batch_size, momentum)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.fc(x))
        return x[:, : self.outputs] * torch.sigmoid(x[:, self.outputs:])


class TabNetGLUBlock(nn.Module):
    """pytorch-tabnet's `GLU_Block`: GLU layers with residual sums scaled by √0.5; in the `first`
    block the first layer (which changes the width) has no residual."""

    def __init__(self, inputs: int, outputs: int, layers: int, first: bool, shared: nn.ModuleList | None,
                 virtual_batch_size: int, momentum: float) -> None:
        super().__init__()
        self.first = first
        self.glu_layers = nn.ModuleList(
            TabNetGLULayer(inputs if i == 0 else outputs, outputs, shared[i] if shared is not None else None,
                           virtual_batch_size, momentum) for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = iter(self.glu_layers)
        if self.first:
            x = next(layers)(x)
        for layer in layers:
            x = (x + layer(x)) * math.sqrt(0.5)
        return x


class TabNetFeatTransformer(nn.Module):
    """pytorch-tabnet's `FeatTransformer`: the GLU block of the layers every step shares, then a
    GLU block of this step's own layers."""

    def __init__(self, inputs: int, outputs: int, shared: nn.ModuleList, independent: int, virtual_batch_size: int,
                 momentum: float) -> None:
        super().__init__()
        self.shared = TabNetGLUBlock(inputs, outputs, len(shared), True, shared, virtual_batch_size, momentum)
        self.specifics = TabNetGLUBlock(outputs, outputs, independent, False, None, virtual_batch_size, momentum)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.specifics(self.shared(x))


class TabNetAttentiveTransformer(nn.Module):
    """pytorch-tabnet's `AttentiveTransformer`: a bias-free Linear from the attention features to
    one score per feature, ghost batch norm, scaled by the prior, then `sparsemax`: the step's mask."""

    def __init__(self, inputs: int, features: int, virtual_batch_size: int, momentum: float) -> None:
        super().__init__()
        self.fc = nn.Linear(inputs, features, bias=False)
        _tabnet_non_glu_init(self.fc, inputs, features)
        self.bn = GhostBatchNorm(features, virtual_batch_size, momentum)

    def forward(self, prior: torch.Tensor, processed: torch.Tensor) -> torch.Tensor:
        return sparsemax(self.bn(self.fc(processed)) * prior)


class TabNetEmbedding(nn.Module):
    """pytorch-tabnet's `EmbeddingGenerator` on the zoo's table: each categorical column through
    its own `nn.Embedding` of `cat_emb_dim` (1: one learned number a category), after the numeric
    columns as they are."""

    def __init__(self, cardinalities: tuple[int, ...], dim: int) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(c, dim) for c in cardinalities)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        columns = [embedding(batch["x_cat"][:, i]) for i, embedding in enumerate(self.embeddings)]
        return torch.cat([batch["x_num"], *columns], 1)


class TabNet(nn.Module):
    """Arik & Pfister's TabNet as dreamquark-ai/tabnet's `tab_network.py` writes it (`TabNet`,
    `TabNetEncoder`, `TabNetNoEmbeddings`), at pytorch-tabnet's defaults: n_d = n_a = 8, 3 decision
    steps, γ 1.3, 2 shared and 2 step-specific GLU layers, cat_emb_dim 1, momentum 0.02 (0.01 for
    the initial batch norm), ε 1e-15. The embedded row goes through a `BatchNorm1d`; an initial
    `FeatTransformer` splits off the first attention features; each step's
    `AttentiveTransformer` draws a sparse mask M from them and the prior P (ones at first), P
    becomes (γ − M)·P, the step's `FeatTransformer` reads M ⊙ x and gives n_d decision features
    (ReLU'd, summed over the steps) and the next step's n_a attention features; a bias-free Linear
    maps the sum to the classes. No feature groups (the group matrix is the identity).
    `forward(batch)` gives (logits, M_loss), M_loss the masks' mean of Σ M·log(M + ε) over the
    steps (the negative entropy; `tabnet_loss` subtracts λ·M_loss). The shared layers are held by
    every step's `FeatTransformer`, as there (no module of their own): their parameters go to the
    first unit that holds them, `initial_splitter`."""

    def __init__(self, numeric: int, cardinalities: tuple[int, ...], classes: int, n_d: int = 8, n_a: int = 8,
                 n_steps: int = 3, gamma: float = 1.3, n_independent: int = 2, n_shared: int = 2,
                 cat_emb_dim: int = 1, virtual_batch_size: int = TABNET_VIRTUAL_BATCH, momentum: float = 0.02,
                 epsilon: float = 1e-15) -> None:
        super().__init__()
        self.n_d, self.n_steps, self.gamma, self.epsilon = n_d, n_steps, gamma, epsilon
        features = numeric + cat_emb_dim * len(cardinalities)
        self.embedder = TabNetEmbedding(cardinalities, cat_emb_dim)
        self.initial_bn = nn.BatchNorm1d(features, momentum=0.01)
        shared = nn.ModuleList(nn.Linear(features if i == 0 else n_d + n_a, 2 * (n_d + n_a), bias=False)
                               for i in range(n_shared))
        args = (virtual_batch_size, momentum)
        self.initial_splitter = TabNetFeatTransformer(features, n_d + n_a, shared, n_independent, *args)
        self.feat_transformers = nn.ModuleList(
            TabNetFeatTransformer(features, n_d + n_a, shared, n_independent, *args) for _ in range(n_steps))
        self.att_transformers = nn.ModuleList(
            TabNetAttentiveTransformer(n_a, features, *args) for _ in range(n_steps))
        self.final_mapping = nn.Linear(n_d, classes, bias=False)
        _tabnet_non_glu_init(self.final_mapping, n_d, classes)
        steps = [unit for i in range(n_steps) for unit in (f"att_transformers.{i}", f"feat_transformers.{i}")]
        self.units = ["embedder", "initial_bn", "initial_splitter", *steps, "final_mapping"]
        self.hidden = ["initial_splitter", *steps]  # detached last: the last step's feature transformer
        # Every Linear but the last feeds a ghost batch norm; the embeddings feed the initial one.
        self.exposed = ["final_mapping"]

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.initial_bn(self.embedder(batch))
        prior = torch.ones_like(x)
        attention = self.initial_splitter(x)[:, self.n_d:]
        decision, m_loss = 0, 0
        for attentive, transformer in zip(self.att_transformers, self.feat_transformers):
            mask = attentive(prior, attention)
            m_loss = m_loss + torch.mean(torch.sum(mask * torch.log(mask + self.epsilon), dim=1))
            prior = (self.gamma - mask) * prior
            out = transformer(mask * x)
            decision = decision + torch.relu(out[:, : self.n_d])
            attention = out[:, self.n_d:]
        return self.final_mapping(decision), m_loss / self.n_steps


def tabnet_loss(output: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """pytorch-tabnet's `_train_batch`: the cross-entropy less `lambda_sparse` × M_loss (plus λ × the
    masks' mean entropy)."""
    logits, m_loss = output
    return torch.nn.functional.cross_entropy(logits, targets) - TABNET_LAMBDA_SPARSE * m_loss


PERCEIVER_FREQ_BANDS = 4
"""The Perceiver's `num_freq_bands` K per input axis (lucidrains' README 6, its train_cifar10 6 for
32 × 32 images; 4 here for 8 × 8)."""
PERCEIVER_MAX_FREQ = 8.0
"""The Perceiver's `max_freq`: the highest band's scale is max_freq / 2 = 4 cycles over [−1, 1],
just past the 8-pixel axis's Nyquist 3.5 (the paper's μ / 2 at the input's resolution μ)."""


def perceiver_fourier_encode(x: torch.Tensor, max_freq: float, num_bands: int) -> torch.Tensor:
    """lucidrains' `fourier_encode`: each position x in [−1, 1] (the trailing axis gains a
    dimension) → [sin(π f_i x)]_i, [cos(π f_i x)]_i, x, the scales f_i evenly spaced from 1 to
    max_freq / 2 (`torch.linspace`), in x's dtype: 2·num_bands + 1 features."""
    x = x.unsqueeze(-1)
    scales = torch.linspace(1.0, max_freq / 2, num_bands, device=x.device, dtype=x.dtype)
    angles = x * scales * math.pi
    return torch.cat([angles.sin(), angles.cos(), x], dim=-1)


class PerceiverPreNorm(nn.Module):
    """lucidrains' `PreNorm`: LayerNorm of x (and, in a cross-attention, its own LayerNorm of the
    context) before `fn`."""

    def __init__(self, dim: int, fn: nn.Module, context_dim: int | None = None) -> None:
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if context_dim is not None else None

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm(x)
        if self.norm_context is not None:
            return self.fn(x, context=self.norm_context(context))
        return self.fn(x)


class GEGLU(nn.Module):
    """Shazeer's GEGLU as lucidrains writes it: the last axis halved into x and gates, x · gelu(gates)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, gates = x.chunk(2, dim=-1)
        return x * torch.nn.functional.gelu(gates)


class PerceiverFeedForward(nn.Module):
    """lucidrains' `FeedForward`: Linear(dim, dim·mult·2) → GEGLU → Linear(dim·mult, dim) → dropout."""

    def __init__(self, dim: int, mult: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult * 2), GEGLU(), nn.Linear(dim * mult, dim),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class PerceiverAttention(nn.Module):
    """lucidrains' `Attention`: queries from x (`to_q`, no bias), keys and values from the context
    (x itself in self-attention; `to_kv`, no bias, chunked in two), `heads` heads of `dim_head`,
    softmax(q kᵀ / sqrt(dim_head)) over the context, dropout on the weights, `to_out` (with bias).
    The last weights are kept in `last_attention` ((B·heads, queries, context))."""

    def __init__(self, query_dim: int, context_dim: int | None = None, heads: int = 8, dim_head: int = 64,
                 dropout: float = 0.0) -> None:
        super().__init__()
        inner = heads * dim_head
        context_dim = query_dim if context_dim is None else context_dim
        self.scale = dim_head ** -0.5
        self.heads = heads
        self.to_q = nn.Linear(query_dim, inner, bias=False)
        self.to_kv = nn.Linear(context_dim, inner * 2, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.to_out = nn.Linear(inner, query_dim)
        self.last_attention: torch.Tensor | None = None

    def _split(self, t: torch.Tensor) -> torch.Tensor:  # 'b n (h d) -> (b h) n d'
        b, n, _ = t.shape
        return t.view(b, n, self.heads, -1).transpose(1, 2).reshape(b * self.heads, n, -1)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        context = x if context is None else context
        q = self._split(self.to_q(x))
        k, v = (self._split(t) for t in self.to_kv(context).chunk(2, dim=-1))
        attention = (torch.einsum("bid,bjd->bij", q, k) * self.scale).softmax(dim=-1)
        self.last_attention = attention.detach()
        out = torch.einsum("bij,bjd->bid", self.dropout(attention), v)
        b = x.shape[0]
        out = out.view(b, self.heads, x.shape[1], -1).transpose(1, 2).reshape(b, x.shape[1], -1)
        return self.to_out(out)


class PerceiverLatentBlock(nn.Module):
    """One latent self-attention block of lucidrains' Perceiver: x + attn(norm x), then x + ff(norm x)."""

    def __init__(self, dim: int, heads: int, dim_head: int, attn_dropout: float, ff_dropout: float) -> None:
        super().__init__()
        self.attn = PerceiverPreNorm(dim, PerceiverAttention(dim, heads=heads, dim_head=dim_head, dropout=attn_dropout))
        self.ff = PerceiverPreNorm(dim, PerceiverFeedForward(dim, dropout=ff_dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attn(x) + x
        return self.ff(x) + x


class PerceiverLayer(nn.Module):
    """One of lucidrains' `layers` entries: the latents cross-attend to the (encoded) input array
    (`cross_attn`: PreNorm with the context's LayerNorm), `cross_ff`, then `self_per_cross_attn`
    latent self-attention blocks; each a residual branch."""

    def __init__(self, dim: int, input_dim: int, cross_heads: int, cross_dim_head: int, latent_heads: int,
                 latent_dim_head: int, self_per_cross_attn: int, attn_dropout: float, ff_dropout: float) -> None:
        super().__init__()
        self.cross_attn = PerceiverPreNorm(dim, PerceiverAttention(dim, input_dim, heads=cross_heads,
                                                                   dim_head=cross_dim_head, dropout=attn_dropout),
                                           context_dim=input_dim)
        self.cross_ff = PerceiverPreNorm(dim, PerceiverFeedForward(dim, dropout=ff_dropout))
        self.self_attns = nn.ModuleList(PerceiverLatentBlock(dim, latent_heads, latent_dim_head, attn_dropout,
                                                             ff_dropout) for _ in range(self_per_cross_attn))

    def forward(self, x: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        x = self.cross_attn(x, context=data) + x
        x = self.cross_ff(x) + x
        for block in self.self_attns:
            x = block(x)
        return x


class PerceiverLatents(nn.Module):
    """The learned latent array (`num_latents` × `latent_dim`, N(0, 1) as lucidrains' `torch.randn`),
    repeated over the batch; a module of its own so that it is a unit."""

    def __init__(self, num_latents: int, dim: int) -> None:
        super().__init__()
        self.latents = nn.Parameter(torch.randn(num_latents, dim))

    def forward(self, batch: int) -> torch.Tensor:
        return self.latents.unsqueeze(0).expand(batch, -1, -1)


class MeanOverLatents(nn.Module):
    """einops' `Reduce('b n d -> b d', 'mean')`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=1)


class Perceiver(nn.Module):
    """lucidrains/perceiver-pytorch's `Perceiver` (Jaegle et al.), small: the input array (B, H, W,
    C) gets each pixel's 2-D position in [−1, 1]² Fourier-encoded (`perceiver_fourier_encode` per
    axis, `PERCEIVER_FREQ_BANDS` bands up to `PERCEIVER_MAX_FREQ`) concatenated to its channels and
    is flattened to H·W input tokens; the learned latents (`PerceiverLatents`) pass `depth`
    `PerceiverLayer`s (cross-attention to the input array, its feed-forward, `self_per_cross_attn`
    latent self-attention blocks); `to_logits` is the mean over the latents → LayerNorm → Linear.
    Weight tying off, no mask, no inverted attention; PyTorch's default init as there. Its forward
    takes (B, C, H, W) images and moves the channels last as train_cifar10.py's loop does
    (`rearrange(inputs, 'b c h w -> b h w c')`). Widths: latent_dim 32, 16 latents, depth 2, 1
    cross head of 64 as there, 4 latent heads of 16 (its inner width 2 × latent_dim, as there), 2
    self-attention blocks per cross-attention (its train_cifar10: 128, 128, 3, 1 × 64, 4 × 64, 2),
    dropout 0.1 on the attention weights and the feed-forwards as there (a cross head of 16: at
    lr 3e-3 seeds 1 and 2 still at chance after 150 steps, 2.26 and 2.19). No weight decay exemptions (`decay_everything`: its
    `AdamW(model.parameters(), weight_decay=...)`)."""

    def __init__(self, num_classes: int = 10, input_channels: int = 1, input_axis: int = 2,
                 num_freq_bands: int = PERCEIVER_FREQ_BANDS, max_freq: float = PERCEIVER_MAX_FREQ, depth: int = 2,
                 num_latents: int = 16, latent_dim: int = 32, cross_heads: int = 1, latent_heads: int = 4,
                 cross_dim_head: int = 64, latent_dim_head: int = 16, attn_dropout: float = 0.1,
                 ff_dropout: float = 0.1, self_per_cross_attn: int = 2) -> None:
        super().__init__()
        self.input_axis, self.max_freq, self.num_freq_bands = input_axis, max_freq, num_freq_bands
        input_dim = input_axis * (2 * num_freq_bands + 1) + input_channels
        self.latents = PerceiverLatents(num_latents, latent_dim)
        self.layers = nn.ModuleList(
            PerceiverLayer(latent_dim, input_dim, cross_heads, cross_dim_head, latent_heads, latent_dim_head,
                           self_per_cross_attn, attn_dropout, ff_dropout) for _ in range(depth))
        self.to_logits = nn.Sequential(MeanOverLatents(), nn.LayerNorm(latent_dim), nn.Linear(latent_dim, num_classes))
        self.units = ["latents", *(f"layers.{i}" for i in range(depth)), "to_logits"]
        self.hidden = [f"layers.{i}" for i in range(depth)]
        # The head feeds the loss; the last feed-forward's output Linear writes the residual stream
        # the pooled LayerNorm reads (every other Linear is read behind a PreNorm).
        self.exposed = ["to_logits.2", f"layers.{depth - 1}.self_attns.{self_per_cross_attn - 1}.ff.fn.net.2"]
        self.decay_everything = True

    def encode_positions(self, axis: tuple[int, ...], device, dtype) -> torch.Tensor:
        """lucidrains' positions: `torch.linspace(−1, 1)` per axis, meshgrid (ij), each axis's
        Fourier features side by side: (*axis, input_axis·(2K + 1))."""
        axis_pos = [torch.linspace(-1.0, 1.0, size, device=device, dtype=dtype) for size in axis]
        pos = torch.stack(torch.meshgrid(*axis_pos, indexing="ij"), dim=-1)
        encoded = perceiver_fourier_encode(pos, self.max_freq, self.num_freq_bands)
        return encoded.flatten(-2)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        data = images.movedim(1, -1)  # b c h w -> b h w c
        b, *axis, _ = data.shape
        enc_pos = self.encode_positions(tuple(axis), data.device, data.dtype).expand(b, *axis, -1)
        data = torch.cat((data, enc_pos), dim=-1).flatten(1, -2)  # b (h w) d
        x = self.latents(b)
        for layer in self.layers:
            x = layer(x, data)
        return self.to_logits(x)


def gated_activation(filter_out: torch.Tensor, gate_out: torch.Tensor) -> torch.Tensor:
    """WaveNet's gated activation unit (van den Oord et al., eq. 2): tanh(W_f * x) ⊙ σ(W_g * x)."""
    return torch.tanh(filter_out) * torch.sigmoid(gate_out)


class WaveNetBlock(nn.Module):
    """One residual layer of pytorch-wavenet's `WaveNetModel.wavenet` loop: a dilated causal conv
    of kernel 2 for the filter and another for the gate (no padding: the output is `dilation`
    samples shorter, each output reading its own sample and the one `dilation` before it), the
    gated activation, a 1×1 skip conv added to the running sum of the skips (cut to the newest
    samples), a 1×1 residual conv added to the input's newest samples. `forward(x, skip)` returns
    (residual output, skip sum): the loop's `x` and `skip`."""

    def __init__(self, residual_channels: int, dilation_channels: int, skip_channels: int, dilation: int) -> None:
        super().__init__()
        self.dilation = dilation
        self.filter_conv = nn.Conv1d(residual_channels, dilation_channels, kernel_size=2, dilation=dilation)
        self.gate_conv = nn.Conv1d(residual_channels, dilation_channels, kernel_size=2, dilation=dilation)
        self.residual_conv = nn.Conv1d(dilation_channels, residual_channels, kernel_size=1)
        self.skip_conv = nn.Conv1d(dilation_channels, skip_channels, kernel_size=1)

    def forward(self, x: torch.Tensor, skip: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        gated = gated_activation(self.filter_conv(x), self.gate_conv(x))
        s = self.skip_conv(gated)
        skip = s if skip is None else skip[:, :, -s.shape[2]:] + s
        return self.residual_conv(gated) + x[:, :, self.dilation:], skip


class WaveNet(nn.Module):
    """WaveNet over one-hot mu-law audio (B, classes, T), as pytorch-wavenet's `WaveNetModel`
    (separate filter and gate convs, the running skip sum, `end_conv_1` / `end_conv_2`, biases on:
    its train script's `bias=True`; PyTorch's default inits) with golbin/WaveNet's causal input
    conv of kernel 2 in place of the 1×1 `start_conv`; small: 32 residual and dilation channels,
    64 skip and end channels, 2 stacks of 5 layers (dilations 1 … 16) where its train script takes
    32/32/1024/512 and 3 × 10. Every conv is unpadded, so an output sees exactly
    `receptive_field` = 2 + stacks · (2^layers − 1) samples, its own the newest: the logits
    (B, outputs, classes) of the last `outputs` positions (pytorch-wavenet's `output_length`) are
    those of a window of receptive_field + outputs − 1 samples, each predicting the sample after it."""

    def __init__(self, classes: int = WAVEFORMS.classes, residual_channels: int = 32, dilation_channels: int = 32,
                 skip_channels: int = 64, end_channels: int = 64, layers: int = 5, stacks: int = 2,
                 outputs: int = WAVEFORMS.outputs) -> None:
        super().__init__()
        self.outputs = outputs
        self.dilations = [2 ** i for _ in range(stacks) for i in range(layers)]
        self.receptive_field = 2 + sum(self.dilations)
        self.causal = nn.Conv1d(classes, residual_channels, kernel_size=2)
        self.blocks = nn.ModuleList(WaveNetBlock(residual_channels, dilation_channels, skip_channels, d)
                                    for d in self.dilations)
        self.end_conv_1 = nn.Conv1d(skip_channels, end_channels, kernel_size=1)
        self.end_conv_2 = nn.Conv1d(end_channels, classes, kernel_size=1)
        self.units = ["causal", *(f"blocks.{i}" for i in range(len(self.blocks))), "end_conv_1", "end_conv_2"]
        self.hidden = [f"blocks.{i}" for i in range(len(self.blocks))]
        # No normalisation anywhere: the input conv (its output is the residual stream every block
        # adds to) and the two end convs (the logits).
        self.exposed = ["causal", "end_conv_1", "end_conv_2"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, skip = self.causal(x), None
        for block in self.blocks:
            h, skip = block(h, skip)
        out = self.end_conv_2(torch.relu(self.end_conv_1(torch.relu(skip))))
        return out[:, :, -self.outputs:].transpose(1, 2)


class MAB(nn.Module):
    """juho-lee/set_transformer's multihead attention block MAB(Q, K): fc_q on the queries, fc_k and
    fc_v on the keys' set, the heads split by cutting the last axis into `num_heads` pieces of
    dim_V / num_heads stacked along the batch (`torch.cat(X.split(dim_split, 2), 0)`), per head
    A = softmax(Q_ K_ᵀ / sqrt(dim_V)) (the whole width's sqrt, as there, not the head's), O = Q_ +
    A V_ with the heads put back side by side, an optional LayerNorm `ln0`, O + relu(fc_o(O)), an
    optional LayerNorm `ln1`. The last weights are kept in `last_attention` ((heads·B, queries, keys))."""

    def __init__(self, dim_q: int, dim_k: int, dim_v: int, num_heads: int, ln: bool = False) -> None:
        super().__init__()
        self.dim_v, self.num_heads = dim_v, num_heads
        self.fc_q = nn.Linear(dim_q, dim_v)
        self.fc_k = nn.Linear(dim_k, dim_v)
        self.fc_v = nn.Linear(dim_k, dim_v)
        self.ln0 = nn.LayerNorm(dim_v) if ln else None
        self.ln1 = nn.LayerNorm(dim_v) if ln else None
        self.fc_o = nn.Linear(dim_v, dim_v)
        self.last_attention: torch.Tensor | None = None

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, n, dim_V) → (heads·B, n, dim_V / heads): head h's batch rows h·B … (h + 1)·B − 1."""
        return torch.cat(x.split(self.dim_v // self.num_heads, dim=2), dim=0)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = self.fc_q(queries)
        q_, k_, v_ = self.heads(q), self.heads(self.fc_k(keys)), self.heads(self.fc_v(keys))
        attention = torch.softmax(q_ @ k_.transpose(1, 2) / math.sqrt(self.dim_v), dim=2)
        self.last_attention = attention.detach()
        out = torch.cat((q_ + attention @ v_).split(q.size(0), dim=0), dim=2)
        if self.ln0 is not None:
            out = self.ln0(out)
        out = out + torch.relu(self.fc_o(out))
        if self.ln1 is not None:
            out = self.ln1(out)
        return out


class SAB(nn.Module):
    """Set attention block: MAB(X, X), permutation-equivariant."""

    def __init__(self, dim_in: int, dim_out: int, num_heads: int, ln: bool = False) -> None:
        super().__init__()
        self.mab = MAB(dim_in, dim_in, dim_out, num_heads, ln=ln)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mab(x, x)


class ISAB(nn.Module):
    """Induced set attention block: `num_inds` learned inducing points I (1, m, dim_out), Xavier-
    uniform as there, attend to the set (H = MAB(I, X)), then the set attends to them (MAB(X, H)):
    permutation-equivariant at O(n·m)."""

    def __init__(self, dim_in: int, dim_out: int, num_heads: int, num_inds: int, ln: bool = False) -> None:
        super().__init__()
        self.I = nn.Parameter(torch.empty(1, num_inds, dim_out))
        nn.init.xavier_uniform_(self.I)
        self.mab0 = MAB(dim_out, dim_in, dim_out, num_heads, ln=ln)
        self.mab1 = MAB(dim_in, dim_out, dim_out, num_heads, ln=ln)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mab0(self.I.expand(x.size(0), -1, -1), x)
        return self.mab1(x, h)


class PMA(nn.Module):
    """Pooling by multihead attention: `num_seeds` learned seed vectors S (1, k, dim), Xavier-uniform
    as there, attend to the set: MAB(S, X), (B, k, dim) whatever the set's size, permutation-invariant."""

    def __init__(self, dim: int, num_heads: int, num_seeds: int, ln: bool = False) -> None:
        super().__init__()
        self.S = nn.Parameter(torch.empty(1, num_seeds, dim))
        nn.init.xavier_uniform_(self.S)
        self.mab = MAB(dim, dim, dim, num_heads, ln=ln)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mab(self.S.expand(x.size(0), -1, -1), x)


class SetTransformer(nn.Module):
    """juho-lee/set_transformer's models.py `SetTransformer`: `enc` = ISAB(dim_input → dim_hidden),
    ISAB(dim_hidden → dim_hidden); `dec` = PMA(num_outputs seeds), SAB, SAB, Linear(dim_hidden →
    dim_output); ln off (its default, and run.py's); PyTorch's default inits beside the Xavier
    inducing points and seeds. Small: dim_hidden 64 and 16 inducing points where it takes 128 and
    32, its 4 heads (16 wide here). Its forward takes sets (B, n, dim_input) and, as the
    max_regression_demo's `SmallSetTransformer` does, squeezes the last axis: (B, num_outputs) for
    one output each."""

    def __init__(self, dim_input: int = 1, num_outputs: int = 1, dim_output: int = 1, num_inds: int = 16,
                 dim_hidden: int = 64, num_heads: int = 4, ln: bool = False) -> None:
        super().__init__()
        self.enc = nn.Sequential(ISAB(dim_input, dim_hidden, num_heads, num_inds, ln=ln),
                                 ISAB(dim_hidden, dim_hidden, num_heads, num_inds, ln=ln))
        self.dec = nn.Sequential(PMA(dim_hidden, num_heads, num_outputs, ln=ln),
                                 SAB(dim_hidden, dim_hidden, num_heads, ln=ln),
                                 SAB(dim_hidden, dim_hidden, num_heads, ln=ln),
                                 nn.Linear(dim_hidden, dim_output))
        self.units = ["enc.0", "enc.1", "dec.0", "dec.1", "dec.2", "dec.3"]
        self.hidden = ["enc.0", "enc.1", "dec.0", "dec.1", "dec.2"]
        # No normalisation anywhere (ln off): the head, and the last block's fc_o, whose ReLU'd
        # output is added to the stream the head reads.
        self.exposed = ["dec.3", "dec.2.mab.fc_o"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x)).squeeze(-1)


class GraphAttentionLayer(nn.Module):
    """pyGAT's dense `GraphAttentionLayer`: Wh = h W (`weight`, pyGAT's `W`, (in, out)); the
    attention logits e_ij = LeakyReLU(aᵀ [Wh_i ‖ Wh_j]) (negative slope `alpha`), computed as
    Wh a[:out] + (Wh a[out:])ᵀ; entries off the adjacency replaced by −9e15, a softmax over each
    row's neighbours, dropout on the coefficients, h' = attention · Wh, ELU'd when `concat` (the
    hidden heads), as it is otherwise (the output layer). `weight` and `a` ((2·out, 1)) are
    Xavier-uniform with gain 1.414, as there. The last coefficients are kept in `last_attention`."""

    def __init__(self, in_features: int, out_features: int, dropout: float, alpha: float,
                 concat: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.dropout, self.alpha, self.concat = dropout, alpha, concat
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.a = nn.Parameter(torch.empty(2 * out_features, 1))
        nn.init.xavier_uniform_(self.weight, gain=1.414)
        nn.init.xavier_uniform_(self.a, gain=1.414)
        self.last_attention: torch.Tensor | None = None

    def logits(self, wh: torch.Tensor) -> torch.Tensor:
        """e (N, N): e_ij = LeakyReLU(a_1ᵀ Wh_i + a_2ᵀ Wh_j), before the mask."""
        source = wh @ self.a[: self.out_features]
        neighbour = wh @ self.a[self.out_features:]
        return torch.nn.functional.leaky_relu(source + neighbour.T, self.alpha)

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        wh = h @ self.weight
        e = self.logits(wh)
        attention = torch.where(adj > 0, e, torch.full_like(e, -9e15))
        attention = torch.softmax(attention, dim=1)
        self.last_attention = attention.detach()
        attention = torch.nn.functional.dropout(attention, self.dropout, self.training)
        out = attention @ wh
        return torch.nn.functional.elu(out) if self.concat else out


class GATHeads(nn.Module):
    """The hidden layer's `heads` attention layers (pyGAT's `attention_0` … side by side, each
    `concat`: ELU'd), run on the same input and concatenated along the features (N, heads·out).
    One module so that the layer is one unit: pyGAT's GAT concatenates them in its forward."""

    def __init__(self, in_features: int, out_features: int, heads: int, dropout: float, alpha: float) -> None:
        super().__init__()
        for i in range(heads):
            self.add_module(f"attention_{i}", GraphAttentionLayer(in_features, out_features, dropout, alpha, concat=True))

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return torch.cat([head(h, adj) for head in self.children()], dim=1)


def dense_adjacency(edge_index: torch.Tensor, nodes: int) -> torch.Tensor:
    """The (N, N) adjacency of `edge_index` (2, E: source, target) with self-loops, adj[i, j] = 1
    where j sends to i (pyGAT's `adj + I`, of which its layers read only adj > 0)."""
    adj = torch.eye(nodes, device=edge_index.device)
    adj[edge_index[1], edge_index[0]] = 1.0
    return adj


class GAT(nn.Module):
    """pyGAT's models.py `GAT`: dropout on the input features, `heads` hidden attention layers
    concatenated (`attentions`, each ELU'd), dropout, an output attention layer (`out_att`, one
    head, not concatenated) to the classes, ELU, log_softmax. Small: hidden 8 a head and 8 heads
    and alpha 0.2 (its defaults); dropout 0.3 where it takes 0.6: on the GCN's graph (16 Gaussian
    features, not Cora's row-normalised bag of words; 80 training nodes) and in 150 steps, 0.6 (and
    0.5) leaves the output layer's ELU saturated and the held-out loss at chance (1.30-1.37 against
    ln 4 = 1.39 at step 150, seeds 0-2), 0.3 learns (0.60-0.72). Its forward takes the zoo's graph
    dict {`x`, `edge_index`} and builds the dense adjacency pyGAT loads (self-loops in)."""

    def __init__(self, features: int, classes: int, hidden: int = 8, heads: int = 8, dropout: float = 0.3,
                 alpha: float = 0.2) -> None:
        super().__init__()
        self.dropout = dropout
        self.attentions = GATHeads(features, hidden, heads, dropout, alpha)
        self.out_att = GraphAttentionLayer(hidden * heads, classes, dropout, alpha, concat=False)
        self.units = ["attentions", "out_att"]
        self.hidden = ["attentions"]
        # No normalisation anywhere: every head (its `weight` is pyGAT's W) and the output layer.
        self.exposed = [f"attentions.attention_{i}" for i in range(heads)] + ["out_att"]
        self.decay_everything = True  # train.py's Adam(model.parameters(), weight_decay=5e-4)

    def forward(self, graph: dict[str, torch.Tensor]) -> torch.Tensor:
        x = graph["x"]
        adj = dense_adjacency(graph["edge_index"], x.shape[0])
        x = torch.nn.functional.dropout(x, self.dropout, self.training)
        x = self.attentions(x, adj)
        x = torch.nn.functional.dropout(x, self.dropout, self.training)
        x = torch.nn.functional.elu(self.out_att(x, adj))
        return torch.log_softmax(x, dim=1)


CNP_SIGMA_FLOOR = 0.1
"""The decoder's lower bound on σ (the notebook's `sigma = 0.1 + 0.9 * softplus(log_sigma)`)."""


class ConditionalNeuralProcess(nn.Module):
    """Garnelo et al.'s Conditional Neural Process as deepmind/neural-processes'
    conditional_neural_process.ipynb writes it: `encoder`, an MLP over each context pair
    concat(x, y) (widths `encoder_sizes`, ReLU between, none after the last), mean-aggregated over
    the context points into one representation r per function; `decoder`, an MLP over concat(r,
    x_target) at each target (widths `decoder_sizes`, ReLU between, the last 2 wide: μ and
    log σ), σ = 0.1 + 0.9 · softplus(log σ). Its sizes (encoder 128 ×4, decoder 128, 128, 2), PyTorch's
    default Linear inits (the notebook's tf.layers.dense has Glorot-uniform weights, zero biases).
    Its forward takes the batch dict {"context_x", "context_y", "target_x"} (each (B, n, 1)) and
    returns (μ, σ), each (B, targets, 1); the last representation is kept in `last_representation`."""

    def __init__(self, encoder_sizes: tuple[int, ...] = (128, 128, 128, 128),
                 decoder_sizes: tuple[int, ...] = (128, 128, 2), x_size: int = 1, y_size: int = 1) -> None:
        super().__init__()
        self.encoder = self._mlp(x_size + y_size, encoder_sizes)
        self.decoder = self._mlp(encoder_sizes[-1] + x_size, decoder_sizes)
        self.units = [f"encoder.{2 * i}" for i in range(len(encoder_sizes))] + \
            [f"decoder.{2 * i}" for i in range(len(decoder_sizes))]
        self.hidden = self.units[:-1]
        # No normalisation anywhere: the decoder's head (μ and σ) and the representation's last layer,
        # which every target reads through the mean.
        self.exposed = [self.units[-1], f"encoder.{2 * (len(encoder_sizes) - 1)}"]
        self.last_representation: torch.Tensor | None = None

    @staticmethod
    def _mlp(width: int, sizes: tuple[int, ...]) -> nn.Sequential:
        layers: list[nn.Module] = []
        for i, size in enumerate(sizes):
            layers.append(nn.Linear(width, size))
            if i < len(sizes) - 1:
                layers.append(nn.ReLU())
            width = size
        return nn.Sequential(*layers)

    def represent(self, context_x: torch.Tensor, context_y: torch.Tensor) -> torch.Tensor:
        """r (B, r_size): the encoder's output at each context pair, averaged over the points."""
        return self.encoder(torch.cat([context_x, context_y], dim=-1)).mean(dim=1)

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        r = self.represent(batch["context_x"], batch["context_y"])
        self.last_representation = r.detach()
        target_x = batch["target_x"]
        hidden = self.decoder(torch.cat([r[:, None, :].expand(-1, target_x.shape[1], -1), target_x], dim=-1))
        mu, log_sigma = hidden.chunk(2, dim=-1)
        return mu, CNP_SIGMA_FLOOR + (1 - CNP_SIGMA_FLOOR) * nn.functional.softplus(log_sigma)


def cnp_nll(output: tuple[torch.Tensor, torch.Tensor], target_y: torch.Tensor) -> torch.Tensor:
    """The notebook's loss: −mean log N(target_y; μ, σ) over every function and target point (its
    MultivariateNormalDiag over one y dimension is the univariate normal). Negative once σ < 1/√(2π)
    and the means fit; its floor is ln 0.1 + ½ ln 2π (σ at its bound, μ exact)."""
    mu, sigma = output
    return (torch.log(sigma) + 0.5 * math.log(2 * math.pi) + 0.5 * ((target_y - mu) / sigma) ** 2).mean()


KAN_GRID_SIZE = 5
"""efficient-kan's `grid_size`: intervals of the uniform grid on `grid_range`."""
KAN_SPLINE_ORDER = 3
"""efficient-kan's `spline_order`: cubic B-splines (grid_size + spline_order bases an input)."""


def kan_uniform_grid(in_features: int, grid_size: int = KAN_GRID_SIZE, spline_order: int = KAN_SPLINE_ORDER,
                     grid_range: tuple[float, float] = (-1.0, 1.0)) -> torch.Tensor:
    """efficient-kan's knots: `grid_size` equal intervals of `grid_range`, extended by
    `spline_order` knots at each end, one row per input feature: (in_features, grid_size + 2·order + 1)."""
    step = (grid_range[1] - grid_range[0]) / grid_size
    knots = torch.arange(-spline_order, grid_size + spline_order + 1, dtype=torch.float32) * step + grid_range[0]
    return knots.expand(in_features, -1).contiguous()


def kan_b_splines(x: torch.Tensor, grid: torch.Tensor, spline_order: int) -> torch.Tensor:
    """The B-spline bases of each input on its own knots by the Cox–de Boor recursion, as
    efficient-kan's `KANLinear.b_splines`: order 0 the indicator of [t_j, t_{j+1}), then
    B_{j,k}(x) = (x − t_j)/(t_{j+k} − t_j) · B_{j,k−1}(x)
               + (t_{j+k+1} − x)/(t_{j+k+1} − t_{j+1}) · B_{j+1,k−1}(x).
    x (B, in), grid (in, n_knots) → (B, in, n_knots − 1 − spline_order); 0 outside the knots."""
    x = x.unsqueeze(-1)
    bases = ((x >= grid[:, :-1]) & (x < grid[:, 1:])).to(x.dtype)
    for k in range(1, spline_order + 1):
        left = (x - grid[:, :-(k + 1)]) / (grid[:, k:-1] - grid[:, :-(k + 1)])
        right = (grid[:, k + 1:] - x) / (grid[:, k + 1:] - grid[:, 1:-k])
        bases = left * bases[..., :-1] + right * bases[..., 1:]
    return bases.contiguous()


class KANLinear(nn.Module):
    """Blealtan/efficient-kan's `KANLinear`: out = F.linear(SiLU(x), base_weight) + F.linear(B(x),
    spline_weight · spline_scaler), B(x) the (B, in·(G + k)) B-spline bases of every input on a
    uniform grid of `grid_size` G intervals on [−1, 1] extended by `spline_order` k knots each side
    (a buffer: grid updates are not used here). Its init: base_weight Kaiming-uniform with a =
    sqrt(5)·scale_base, spline_scaler likewise with a = sqrt(5)·scale_spline (its
    `enable_standalone_scale_spline`), spline_weight the least-squares coefficients (its
    `curve2coeff`) of uniform noise (±scale_noise / 2 / G) at the grid's G + 1 interior knots.
    `regularization_loss` as there: the mean |spline_weight| per edge summed (its L1 stand-in)
    plus the entropy of their shares. The two weights sit in `weight` (a ParameterDict: `weight.base`
    and `weight.spline`, reached as `base_weight` and `spline_weight`) so that a fault that
    rescales a layer's weights rescales both branches."""

    def __init__(self, in_features: int, out_features: int, grid_size: int = KAN_GRID_SIZE,
                 spline_order: int = KAN_SPLINE_ORDER, scale_noise: float = 0.1, scale_base: float = 1.0,
                 scale_spline: float = 1.0, grid_range: tuple[float, float] = (-1.0, 1.0)) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.grid_size, self.spline_order = grid_size, spline_order
        self.scale_noise, self.scale_base, self.scale_spline = scale_noise, scale_base, scale_spline
        self.register_buffer("grid", kan_uniform_grid(in_features, grid_size, spline_order, grid_range))
        self.weight = nn.ParameterDict({
            "base": nn.Parameter(torch.empty(out_features, in_features)),
            "spline": nn.Parameter(torch.empty(out_features, in_features, grid_size + spline_order))})
        self.spline_scaler = nn.Parameter(torch.empty(out_features, in_features))
        self.base_activation = nn.SiLU()
        self.reset_parameters()

    @property
    def base_weight(self) -> nn.Parameter:
        return self.weight["base"]

    @property
    def spline_weight(self) -> nn.Parameter:
        return self.weight["spline"]

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.base_weight, a=math.sqrt(5) * self.scale_base)
        with torch.no_grad():
            noise = (torch.rand(self.grid_size + 1, self.in_features, self.out_features) - 0.5) \
                * self.scale_noise / self.grid_size
            knots = self.grid.T[self.spline_order:-self.spline_order]  # (G + 1, in): the interior knots
            self.spline_weight.copy_(self.curve2coeff(knots, noise))
        nn.init.kaiming_uniform_(self.spline_scaler, a=math.sqrt(5) * self.scale_spline)

    def b_splines(self, x: torch.Tensor) -> torch.Tensor:
        """(B, in) → (B, in, grid_size + spline_order)."""
        return kan_b_splines(x, self.grid, self.spline_order)

    def curve2coeff(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Spline coefficients (out, in, G + k) whose curves pass closest (least squares, per input)
        through the points y (n, in, out) at x (n, in)."""
        design = self.b_splines(x).transpose(0, 1)  # (in, n, G + k)
        solution = torch.linalg.lstsq(design, y.transpose(0, 1)).solution  # (in, G + k, out)
        return solution.permute(2, 0, 1).contiguous()

    @property
    def scaled_spline_weight(self) -> torch.Tensor:
        return self.spline_weight * self.spline_scaler.unsqueeze(-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, self.in_features)
        base = torch.nn.functional.linear(self.base_activation(x), self.base_weight)
        spline = torch.nn.functional.linear(self.b_splines(x).reshape(len(x), -1),
                                            self.scaled_spline_weight.reshape(self.out_features, -1))
        return (base + spline).reshape(*shape[:-1], self.out_features)

    def regularization_loss(self, regularize_activation: float = 1.0, regularize_entropy: float = 1.0) -> torch.Tensor:
        l1 = self.spline_weight.abs().mean(-1)
        total = l1.sum()
        share = l1 / total
        return regularize_activation * total - regularize_entropy * (share * share.log()).sum()


class KAN(nn.Module):
    """efficient-kan's `KAN`: a stack of `KANLinear`s over `layers_hidden` widths (no activation
    between: each edge's spline is its nonlinearity). Its MNIST example's [784, 64, 10] becomes
    [64, 32, 10] on the zoo's flattened 8×8 digits; its forward flattens (B, ...) inputs as the
    example's `images.view(-1, 28 * 28)`. No grid updates (its `update_grid` is off by default and
    the example never turns it on). No decay exemptions (`decay_everything`: the example's
    `AdamW(model.parameters(), weight_decay=1e-4)`)."""

    def __init__(self, layers_hidden: tuple[int, ...] = (64, 32, 10), grid_size: int = KAN_GRID_SIZE,
                 spline_order: int = KAN_SPLINE_ORDER) -> None:
        super().__init__()
        self.layers = nn.ModuleList(KANLinear(a, b, grid_size, spline_order)
                                    for a, b in zip(layers_hidden, layers_hidden[1:]))
        self.units = [f"layers.{i}" for i in range(len(self.layers))]
        self.hidden = self.units[:-1]
        self.exposed = list(self.units)  # no normalisation anywhere
        self.decay_everything = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(len(x), -1)
        for layer in self.layers:
            x = layer(x)
        return x

    def regularization_loss(self, regularize_activation: float = 1.0, regularize_entropy: float = 1.0) -> torch.Tensor:
        return sum(layer.regularization_loss(regularize_activation, regularize_entropy) for layer in self.layers)


class HyperNetwork(nn.Module):
    """Ha, Dai & Le's static hypernetwork as g1910free/HyperNetworks' hypernetwork_modules.py writes
    it: a layer embedding z (`z_dim`) → h_in = z w2 + b2, viewed (in_size, z_dim) → h_in w1 + b1,
    viewed as an (out_size, in_size, f, f) kernel (the flat (in_size, out_size·f·f) product
    reinterpreted by `view`, not transposed, as there). w1, b1, w2, b2 are N(0, 1) folded into
    (−2, 2) by `torch.fmod(torch.randn(...), 2)`, as there; its parameters keep its names, so
    `WeightScale` (which scales parameters named `weight…`) cannot reach them."""

    def __init__(self, f_size: int = 3, z_dim: int = 64, out_size: int = 16, in_size: int = 16) -> None:
        super().__init__()
        self.z_dim, self.f_size, self.out_size, self.in_size = z_dim, f_size, out_size, in_size
        self.w1 = nn.Parameter(torch.fmod(torch.randn(z_dim, out_size * f_size * f_size), 2))
        self.b1 = nn.Parameter(torch.fmod(torch.randn(out_size * f_size * f_size), 2))
        self.w2 = nn.Parameter(torch.fmod(torch.randn(z_dim, in_size * z_dim), 2))
        self.b2 = nn.Parameter(torch.fmod(torch.randn(in_size * z_dim), 2))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h_in = (z @ self.w2 + self.b2).view(self.in_size, self.z_dim)
        h_final = h_in @ self.w1 + self.b1
        return h_final.view(self.out_size, self.in_size, self.f_size, self.f_size)


class HyperEmbedding(nn.Module):
    """primary_net.py's `Embedding`: a (h, k) grid of learned layer embeddings z (each
    fmod(randn(z_dim), 2)); its forward asks the hypernetwork for each z's kernel and tiles them,
    k side by side along the input channels, h stacked along the output channels: an
    (h·out_size, k·in_size, f, f) kernel for a layer h·out wide reading k·in channels."""

    def __init__(self, z_num: tuple[int, int], z_dim: int) -> None:
        super().__init__()
        self.z_num, self.z_dim = z_num, z_dim
        h, k = z_num
        self.z_list = nn.ParameterList(nn.Parameter(torch.fmod(torch.randn(z_dim), 2)) for _ in range(h * k))

    def forward(self, hyper_net: HyperNetwork) -> torch.Tensor:
        h, k = self.z_num
        rows = [torch.cat([hyper_net(self.z_list[i * k + j]) for j in range(k)], dim=1) for i in range(h)]
        return torch.cat(rows, dim=0)


class HyperConvBlock(nn.Module):
    """One of resnet_blocks.py's `ResNetBlock`s with one convolution (its two, here one): the
    generated kernel applied by `F.conv2d` (padding 1, stride 1: no downsampling, so its identity
    shortcut), BatchNorm, the shortcut added, ReLU. Its BatchNorm is its only parameter: the
    kernel comes from the hypernetwork each forward and is no Parameter of this block."""

    def __init__(self, channels: int = 16) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
        out = self.bn(torch.nn.functional.conv2d(x, kernel, padding=1))
        return torch.relu(out + x)


class HyperNetCNN(nn.Module):
    """primary_net.py's `PrimaryNetwork` (g1910free/HyperNetworks), small: an ordinary stem
    `nn.Conv2d(1, 16, 3, padding=1)` → BatchNorm → ReLU (its conv1 / bn1: the hypernetwork only
    makes 16 → 16 kernels), then `blocks` `HyperConvBlock`s (its 18 ResNet blocks of two convs
    each, at 16, 32 and 64 channels) whose kernels one shared `HyperNetwork` (`hope`, z_dim 64,
    16 × 16 × 3 × 3) generates from each block's `HyperEmbedding` (`zs`, one (1, 1) grid of a z a
    block) on every forward, global average pooling, `nn.Linear(16, classes)` (its `final`).
    Trained: the stem, the hypernetwork's w1 / b1 / w2 / b2, the z's, the BatchNorms and the head;
    no convolution of the blocks has a weight of its own. Units in forward order: stem, hope, each
    z, each block (its BatchNorm), final; a detach of the last block cuts every earlier unit off
    (the hypernetwork and the z's are reached only through the blocks' outputs). Exposed: the head
    only (every generated convolution and the stem are read by a BatchNorm, which normalises a
    scaling away; the hypernetwork's and the z's parameters are not named `weight`)."""

    def __init__(self, classes: int = 10, channels: int = 16, blocks: int = 3, z_dim: int = 64) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.hope = HyperNetwork(f_size=3, z_dim=z_dim, out_size=channels, in_size=channels)
        self.zs = nn.ModuleList(HyperEmbedding((1, 1), z_dim) for _ in range(blocks))
        self.blocks = nn.ModuleList(HyperConvBlock(channels) for _ in range(blocks))
        self.final = nn.Linear(channels, classes)
        self.units = ["stem", "hope", *(f"zs.{i}" for i in range(blocks)), *(f"blocks.{i}" for i in range(blocks)),
                      "final"]
        self.hidden = self.units[:-1]
        self.exposed = ["final"]
        self.decay_everything = True  # train.py's Adam(net.parameters(), weight_decay=0.0005)

    def kernels(self) -> list[torch.Tensor]:
        """Each block's kernel as the hypernetwork generates it now."""
        return [z(self.hope) for z in self.zs]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for z, block in zip(self.zs, self.blocks):
            x = block(x, z(self.hope))
        return self.final(x.mean(dim=(2, 3)))


DIT_TIMESTEPS = 1000
"""DiT's `create_diffusion(timestep_respacing="")`: 1000 diffusion steps on the linear schedule."""
DIT_EMA_DECAY = 0.9999
"""DiT's train.py `update_ema(ema, model.module)` default decay."""


def dit_linear_betas(timesteps: int = DIT_TIMESTEPS) -> np.ndarray:
    """DiT's `get_named_beta_schedule("linear", T)` (Ho et al.'s, stretched to any T): β evenly
    from 1e-4 · 1000/T to 0.02 · 1000/T in float64."""
    scale = 1000 / timesteps
    return np.linspace(scale * 0.0001, scale * 0.02, timesteps, dtype=np.float64)


def dit_modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """DiT's `modulate`: x · (1 + scale) + shift, one (shift, scale) a sample broadcast over its tokens."""
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def dit_timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """DiT's `TimestepEmbedder.timestep_embedding` (GLIDE's): [cos(t·f), sin(t·f)], f_i =
    max_period^(−i/half) for i < half = dim // 2, a zero column appended where dim is odd. (B,) → (B, dim).
    (The DDPM's `timestep_embedding` above divides by half − 1 and puts sin first.)"""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


class DiTTimestepEmbedder(nn.Module):
    """DiT's `TimestepEmbedder`: the 256-wide sinusoidal frequency embedding of t through
    Linear → SiLU → Linear to the hidden size."""

    def __init__(self, hidden_size: int, frequency_embedding_size: int = 256) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(frequency_embedding_size, hidden_size), nn.SiLU(),
                                 nn.Linear(hidden_size, hidden_size))
        self.frequency_embedding_size = frequency_embedding_size

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(dit_timestep_embedding(t, self.frequency_embedding_size))


class DiTLabelEmbedder(nn.Module):
    """DiT's `LabelEmbedder`: a table of `num_classes` + 1 rows where `dropout_prob` > 0, the extra
    row the null class of classifier-free guidance; in training each label is replaced by the null
    class with probability `dropout_prob` (its `token_drop`, torch.rand per sample);
    `force_drop_ids` (1 = drop) drops exactly those, in training or not."""

    def __init__(self, num_classes: int, hidden_size: int, dropout_prob: float) -> None:
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + int(dropout_prob > 0), hidden_size)
        self.num_classes, self.dropout_prob = num_classes, dropout_prob

    def token_drop(self, labels: torch.Tensor, force_drop_ids: torch.Tensor | None = None) -> torch.Tensor:
        if force_drop_ids is None:
            drop_ids = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
        else:
            drop_ids = force_drop_ids == 1
        return torch.where(drop_ids, self.num_classes, labels)

    def forward(self, labels: torch.Tensor, train: bool, force_drop_ids: torch.Tensor | None = None) -> torch.Tensor:
        if (train and self.dropout_prob > 0) or force_drop_ids is not None:
            labels = self.token_drop(labels, force_drop_ids)
        return self.embedding_table(labels)


class DiTMlp(nn.Module):
    """timm's `Mlp` as DiT builds it: fc1 → GELU (tanh approximation) → fc2, no dropout."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class DiTBlock(nn.Module):
    """DiT's `DiTBlock` (adaLN-Zero): LayerNorms without affine (eps 1e-6), timm's `Attention`
    (qkv bias) and `Mlp`; `adaLN_modulation` (SiLU → Linear(h, 6h)) of the conditioning c gives
    shift / scale / gate for each branch: x + gate_msa · attn(modulate(norm1(x))), then
    x + gate_mlp · mlp(modulate(norm2(x))). Zero-initialised by `DiT.initialize_weights`, so
    every block starts as the identity."""

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.mlp = DiTMlp(hidden_size, int(hidden_size * mlp_ratio))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 6 * hidden_size))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa.unsqueeze(1) * self.attn(dit_modulate(self.norm1(x), shift_msa, scale_msa))
        return x + gate_mlp.unsqueeze(1) * self.mlp(dit_modulate(self.norm2(x), shift_mlp, scale_mlp))


class DiTFinalLayer(nn.Module):
    """DiT's `FinalLayer`: LayerNorm without affine, modulated by (shift, scale) from its own
    adaLN (SiLU → Linear(h, 2h)) of c, then Linear to each patch's p² · out_channels values."""

    def __init__(self, hidden_size: int, patch_size: int, out_channels: int) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(dit_modulate(self.norm_final(x), shift, scale))


class DiT(nn.Module):
    """Peebles & Xie's Diffusion Transformer as facebookresearch/DiT's models.py writes it, small:
    timm's `PatchEmbed` (a p×p stride-p conv) of the (N, C, H, W) latents plus fixed 2-D sin-cos
    positions (`pos_embed`, an `nn.Parameter` with `requires_grad=False` as there, from mae's
    `get_2d_sincos_pos_embed`), c = `TimestepEmbedder`(t) + `LabelEmbedder`(y) (class dropout 0.1
    in training), `DiTBlock`s, `FinalLayer`, `unpatchify` to (N, out_channels, H, W). Its
    `initialize_weights`: xavier-uniform Linears with zero biases, the patch conv as a Linear
    (xavier on its flattened weight), the label table and both timestep-MLP weights N(0, 0.02),
    every adaLN modulation and the final Linear zero (so the untrained model predicts 0 everywhere).
    `learn_sigma` False here (out_channels = in_channels; DiT's default True doubles them and adds
    the variational bound's term to the loss). Its DiT-S/2's 384 wide, 12 deep, 6 heads on 32×32×4
    latents become 32, 3, 4 on the 8×8×1 digits (patch 2: 16 tokens). y None (the eval loop's
    forward, which gets no labels) is every sample's null class, the unconditional model of
    classifier-free guidance (its `force_drop_ids` all 1)."""

    def __init__(self, input_size: int = 8, patch_size: int = 2, in_channels: int = 1, hidden_size: int = 32,
                 depth: int = 3, num_heads: int = 4, mlp_ratio: float = 4.0, class_dropout_prob: float = 0.1,
                 num_classes: int = 10, learn_sigma: bool = False) -> None:
        super().__init__()
        self.learn_sigma = learn_sigma
        self.in_channels = in_channels
        self.out_channels = in_channels * 2 if learn_sigma else in_channels
        self.patch_size, self.num_heads = patch_size, num_heads
        self.x_embedder = MAEPatchEmbed(input_size, patch_size, in_channels, hidden_size)
        self.t_embedder = DiTTimestepEmbedder(hidden_size)
        self.y_embedder = DiTLabelEmbedder(num_classes, hidden_size, class_dropout_prob)
        self.pos_embed = nn.Parameter(torch.zeros(1, self.x_embedder.num_patches, hidden_size), requires_grad=False)
        self.blocks = nn.ModuleList(DiTBlock(hidden_size, num_heads, mlp_ratio) for _ in range(depth))
        self.final_layer = DiTFinalLayer(hidden_size, patch_size, self.out_channels)
        self.initialize_weights()

    def initialize_weights(self) -> None:
        def basic_init(module: nn.Module) -> None:
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.constant_(module.bias, 0)
        self.apply(basic_init)
        grid = int(self.x_embedder.num_patches ** 0.5)
        self.pos_embed.data.copy_(torch.from_numpy(get_2d_sincos_pos_embed(self.pos_embed.shape[-1], grid))
                                  .float().unsqueeze(0))
        w = self.x_embedder.proj.weight.data
        nn.init.xavier_uniform_(w.view([w.shape[0], -1]))
        nn.init.constant_(self.x_embedder.proj.bias, 0)
        nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[0].weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[2].weight, std=0.02)
        for block in self.blocks:
            nn.init.constant_(block.adaLN_modulation[-1].weight, 0)
            nn.init.constant_(block.adaLN_modulation[-1].bias, 0)
        nn.init.constant_(self.final_layer.adaLN_modulation[-1].weight, 0)
        nn.init.constant_(self.final_layer.adaLN_modulation[-1].bias, 0)
        nn.init.constant_(self.final_layer.linear.weight, 0)
        nn.init.constant_(self.final_layer.linear.bias, 0)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        """(N, T, p² · C) → (N, C, H, W), each token's values row by row, channels last (mae's
        `patchify` undone)."""
        c, p = self.out_channels, self.patch_size
        h = w = int(x.shape[1] ** 0.5)
        assert h * w == x.shape[1]
        x = x.reshape(x.shape[0], h, w, p, p, c)
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(x.shape[0], c, h * p, w * p)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        x = self.x_embedder(x) + self.pos_embed
        t = self.t_embedder(t)
        if y is None:  # the unconditional model: every sample's null class
            null = torch.full((len(x),), self.y_embedder.num_classes, dtype=torch.long, device=x.device)
            y = self.y_embedder(null, False, force_drop_ids=torch.ones_like(null))
        else:
            y = self.y_embedder(y, self.training)
        c = t + y
        for block in self.blocks:
            x = block(x, c)
        return self.unpatchify(self.final_layer(x, c))


@torch.no_grad()
def dit_update_ema(ema_model: nn.Module, model: nn.Module, decay: float = DIT_EMA_DECAY) -> None:
    """DiT's train.py `update_ema`: every named parameter of the EMA moved toward the model's,
    ema ← decay · ema + (1 − decay) · param (the frozen `pos_embed` too, as there); decay 0 copies."""
    ema_params = dict(ema_model.named_parameters())
    for name, param in model.named_parameters():
        ema_params[name].mul_(decay).add_(param.data, alpha=1 - decay)


class DiTDiffusion(nn.Module):
    """DiT's training step around its model: train.py's t = torch.randint(0, T, (N,)) and
    `diffusion.training_losses(model, x, t, dict(y=y))` with its `create_diffusion("")` settings
    (T = 1000 linear βs, ε-prediction, MSE loss; learn_sigma False, so no variational-bound term):
    ε ~ N(0, I), x_t = √ᾱ_t x0 + √(1 − ᾱ_t) ε (its `q_sample`, the schedule's arrays float64 numpy
    as there, each gathered value cast to float32), the model's prediction of ε from (x_t, t, y).
    Returns (prediction, ε) for `dit_loss`. The schedule is numpy on this wrapper, not a buffer:
    DiT's diffusion object is no module.

    Units (forward order): the patch embedding, the timestep and label embedders, each block, the
    final layer; the frozen `pos_embed` is `loose` (a group of its own: DiT's AdamW(model.parameters())
    holds it, and with no gradient never moves it). Hidden: the blocks (a detached last block
    leaves the timestep and label embedders learning through the final layer's adaLN, which reads c
    directly: `field.TIED`). Exposed: what reaches the loss with no normalisation after it: the
    patch conv (the residual stream, normalised only inside the blocks' branches and by the final
    LayerNorm), both timestep-MLP Linears and the label table (c, which the final layer's adaLN
    reads unnormalised), the final adaLN and the final Linear."""

    def __init__(self, model: DiT, timesteps: int = DIT_TIMESTEPS) -> None:
        super().__init__()
        self.model = model
        self.num_timesteps = timesteps
        self.betas = dit_linear_betas(timesteps)
        alphas_cumprod = np.cumprod(1.0 - self.betas, axis=0)
        self.sqrt_alphas_cumprod = np.sqrt(alphas_cumprod)
        self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - alphas_cumprod)
        depth = len(model.blocks)
        self.units = ["model.x_embedder", "model.t_embedder", "model.y_embedder",
                      *(f"model.blocks.{i}" for i in range(depth)), "model.final_layer"]
        self.loose = ("model.pos_embed",)
        self.hidden = [f"model.blocks.{i}" for i in range(depth)]
        self.exposed = ["model.x_embedder.proj", "model.t_embedder.mlp.0", "model.t_embedder.mlp.2",
                        "model.y_embedder.embedding_table", "model.final_layer.adaLN_modulation.1",
                        "model.final_layer.linear"]
        self.decay_everything = True  # DiT's AdamW(model.parameters(), weight_decay=0): one group a unit

    @staticmethod
    def _extract(array: np.ndarray, t: torch.Tensor, ndim: int) -> torch.Tensor:
        """DiT's `_extract_into_tensor`: array[t] as float32, shaped to broadcast over (N, ...)."""
        values = torch.from_numpy(array).to(device=t.device)[t].float()
        return values.view(-1, *([1] * (ndim - 1)))

    def q_sample(self, x_start: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self._extract(self.sqrt_alphas_cumprod, t, x_start.ndim) * x_start + \
            self._extract(self.sqrt_one_minus_alphas_cumprod, t, x_start.ndim) * noise

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.randint(0, self.num_timesteps, (x.shape[0],), device=x.device)
        noise = torch.randn_like(x)
        return self.model(self.q_sample(x, t, noise), t, y), noise


def dit_loss(output: tuple[torch.Tensor, torch.Tensor], _targets=None) -> torch.Tensor:
    """DiT's `training_losses` MSE term: mean_flat((ε − prediction)²) per sample, then
    train.py's `loss_dict["loss"].mean()`."""
    prediction, noise = output
    return ((noise - prediction) ** 2).mean(dim=tuple(range(1, noise.ndim))).mean()


SAE_INPUTS = 32
"""The width of the activations the SAE reads (the toy model's embedding dimension)."""
SAE_FEATURES = 128
"""Sparse ground-truth features the toy activations superpose in `SAE_INPUTS` dimensions."""
SAE_LATENTS = 128
"""The SAE's latents (×4 its inputs; openai/sparse_autoencoder trains 2^15-2^24 on GPT-2's / GPT-4's widths)."""
SAE_FEATURE_PROBABILITY = 0.05
"""Each toy feature's chance of firing on a sample (~6.4 of 128 active)."""
SAE_MEAN_NORM = 1.0
"""The norm of the toy activations' fixed mean (`sae_activation_mean`)."""
SAE_L1_COEF = 1e-2
"""λ on the normalised L1 of the latents (see `sae_loss`; measured: the healthy run's docstring in field.py)."""


def sae_toy_activations(rows: int, seed: int, embedding_seed: int = 0) -> torch.Tensor:
    """Synthetic activations in superposition, as Anthropic's "Toy Models of Superposition" and the
    SAE papers' synthetic tests make them: `SAE_FEATURES` features, each firing independently with
    probability `SAE_FEATURE_PROBABILITY` at a magnitude uniform in [0, 1], mapped by a fixed
    random embedding (one Gaussian direction a feature, unit norm; `embedding_seed`'s own, the same
    "model" for every run) into `SAE_INPUTS` dimensions, plus a fixed mean (`sae_activation_mean`).
    Without the mean, a row where no feature (0.95^128 ≈ 0.14 %) or one weak feature fired is ~0, and
    `sae_loss`'s per-sample normalisation made single-step loss spikes ×200 in a healthy run (seed 2:
    0.24 → 51.5 at step 22, measured): real activations are never near 0. (rows, SAE_INPUTS); the global RNG untouched."""
    embedding = torch.randn(SAE_FEATURES, SAE_INPUTS, generator=torch.Generator().manual_seed(embedding_seed))
    embedding = embedding / embedding.norm(dim=1, keepdim=True)
    generator = torch.Generator().manual_seed(seed)
    active = torch.rand(rows, SAE_FEATURES, generator=generator) < SAE_FEATURE_PROBABILITY
    magnitude = torch.rand(rows, SAE_FEATURES, generator=generator)
    return (active * magnitude) @ embedding + sae_activation_mean(embedding_seed)


def sae_activation_mean(embedding_seed: int = 0) -> torch.Tensor:
    """The toy activations' fixed offset: a random direction of norm `SAE_MEAN_NORM` (the
    embedding's generator, after the embedding), as a model's activations have a mean away from 0
    (what the SAE's pre-bias is for)."""
    generator = torch.Generator().manual_seed(embedding_seed)
    torch.randn(SAE_FEATURES, SAE_INPUTS, generator=generator)  # the embedding's draws first
    mean = torch.randn(SAE_INPUTS, generator=generator)
    return SAE_MEAN_NORM * mean / mean.norm()


class SAEPreBias(nn.Module):
    """openai/sparse_autoencoder's `pre_bias` (SAELens's `b_dec`) as a module of its own, so that
    it is a unit: subtracted from the input before the encoder (its forward) and added back after
    the decoder (`SparseAutoencoder.decode`)."""

    def __init__(self, n_inputs: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n_inputs))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.bias


class SparseAutoencoder(nn.Module):
    """A sparse autoencoder as openai/sparse_autoencoder's model.py `Autoencoder` writes it (ReLU
    activation, untied, no input normalisation): latents = ReLU(W_enc (x − b_pre) + b_lat),
    reconstruction = W_dec latents + b_pre; the decoder's columns (one a latent, `decoder.weight`
    is (inputs, latents)) kept at unit norm. Its `latent_bias` is the encoder Linear's bias here
    (the same affine map; a unit's parameters must live in a module). Initialisation as there: the
    encoder's Linear default (kaiming-uniform), the decoder its transpose ("tied init"), then unit
    norm columns; both biases zero (its `init_from_data_` geometric-median pre_bias left out).
    Returns (reconstruction, latents, input) for `sae_loss`: the loss compares the reconstruction
    with the input the model was given, as SAE code does (a bad batch is its own target).

    Units (forward order): the pre-bias, the encoder, the decoder. Hidden: the encoder (the latent
    layer; a detached encoder output cuts the encoder, the pre-bias keeps learning through the
    decoder's + b_pre: `field.TIED`). Exposed: the encoder and the decoder (no normalisation after
    either; a scaled decoder is put back to unit norm by the next `unit_norm_decoder_`)."""

    def __init__(self, n_inputs: int = SAE_INPUTS, n_latents: int = SAE_LATENTS) -> None:
        super().__init__()
        self.pre_bias = SAEPreBias(n_inputs)
        self.encoder = nn.Linear(n_inputs, n_latents)
        self.decoder = nn.Linear(n_latents, n_inputs, bias=False)
        with torch.no_grad():
            self.encoder.bias.zero_()
            self.decoder.weight.copy_(self.encoder.weight.T)
        sae_unit_norm_decoder_(self)
        self.units = ["pre_bias", "encoder", "decoder"]
        self.hidden = ["encoder"]
        self.exposed = ["encoder", "decoder"]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.encoder(self.pre_bias(x)))

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        return self.decoder(latents) + self.pre_bias.bias

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        latents = self.encode(x)
        return self.decode(latents), latents, x


@torch.no_grad()
def sae_unit_norm_decoder_(sae: SparseAutoencoder) -> None:
    """openai/sparse_autoencoder's `unit_norm_decoder_`: each decoder column (a latent's direction)
    divided by its norm, in place, outside the optimizer (after every step in its train.py)."""
    sae.decoder.weight.div_(sae.decoder.weight.norm(dim=0, keepdim=True))


@torch.no_grad()
def sae_unit_norm_decoder_grad_adjustment_(sae: SparseAutoencoder) -> None:
    """openai/sparse_autoencoder's `unit_norm_decoder_grad_adjustment_`: the component of each
    decoder column's gradient parallel to the column removed (g ← g − (g·w) w for unit w), before the
    optimizer step, so that the step moves the columns along the unit sphere."""
    weight, grad = sae.decoder.weight, sae.decoder.weight.grad
    if grad is not None:
        grad.sub_((grad * weight).sum(dim=0, keepdim=True) * weight)


def sae_loss(output: tuple[torch.Tensor, torch.Tensor, torch.Tensor], _targets=None,
             l1_coef: float = SAE_L1_COEF) -> torch.Tensor:
    """openai/sparse_autoencoder's loss.py terms for a ReLU SAE: `normalized_mean_squared_error`
    (each sample's mean squared error over its mean square, batch-averaged) + λ ·
    `normalized_L1_loss` (each sample's latents' L1 over its input's L2 norm, batch-averaged)."""
    reconstruction, latents, x = output
    nmse = (((reconstruction - x) ** 2).mean(dim=1) / (x ** 2).mean(dim=1)).mean()
    l1 = (latents.abs().sum(dim=1) / x.norm(dim=1)).mean()
    return nmse + l1_coef * l1


SNGAN_LATENT = 128
"""The SN-GAN's latent size (StudioGAN's and christiancosgrove's `z_dim` 128)."""


def sngan_orthogonal_init_(module: nn.Module) -> None:
    """PyTorch-StudioGAN's `init_weights(..., "ortho")` for its SN-GAN configs: every conv, transposed
    conv and linear weight `orthogonal_`, its bias 0 (BatchNorm left at its defaults). Run before the
    spectral norm is put on (the parametrization's `original` and its power-iteration vectors then
    start from the orthogonal weight)."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            nn.init.orthogonal_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)


class SNGANGenerator(nn.Module):
    """christiancosgrove/pytorch-spectral-normalization-gan's `Generator` (model.py: z as (B, z, 1, 1)
    → ConvTranspose2d, BatchNorm, ReLU, doubling the size each block → a 3×3 ConvTranspose2d to the
    image's channels → Tanh), for 8×8 digits: a 2×2 first block (theirs 4×4 for 32×32) and two ×2 up
    blocks (theirs three), widths 4·ngf → ngf (theirs 512 → 64). Each block is named (`block0`..`block2`,
    then `out`, the Tanh after it) where theirs is one `nn.Sequential`: the same layers, units to name."""

    def __init__(self, latent: int = SNGAN_LATENT, ngf: int = 16, channels: int = 1) -> None:
        super().__init__()
        self.latent = latent
        self.block0 = nn.Sequential(nn.ConvTranspose2d(latent, 4 * ngf, 2, stride=1), nn.BatchNorm2d(4 * ngf), nn.ReLU())
        self.block1 = nn.Sequential(nn.ConvTranspose2d(4 * ngf, 2 * ngf, 4, stride=2, padding=1),
                                    nn.BatchNorm2d(2 * ngf), nn.ReLU())
        self.block2 = nn.Sequential(nn.ConvTranspose2d(2 * ngf, ngf, 4, stride=2, padding=1), nn.BatchNorm2d(ngf),
                                    nn.ReLU())
        self.out = nn.ConvTranspose2d(ngf, channels, 3, stride=1, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.block2(self.block1(self.block0(z.view(-1, self.latent, 1, 1))))
        return torch.tanh(self.out(x))


class SNGANDiscriminator(nn.Module):
    """christiancosgrove's `Discriminator` (model.py; Miyato et al.'s standard CNN): 3×3 stride-1 and
    4×4 stride-2 convs in turn, LeakyReLU(0.1) after each, no BatchNorm, a linear head to one score;
    every conv and the head wrapped by `torch.nn.utils.parametrizations.spectral_norm` (one power
    iteration per training forward; theirs is a hand-written `SpectralNorm` wrapper of the same
    algorithm). For 8×8 digits: conv1..conv5 (8×8 → 4×4 → 2×2, widths ndf → 4·ndf), where theirs has
    conv1..conv7 (32×32 → 4×4, 64 → 512)."""

    def __init__(self, ndf: int = 16, channels: int = 1, size: int = 8, leak: float = 0.1) -> None:
        super().__init__()
        from torch.nn.utils.parametrizations import spectral_norm

        self.leak = leak
        layers = OrderedDict(conv1=nn.Conv2d(channels, ndf, 3, stride=1, padding=1),
                             conv2=nn.Conv2d(ndf, ndf, 4, stride=2, padding=1),
                             conv3=nn.Conv2d(ndf, 2 * ndf, 3, stride=1, padding=1),
                             conv4=nn.Conv2d(2 * ndf, 2 * ndf, 4, stride=2, padding=1),
                             conv5=nn.Conv2d(2 * ndf, 4 * ndf, 3, stride=1, padding=1),
                             fc=nn.Linear((size // 4) ** 2 * 4 * ndf, 1))
        for name, layer in layers.items():
            sngan_orthogonal_init_(layer)
            setattr(self, name, spectral_norm(layer))
        self.convs = [name for name in layers if name != "fc"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name in self.convs:
            x = nn.functional.leaky_relu(getattr(self, name)(x), self.leak)
        return self.fc(x.flatten(1))


class SNGAN(nn.Module):
    """The SN-GAN's two networks, `generator` (`SNGANGenerator`, orthogonally initialised) and
    `discriminator` (`SNGANDiscriminator`). Units: the generator's blocks and output conv, then the
    discriminator's convs and head; hidden: the generator's blocks (where an lr spike or a detach is
    drawn, as WGAN-GP's); exposed: the generator's output conv only (its Tanh is no normalisation).
    The discriminator's layers are exposed to nothing: a spectrally normalised layer computes with
    W / σ(W), which a rescaled `original` leaves as it was (and the weight is no parameter named
    `weight`: `parametrizations.weight.original`)."""

    def __init__(self, latent: int = SNGAN_LATENT) -> None:
        super().__init__()
        self.generator = SNGANGenerator(latent)
        sngan_orthogonal_init_(self.generator)
        self.discriminator = SNGANDiscriminator()
        self.units = ["generator.block0", "generator.block1", "generator.block2", "generator.out",
                      *(f"discriminator.{name}" for name in (*self.discriminator.convs, "fc"))]
        self.hidden = ["generator.block0", "generator.block1", "generator.block2"]
        self.exposed = ["generator.out"]


def sngan_hinge_d_loss(real_scores: torch.Tensor, fake_scores: torch.Tensor) -> torch.Tensor:
    """The hinge loss of the discriminator (StudioGAN's `d_hinge`): mean relu(1 − D(x)) + mean relu(1 + D(G(z)))."""
    return torch.relu(1.0 - real_scores).mean() + torch.relu(1.0 + fake_scores).mean()


def sngan_hinge_g_loss(fake_scores: torch.Tensor) -> torch.Tensor:
    """The hinge loss of the generator (StudioGAN's `g_hinge`): −mean D(G(z))."""
    return -fake_scores.mean()
ELECTRA_VOCAB = 40
"""Token IDs of the synthetic marker task: 0 [PAD], 1 [CLS], 2 [SEP], 3-5 the markers A, B, C, 6-39 filler words."""
ELECTRA_PAD, ELECTRA_CLS, ELECTRA_SEP = 0, 1, 2
ELECTRA_MARKERS = (3, 4, 5)
"""The marker tokens A, B and the distractor C."""
ELECTRA_CLASSES = 4
"""Which of the markers A and B a row holds: neither, A only, B only, both (`electra_rows`)."""
ELECTRA_LENGTHS = (4, 16)
"""Filler words per sequence (uniform, inclusive): with [CLS], the markers, 0-2 C's and [SEP], 6-22
tokens, padded to the longest of each batch."""
ELECTRA_POSITIONS = 24
ELECTRA_LAYER_DECAY = 0.8
"""ELECTRA's `layerwise_lr_decay` for its small model (google-research/electra configure_finetuning.py)."""


def electra_rows(rows: int, seed: int) -> tuple[list[list[int]], torch.Tensor]:
    """The synthetic text-classification task (no downloads): each row is [CLS], 4-16 filler
    words drawn uniformly, the markers its label asks for, 0-2 distractor C's, [SEP], every
    marker at a random place. Label = 1 · (A occurs) + 2 · (B occurs), balanced: the [CLS]
    token has to gather two words from anywhere in a padded row and combine them (neither and
    both are told apart from one A or one B only together). An order rule (A before B) was
    tried first and dropped: from the seeded init, 150 steps learned presence only (val
    accuracy 0.66 = presence's bound, lr 1e-3 and 3e-3, seed 0). The seed's own generator; the
    global RNG untouched. Returns the unpadded token rows and the (rows,) labels."""
    generator = torch.Generator().manual_seed(seed)
    a, b, c = ELECTRA_MARKERS
    labels = torch.randint(0, ELECTRA_CLASSES, (rows,), generator=generator)
    out = []
    for label in labels.tolist():
        length = int(torch.randint(ELECTRA_LENGTHS[0], ELECTRA_LENGTHS[1] + 1, (1,), generator=generator))
        words = torch.randint(6, ELECTRA_VOCAB, (length,), generator=generator).tolist()
        markers = [*([a] if label & 1 else []), *([b] if label & 2 else []),
                   *[c] * int(torch.randint(0, 3, (1,), generator=generator))]
        for token in markers:
            place = int(torch.randint(0, len(words) + 1, (1,), generator=generator))
            words[place:place] = [token]
        out.append([ELECTRA_CLS, *words, ELECTRA_SEP])
    return out, labels


def electra_collate(rows: list[list[int]], labels: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`DataCollatorWithPadding`'s batch: `input_ids` padded with [PAD] to the longest row,
    `attention_mask` 1 on tokens and 0 on padding (int64, as tokenizers return them)."""
    length = max(map(len, rows))
    input_ids = torch.full((len(rows), length), ELECTRA_PAD, dtype=torch.int64)
    attention_mask = torch.zeros(len(rows), length, dtype=torch.int64)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)], attention_mask[i, : len(row)] = torch.tensor(row), 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}, labels


def shuffled_indices(count: int, batch_size: int, seed: int):
    """`next_batch()` giving the indices of a shuffled batch of `batch_size` of `count` rows (an
    epoch's permutation, then the next: a `DataLoader(shuffle=True, drop_last=True)`)."""
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []

    def next_batch() -> list[int]:
        nonlocal order
        if len(order) < batch_size:
            order = torch.randperm(count, generator=generator).tolist()
        chosen, order = order[:batch_size], order[batch_size:]
        return chosen

    return next_batch


def electra_sampler(rows: list[list[int]], labels: torch.Tensor, batch_size: int, seed: int):
    """`draw()` giving a shuffled batch of `batch_size` rows (`shuffled_indices`), collated by
    `electra_collate`."""
    next_batch = shuffled_indices(len(rows), batch_size, seed)

    def draw() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        chosen = next_batch()
        return electra_collate([rows[i] for i in chosen], labels[chosen])

    return draw


class ElectraEmbeddings(nn.Module):
    """`ElectraEmbeddings` without token types (one segment): word + absolute position
    embeddings, LayerNorm (eps 1e-12), dropout 0.1."""

    def __init__(self, vocab: int, dim: int, positions: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim, padding_idx=ELECTRA_PAD)
        self.position_embeddings = nn.Embedding(positions, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        return self.dropout(self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings(positions)))


class ElectraSelfAttention(nn.Module):
    """BERT's `SelfAttention`: query/key/value projections, scaled dot products, the additive
    padding mask, softmax, dropout on the probabilities."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, d = hidden.shape

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = split(self.query(hidden)), split(self.key(hidden)), split(self.value(hidden))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + mask
        context = self.dropout(scores.softmax(-1)) @ v
        return context.transpose(1, 2).reshape(b, t, d)


class ElectraSelfOutput(nn.Module):
    """BERT's `SelfOutput` / `Output`: dense, dropout, LayerNorm of the residual sum (post-LN)."""

    def __init__(self, features: int, dim: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.dense = nn.Linear(features, dim)
        self.LayerNorm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(dropout)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(hidden)) + residual)


class ElectraAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.self = ElectraSelfAttention(dim, heads)
        self.output = ElectraSelfOutput(dim, dim)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(hidden, mask), hidden)


class ElectraIntermediate(nn.Module):
    def __init__(self, dim: int, ffn: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, ffn)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.dense(hidden))


class ElectraLayer(nn.Module):
    """One post-LN BERT/ELECTRA encoder layer: attention, then the GELU feed-forward, each
    followed by dropout, a residual sum and a LayerNorm."""

    def __init__(self, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attention = ElectraAttention(dim, heads)
        self.intermediate = ElectraIntermediate(dim, ffn)
        self.output = ElectraSelfOutput(ffn, dim)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attended = self.attention(hidden, mask)
        return self.output(self.intermediate(attended), attended)


class ElectraEncoder(nn.Module):
    """The layer stack with Hugging Face's gradient checkpointing: when `gradient_checkpointing`
    is on (`gradient_checkpointing_enable()`) and the model is in training mode, each layer runs
    through `torch.utils.checkpoint.checkpoint(layer.__call__, hidden, mask, use_reentrant=False)`:
    its activations are not kept, and its forward runs again during the backward pass (every
    forward hook of its modules fires twice a training step, once in eval)."""

    def __init__(self, layers: int, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.layer = nn.ModuleList(ElectraLayer(dim, heads, ffn) for _ in range(layers))
        self.gradient_checkpointing = False

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            if self.gradient_checkpointing and self.training:
                hidden = torch.utils.checkpoint.checkpoint(layer.__call__, hidden, mask, use_reentrant=False)
            else:
                hidden = layer(hidden, mask)
        return hidden


class ElectraClassificationHead(nn.Module):
    """`ElectraClassificationHead`: the [CLS] token's features, dropout, dense, GELU, dropout, out_proj."""

    def __init__(self, dim: int, classes: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(dim, classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = self.dropout(features[:, 0, :])
        x = self.dropout(torch.nn.functional.gelu(self.dense(x)))
        return self.out_proj(x)


class ElectraClassifier(nn.Module):
    """`ElectraForSequenceClassification` in small (written here, not Hugging Face's classes:
    dim 64, 4 heads, 4 post-LN layers, feed-forward 128; ELECTRA-small has 256 / 4 / 12 / 1024
    and a 128-wide embedding projected up); `forward(batch)` takes the tokenizer's dict batch
    (`input_ids`, `attention_mask`) and returns the (B, classes) logits. Initialised as
    `ElectraPreTrainedModel._init_weights` does (normal 0.02 for Linear and Embedding weights,
    zero biases and the padding row, LayerNorm at 1/0) from the run's seed: no pre-trained
    checkpoint can be downloaded here (a departure: the fine-tune starts from that seeded init).
    Gradient checkpointing on, as `model.gradient_checkpointing_enable()` leaves it.

    `units` (forward order): the embeddings, each encoder layer, the head: the depths of the
    layer-wise lr decay (`electra_param_groups_lrd`)."""

    def __init__(self, classes: int = ELECTRA_CLASSES, vocab: int = ELECTRA_VOCAB, dim: int = 64, heads: int = 4,
                 layers: int = 4, ffn: int = 128, positions: int = ELECTRA_POSITIONS) -> None:
        super().__init__()
        self.embeddings = ElectraEmbeddings(vocab, dim, positions)
        self.encoder = ElectraEncoder(layers, dim, heads, ffn)
        self.classifier = ElectraClassificationHead(dim, classes)
        self.apply(self._init_weights)
        self.encoder.gradient_checkpointing = True
        encoder = [f"encoder.layer.{i}" for i in range(layers)]
        self.units = ["embeddings", *encoder, "classifier"]
        self.hidden = encoder
        # No LayerNorm after them: the last layer's query projection (softmax follows), the head's two Linears.
        self.exposed = [f"{encoder[-1]}.attention.self.query", "classifier.dense", "classifier.out_proj"]

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
            if module.padding_idx is not None:
                with torch.no_grad():
                    module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        # get_extended_attention_mask: (B, 1, 1, T), 0 on tokens, the dtype's minimum on padding
        dtype = self.embeddings.word_embeddings.weight.dtype
        mask = (1.0 - batch["attention_mask"][:, None, None, :].to(dtype)) * torch.finfo(dtype).min
        return self.classifier(self.encoder(self.embeddings(batch["input_ids"]), mask))


def electra_param_groups_lrd(model: ElectraClassifier, lr: float, weight_decay: float,
                             layer_decay: float = ELECTRA_LAYER_DECAY) -> list[dict]:
    """Layer-wise lr decay as the fine-tuning scripts build it (MAE/BEiT's `param_groups_lrd`,
    ELECTRA's `_get_layer_lrs`): layer id 0 the embeddings, i + 1 encoder layer i, L + 1 the head
    (L layers); each parameter's lr `lr` × `layer_decay` ** (L + 1 − id), so the head trains at
    `lr` and the embeddings at `layer_decay` ** (L + 1) of it; no weight decay for biases and
    LayerNorm weights (every parameter of one dimension, `p.ndim == 1`), `weight_decay`
    otherwise. Two groups a depth (decay, then no decay), each tagged with its `layer` (the unit,
    as `field._param_groups` tags them: what an lr spike raises) and its `lr_scale`."""
    depth = len(model.units) - 1
    groups = []
    for layer_id, unit in enumerate(model.units):
        scale = layer_decay ** (depth - layer_id)
        params = list(model.get_submodule(unit).parameters())
        for decay in (True, False):
            chosen = [p for p in params if p.requires_grad and (p.ndim > 1) == decay]
            if chosen:
                groups.append({"params": chosen, "lr": lr * scale, "lr_scale": scale,
                               "weight_decay": weight_decay if decay else 0.0, "layer": unit})
    return groups


def electra_accuracy(model: nn.Module, batch: tuple[dict[str, torch.Tensor], torch.Tensor]) -> float:
    """The share of a held-out batch classified right, in eval mode without gradient, as a
    fine-tuning script's `evaluate` computes accuracy."""
    inputs, labels = batch
    was_training = model.training
    model.eval()
    with torch.no_grad():
        accuracy = float((model(inputs).argmax(-1) == labels).float().mean())
    model.train(was_training)
    return accuracy


ALBERT_EMBEDDING = 32
"""The factorised embedding width E (`AlbertConfig.embedding_size`; albert-base's 128 under H 768)."""
ALBERT_HIDDEN = 64
"""The hidden width H (`hidden_size`; albert-base's 768), 4 heads of 16, feed-forward 4H = 256."""
ALBERT_LAYERS = 4
"""`num_hidden_layers`: the one layer group applied this many times a forward (albert-base's 12)."""


def albert_classifier(classes: int = ELECTRA_CLASSES, vocab: int = ELECTRA_VOCAB, embedding: int = ALBERT_EMBEDDING,
                      hidden: int = ALBERT_HIDDEN, layers: int = ALBERT_LAYERS, heads: int = 4,
                      positions: int = ELECTRA_POSITIONS) -> nn.Module:
    """Hugging Face's `AlbertForSequenceClassification` built from a small `AlbertConfig` (no
    download): ALBERT (Lan et al. 2020, google-research/albert) with its two parameter reductions,
    a factorised embedding (word, position and token-type embeddings of width E =
    `ALBERT_EMBEDDING`, then `albert.encoder.embedding_hidden_mapping_in` E → H) and cross-layer
    sharing: `num_hidden_groups=1`, `inner_group_num=1` (the paper's all-shared setting,
    albert-base-v2's config): ONE `AlbertLayer` in `albert.encoder.albert_layer_groups.0`, whose
    modules (attention query/key/value/dense and LayerNorm, ffn, ffn_output,
    full_layer_layer_norm) are called `ALBERT_LAYERS` times in each forward
    (`AlbertTransformer.forward`'s loop over `num_hidden_layers`, every index mapped to group 0).
    albert-base-v2's other settings kept: `gelu_new`, no hidden or attention dropout (v2's 0),
    classifier dropout 0.1, post-LN, a tanh pooler over [CLS], init normal 0.02
    (`AlbertPreTrainedModel._init_weights`) from the run's seed: no pre-trained checkpoint can be
    downloaded here (a departure: the fine-tune starts from that seeded init). H 64, 4 heads,
    feed-forward 4H, E 32, 4 applications (albert-base: 768 / 12 / 3072, E 128, 12).

    The model is `AlbertClassifier`, the HF class itself with one change: `forward(batch)` takes
    run_glue's dict batch as the Trainer unpacks it into the model (`input_ids`,
    `token_type_ids`, `attention_mask`, int64; the collator's `labels` popped by the loop,
    `albert_sampler`) and returns the (B, classes) logits (HF's loss for `num_labels` > 1 is the
    cross-entropy the loop computes). Every parameter and module keeps HF's name.

    `units` (forward order): the embeddings, the E → H projection, the shared layer group, the
    pooler, the classifier; `hidden` the projection and the shared group (the group is the whole
    depth of the encoder: a detach of its output cuts it at each of its applications); `exposed`:
    the shared query projection (softmax follows; a weight scale there acts at all
    `ALBERT_LAYERS` applications), the pooler (tanh), the classifier."""
    from transformers import AlbertConfig, AlbertForSequenceClassification

    class AlbertClassifier(AlbertForSequenceClassification):
        def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            return super().forward(**batch).logits

    config = AlbertConfig(vocab_size=vocab, embedding_size=embedding, hidden_size=hidden, num_hidden_layers=layers,
                          num_hidden_groups=1, inner_group_num=1, num_attention_heads=heads,
                          intermediate_size=4 * hidden, hidden_act="gelu_new", hidden_dropout_prob=0.0,
                          attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.1,
                          max_position_embeddings=positions, type_vocab_size=2, initializer_range=0.02,
                          pad_token_id=ELECTRA_PAD, num_labels=classes)
    model = AlbertClassifier(config)
    model.units = ["albert.embeddings", "albert.encoder.embedding_hidden_mapping_in",
                   "albert.encoder.albert_layer_groups.0", "albert.pooler", "classifier"]
    model.hidden = model.units[1:3]
    model.exposed = ["albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query", "albert.pooler",
                     "classifier"]
    return model


def albert_collate(rows: list[list[int]], labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """run_glue's batch for ALBERT: `DataCollatorWithPadding` over the tokenizer's rows
    (`electra_collate`'s padded `input_ids` and `attention_mask`, the one-segment
    `token_type_ids` of zeros that ALBERT's tokenizer returns) and the dataset's `labels`."""
    inputs, labels = electra_collate(rows, labels)
    return {"input_ids": inputs["input_ids"], "token_type_ids": torch.zeros_like(inputs["input_ids"]),
            "attention_mask": inputs["attention_mask"], "labels": labels}


def albert_sampler(rows: list[list[int]], labels: torch.Tensor, batch_size: int, seed: int):
    """`draw()` giving a shuffled batch as `electra_sampler` does, collated by `albert_collate`
    into one dict, whose `labels` the loop pops (`labels = inputs.pop("labels")`, as the Trainer's
    label smoother and custom `compute_loss` loops do): (the model's inputs, the labels)."""
    next_batch = shuffled_indices(len(rows), batch_size, seed)

    def draw() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        chosen = next_batch()
        batch = albert_collate([rows[i] for i in chosen], labels[chosen])
        return batch, batch.pop("labels")

    return draw


MUON_GPT_MUON_LR = 0.05
"""modded-nanogpt's Muon lr, against which its Adam groups' lrs are set (`muon_gpt_optimizers`)."""
MUON_GPT_EMBED_LR = 0.6
"""Adam lr of the token embedding (modded-nanogpt's `embed` / `wte` group, Nov 2024 - Jan 2025 records)."""
MUON_GPT_HEAD_LR = 0.008
"""Adam lr of the untied, zero-initialised `lm_head` (modded-nanogpt's tanh-softcap records)."""
MUON_GPT_SCALAR_LR = 0.04
"""Adam lr of the learned scalars (each block's `lambdas`; modded-nanogpt's `scalar_params` group)."""
MUON_GPT_BETAS = (0.8, 0.95)
MUON_GPT_EPS = 1e-10
"""modded-nanogpt's Adam betas and its small eps (@YouJiacheng's)."""
MUON_GPT_MOMENTUM = (0.85, 0.95)
"""Muon's momentum at step 0 and after its warm-up (`muon_gpt_momentum`)."""


def muon_gpt_norm(x: torch.Tensor) -> torch.Tensor:
    """modded-nanogpt's `norm`: RMSNorm over the last dimension without a weight (`F.rms_norm`)."""
    return torch.nn.functional.rms_norm(x, (x.size(-1),))


class MuonGPTLinear(nn.Linear):
    """modded-nanogpt's `CastedLinear`: no bias, weights U(−√3·σ, √3·σ) with σ = ½ / √in_features
    (its Jan 2025 init; the cast to the activation dtype is autocast's here)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, bias=False)

    def reset_parameters(self) -> None:
        bound = math.sqrt(3) * 0.5 * self.in_features ** -0.5
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)


class MuonGPTRotary(nn.Module):
    """modded-nanogpt's `Rotary` (base 10000): cos / sin of each position's angles, applied to
    (B, T, H, D) halves as `apply_rotary_emb` does."""

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("inv_freq", (1 / base) ** (torch.arange(0, head_dim, 2).float() / head_dim),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)
        cos, sin = freqs.cos()[None, :, None, :], freqs.sin()[None, :, None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat((x1 * cos + x2 * sin, x1 * (-sin) + x2 * cos), dim=-1).type_as(x)


class MuonGPTAttention(nn.Module):
    """modded-nanogpt's `CausalSelfAttention`: q, k, v projections, QK-norm (RMSNorm of each head's
    q and k), rotary embeddings, causal `F.scaled_dot_product_attention`, and an output projection
    `c_proj` initialised to zero (`self.c_proj.weight.detach().zero_()`)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.c_q, self.c_k, self.c_v = MuonGPTLinear(dim, dim), MuonGPTLinear(dim, dim), MuonGPTLinear(dim, dim)
        self.rotary = MuonGPTRotary(self.head_dim)
        self.c_proj = MuonGPTLinear(dim, dim)
        self.c_proj.weight.detach().zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.c_q(x).view(b, t, self.heads, self.head_dim)
        k = self.c_k(x).view(b, t, self.heads, self.head_dim)
        v = self.c_v(x).view(b, t, self.heads, self.head_dim)
        q, k = muon_gpt_norm(q), muon_gpt_norm(k)  # QK norm
        q, k = self.rotary(q), self.rotary(k)
        y = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                             is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape_as(x))


class MuonGPTMLP(nn.Module):
    """modded-nanogpt's `MLP`: 4× expansion, ReLU² (`F.relu(x).square()`), a zero-initialised `c_proj`."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc = MuonGPTLinear(dim, 4 * dim)
        self.c_proj = MuonGPTLinear(4 * dim, dim)
        self.c_proj.weight.detach().zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(torch.nn.functional.relu(self.c_fc(x)).square())


class MuonGPTBlock(nn.Module):
    """modded-nanogpt's `Block`: the residual stream re-mixed with the embedding x0 by two learned
    scalars (`lambdas`, init (1, 0)), then pre-norm attention and MLP, each added to the stream."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = MuonGPTAttention(dim, heads)
        self.mlp = MuonGPTMLP(dim)
        self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))

    def forward(self, x: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        x = self.lambdas[0] * x + self.lambdas[1] * x0
        x = x + self.attn(muon_gpt_norm(x))
        return x + self.mlp(muon_gpt_norm(x))


class MuonGPT(nn.Module):
    """A modded-nanogpt `train_gpt.py`-style GPT (KellerJordan/modded-nanogpt's Nov 2024 - Jan 2025
    speedrun records, written from memory, small): token embedding `embed`, weightless RMSNorm
    (`F.rms_norm`) on it and before every sublayer and the head, `blocks.i` as `MuonGPTBlock`, an
    untied `lm_head` initialised to zero, logits soft-capped as 30 · tanh(logits / 30), returned in
    float32. Units: embed, the blocks, lm_head; hidden: the blocks; exposed: the head (every other
    layer's output meets an RMSNorm, or QK-norm, on its way to the loss)."""

    def __init__(self, vocab: int, dim: int = 64, heads: int = 4, layers: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(MuonGPTBlock(dim, heads) for _ in range(layers))
        self.lm_head = MuonGPTLinear(dim, vocab)
        self.lm_head.weight.detach().zero_()
        self.units = ["embed", *(f"blocks.{i}" for i in range(layers)), "lm_head"]
        self.hidden = [f"blocks.{i}" for i in range(layers)]
        self.exposed = ["lm_head"]

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = x0 = muon_gpt_norm(self.embed(idx))
        for block in self.blocks:
            x = block(x, x0)
        logits = self.lm_head(muon_gpt_norm(x))
        return (30 * torch.tanh(logits / 30)).float()


def muon_gpt_optimizers(model: MuonGPT, lr: float) -> tuple[torch.optim.Adam, torch.optim.Muon]:
    """modded-nanogpt's two optimizers: Adam (betas (0.8, 0.95), eps 1e-10) over the embedding, the
    scalars and the head, and `torch.optim.Muon` (lr `lr`, momentum 0.95 Nesterov, 5 Newton-Schulz
    steps, its `original` shape scaling √max(1, rows/cols) as modded-nanogpt's Muon, no weight decay)
    over every block's 2-D matrices. The Adam lrs are modded-nanogpt's relative to Muon's (embed
    0.6, head 0.008, scalars 0.04 against Muon's 0.05), so an lr factor moves all of them. Groups
    are tagged with their unit (`layer`): embed, lm_head, and each block's scalars in Adam; each
    block's matrices in Muon (modded-nanogpt keeps one group of each kind; one a block here, at
    the same lrs, so that one block's lr can be changed)."""
    ratio = lr / MUON_GPT_MUON_LR
    adam_groups = [{"params": [model.embed.weight], "lr": MUON_GPT_EMBED_LR * ratio, "layer": "embed"}]
    muon_groups = []
    for unit in model.hidden:
        block = model.get_submodule(unit)
        adam_groups.append({"params": [p for p in block.parameters() if p.ndim < 2],
                            "lr": MUON_GPT_SCALAR_LR * ratio, "layer": unit})
        muon_groups.append({"params": [p for p in block.parameters() if p.ndim == 2], "lr": lr, "layer": unit})
    adam_groups.append({"params": [model.lm_head.weight], "lr": MUON_GPT_HEAD_LR * ratio, "layer": "lm_head"})
    adam = torch.optim.Adam(adam_groups, betas=MUON_GPT_BETAS, eps=MUON_GPT_EPS, weight_decay=0.0)
    muon = torch.optim.Muon(muon_groups, lr=lr, weight_decay=0.0, momentum=MUON_GPT_MOMENTUM[1], nesterov=True,
                            ns_steps=5, adjust_lr_fn="original")
    return adam, muon


def muon_gpt_momentum(step: int, warmup: int) -> float:
    """modded-nanogpt's Muon momentum warm-up: `frac = min(step / warmup, 1)`, momentum
    (1 − frac) · 0.85 + frac · 0.95 (its 300 steps of ~1400)."""
    frac = min(step / warmup, 1.0)
    start, end = MUON_GPT_MOMENTUM
    return (1 - frac) * start + frac * end
DEEPLAB_CLASSES = 5
"""The VOC-like toy's classes: background 0 and four shapes (`data.VOC_SHAPES`); void pixels are 255."""
DEEPLAB_VOID = 255
"""torchvision's segmentation `criterion`'s `ignore_index` (VOC's boundary band)."""
DEEPLAB_RATES = (1, 2, 3)
"""The ASPP's atrous rates: torchvision's `DeepLabHead` takes (12, 24, 36) at output stride 8 on
VOC's 480-pixel crops, ~60-pixel feature maps (a fifth to three fifths of the map's width); the
40-pixel crops here give 5 × 5 features at output stride 8, so the same fractions are 1, 2, 3 (at 12
every 3 × 3 tap but the centre reads padding)."""
DEEPLAB_AUX_WEIGHT = 0.5
"""torchvision's `criterion`: `losses["out"] + 0.5 * losses["aux"]`."""
DEEPLAB_AUX_LR = 10.0
"""train.py's `params_to_optimize`: the aux classifier's group at `lr * 10`."""


class DeepLabBottleneck(nn.Module):
    """torchvision's ResNet `Bottleneck` (1 × 1, 3 × 3 with stride and dilation, 1 × 1 at ×4
    width, each followed by BatchNorm; the identity or a strided 1 × 1 + BN downsample)."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None,
                 dilation: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=dilation, dilation=dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class DeepLabBackbone(nn.Module):
    """torchvision's `resnet50(replace_stride_with_dilation=[False, True, True])` under an
    `IntermediateLayerGetter(return_layers={"layer4": "out", "layer3": "aux"})`, small: (1, 1, 2, 2)
    Bottlenecks a stage (two in the dilated stages: a stage's first block keeps the previous
    dilation, as torchvision's, so one block would leave layer3 undilated), widths (8, 16, 32, 64) × 4;
    the 7 × 7 stride-2 stem and the max-pool, layer2 at stride 2, layer3 and layer4 dilated (2, 4)
    instead of strided: output stride 8. Init as
    torchvision's ResNet (Kaiming normal, fan_out, on the convs; BN weight 1, bias 0)."""

    def __init__(self, widths: tuple[int, ...] = (8, 16, 32, 64), blocks: tuple[int, ...] = (1, 1, 2, 2),
                 replace_stride_with_dilation: tuple[bool, bool, bool] = (False, True, True)) -> None:
        super().__init__()
        self.inplanes, self.dilation = 16, 1
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(widths[0], blocks[0], stride=1)
        self.layer2 = self._make_layer(widths[1], blocks[1], stride=2, dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(widths[2], blocks[2], stride=2, dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(widths[3], blocks[3], stride=2, dilate=replace_stride_with_dilation[2])
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, planes: int, blocks: int, stride: int, dilate: bool = False) -> nn.Sequential:
        """torchvision's `_make_layer`: a dilated stage keeps stride 1 and multiplies the dilation by
        the stride it dropped; its first block takes the previous dilation, the others the new one."""
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self.inplanes != planes * DeepLabBottleneck.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * DeepLabBottleneck.expansion, 1, stride=stride,
                                                 bias=False), nn.BatchNorm2d(planes * DeepLabBottleneck.expansion))
        layers = [DeepLabBottleneck(self.inplanes, planes, stride, downsample, previous_dilation)]
        self.inplanes = planes * DeepLabBottleneck.expansion
        layers += [DeepLabBottleneck(self.inplanes, planes, dilation=self.dilation) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        aux = self.layer3(self.layer2(self.layer1(x)))
        return {"out": self.layer4(aux), "aux": aux}


class ASPPConv(nn.Sequential):
    def __init__(self, cin: int, cout: int, dilation: int) -> None:
        super().__init__(nn.Conv2d(cin, cout, 3, padding=dilation, dilation=dilation, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


class ASPPPooling(nn.Sequential):
    """The image-pooling branch: global average pool, 1 × 1 conv, BN, ReLU, bilinearly upsampled
    back to the feature map (align_corners=False)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size = x.shape[-2:]
        for module in self:
            x = module(x)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


class ASPP(nn.Module):
    """torchvision's `ASPP`: a 1 × 1 conv branch, one atrous 3 × 3 branch a rate, the image-pooling
    branch, concatenated and projected by 1 × 1 conv + BN + ReLU + Dropout(0.5)."""

    def __init__(self, cin: int, rates: tuple[int, ...], cout: int = 64) -> None:
        super().__init__()
        self.convs = nn.ModuleList([nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()),
                                    *(ASPPConv(cin, cout, rate) for rate in rates), ASPPPooling(cin, cout)])
        self.project = nn.Sequential(nn.Conv2d(len(self.convs) * cout, cout, 1, bias=False), nn.BatchNorm2d(cout),
                                     nn.ReLU(), nn.Dropout(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(torch.cat([conv(x) for conv in self.convs], dim=1))


class DeepLabHead(nn.Sequential):
    """torchvision's `DeepLabHead`: ASPP, 3 × 3 conv + BN + ReLU, a 1 × 1 conv to the classes."""

    def __init__(self, cin: int, classes: int, rates: tuple[int, ...] = DEEPLAB_RATES, width: int = 64) -> None:
        super().__init__(ASPP(cin, rates, width), nn.Conv2d(width, width, 3, padding=1, bias=False),
                         nn.BatchNorm2d(width), nn.ReLU(), nn.Conv2d(width, classes, 1))


class FCNHead(nn.Sequential):
    """torchvision's `FCNHead` (the aux classifier): 3 × 3 conv to a quarter of the channels, BN,
    ReLU, Dropout(0.1), a 1 × 1 conv to the classes."""

    def __init__(self, cin: int, classes: int) -> None:
        inter = cin // 4
        super().__init__(nn.Conv2d(cin, inter, 3, padding=1, bias=False), nn.BatchNorm2d(inter), nn.ReLU(),
                         nn.Dropout(0.1), nn.Conv2d(inter, classes, 1))


class DeepLabV3(nn.Module):
    """torchvision's `DeepLabV3` (`_SimpleSegmentationModel`) with `aux_loss=True`: the backbone's
    "out" features through the DeepLab head, its "aux" (layer3) features through the FCN head, each
    upsampled bilinearly (align_corners=False) to the input's size; returns the dict {"out", "aux"}
    of (B, classes, H, W) logits."""

    def __init__(self, classes: int = DEEPLAB_CLASSES) -> None:
        super().__init__()
        self.backbone = DeepLabBackbone()
        self.classifier = DeepLabHead(self.backbone.layer4[-1].conv3.out_channels, classes)
        self.aux_classifier = FCNHead(self.backbone.layer3[-1].conv3.out_channels, classes)
        self.units = ["backbone.conv1", "backbone.bn1", "backbone.layer1", "backbone.layer2", "backbone.layer3",
                      "backbone.layer4", "classifier", "aux_classifier"]
        self.hidden = ["backbone.layer1", "backbone.layer2", "backbone.layer3", "backbone.layer4"]
        self.exposed = ["classifier.4", "aux_classifier.4"]  # every other conv is followed by a BatchNorm

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        size = x.shape[-2:]
        features = self.backbone(x)
        result = {}
        for name, head in (("out", self.classifier), ("aux", self.aux_classifier)):
            result[name] = F.interpolate(head(features[name]), size=size, mode="bilinear", align_corners=False)
        return result


def deeplab_criterion(inputs: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
    """references/segmentation/train.py's `criterion`: cross-entropy (ignore_index 255) on each
    output, `out` + 0.5 × `aux`."""
    losses = {name: F.cross_entropy(x, target, ignore_index=DEEPLAB_VOID) for name, x in inputs.items()}
    if len(losses) == 1:
        return losses["out"]
    return losses["out"] + DEEPLAB_AUX_WEIGHT * losses["aux"]


def deeplab_params_to_optimize(model: DeepLabV3, lr: float, weight_decay: float) -> list[dict]:
    """train.py's `params_to_optimize` (backbone, classifier, aux_classifier at lr × 10; the
    optimizer's weight decay on every parameter: no norm exemption in the segmentation reference),
    split one group a unit (the same SGD updates: SGD's step is per parameter) so that a unit's lr
    can be changed, each group tagged with its unit."""
    return [{"params": [p for p in model.get_submodule(unit).parameters() if p.requires_grad],
             "lr": lr * (DEEPLAB_AUX_LR if unit == "aux_classifier" else 1.0), "weight_decay": weight_decay,
             "layer": unit} for unit in model.units]


def deeplab_confusion_matrix(target: torch.Tensor, prediction: torch.Tensor, classes: int) -> torch.Tensor:
    """torchvision's `utils.ConfusionMatrix.update`: rows the true class, columns the predicted,
    pixels whose target is outside [0, classes) (void, 255) skipped."""
    a, b = target.flatten(), prediction.flatten()
    k = (a >= 0) & (a < classes)
    return torch.bincount(classes * a[k] + b[k], minlength=classes ** 2).reshape(classes, classes)


def deeplab_scores(confusion: torch.Tensor) -> tuple[float, float]:
    """`ConfusionMatrix.compute`: (global pixel accuracy, mean IoU over the classes)."""
    h = confusion.double()
    diag = torch.diag(h)
    iu = diag / (h.sum(1) + h.sum(0) - diag)
    return float(diag.sum() / h.sum()), float(iu.mean())


def deeplab_evaluate(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, batch: int = 100) -> dict[str, float]:
    """train.py's `evaluate`: eval mode, no gradient, `model(image)["out"].argmax(1)` into the
    confusion matrix over the held-out images; their pixel accuracy and mean IoU."""
    was_training = model.training
    model.eval()
    classes = None
    confusion = None
    with torch.no_grad():
        for start in range(0, len(images), batch):
            out = model(images[start:start + batch])["out"]
            classes = out.shape[1]
            part = deeplab_confusion_matrix(targets[start:start + batch], out.argmax(1), classes)
            confusion = part if confusion is None else confusion + part
    model.train(was_training)
    accuracy, miou = deeplab_scores(confusion)
    return {"val_miou": miou, "val_pixel_accuracy": accuracy}


# ---- decision_transformer: Hugging Face's DecisionTransformerModel, as kzl/decision-transformer's gym experiment trains it


DT_TARGET_RETURN = -5.0
"""The return the evaluation rollouts are conditioned on (the gym experiment's `env_targets`, e.g.
hopper's 3600, near its datasets' best): the clean scripted controller's median return on this task
(−5.1; the offline data's median −10, its best decile above −3.2; uniformly random forces −81)."""
DT_EVAL_EPISODES = 16
"""Episodes each evaluation rolls out (the experiment's `num_eval_episodes` 100), the same starts every time."""


class DecisionTransformer(nn.Module):
    """Hugging Face's `DecisionTransformerModel` from a small `DecisionTransformerConfig` (built, not
    downloaded; its GPT-2 `encoder` with ReLU MLPs and dropout 0.1, `embed_timestep` / `embed_return`
    / `embed_state` / `embed_action`, `embed_ln`, `predict_action` with tanh, HF's GPT-2 init), as
    `dt`. `forward(batch)` takes the dict batch of `decision_transformer_sampler` and returns the
    (B, K, act_dim) predicted actions with the attention mask (int64) for `dt_action_loss`; the
    state and return heads are computed by the model and unused, as the experiment's action-only
    loss leaves them (and the encoder's `wte`, which no call reads)."""

    def __init__(self, state_dim: int = POINT_REACH.state_dim, act_dim: int = POINT_REACH.act_dim,
                 hidden: int = 64, layers: int = 3, heads: int = 1, max_ep_len: int = POINT_REACH.max_ep_len,
                 dropout: float = 0.1) -> None:
        super().__init__()
        from transformers import DecisionTransformerConfig, DecisionTransformerModel

        config = DecisionTransformerConfig(state_dim=state_dim, act_dim=act_dim, hidden_size=hidden, n_layer=layers,
                                           n_head=heads, n_inner=4 * hidden, activation_function="relu",
                                           max_ep_len=max_ep_len, action_tanh=True, resid_pdrop=dropout,
                                           embd_pdrop=dropout, attn_pdrop=dropout, bos_token_id=None,
                                           eos_token_id=None)
        self.dt = DecisionTransformerModel(config)
        blocks = [f"dt.encoder.h.{i}" for i in range(layers)]
        self.units = ["dt.embed_state", "dt.embed_action", "dt.embed_return", "dt.embed_timestep", "dt.embed_ln",
                      "dt.encoder.wte", "dt.encoder.wpe", *blocks, "dt.encoder.ln_f", "dt.predict_return",
                      "dt.predict_state", "dt.predict_action"]
        self.hidden = blocks
        # predict_action's Linear (a tanh after it, no norm); the last block's fused q/k/v (attention
        # logits and values scale with it). Every other layer's output meets embed_ln, a block's
        # ln_1 / ln_2 or ln_f on its way to the action.
        self.exposed = ["dt.predict_action.0", f"{blocks[-1]}.attn.c_attn"]
        self.decay_everything = True  # experiment.py's AdamW(model.parameters(), weight_decay=1e-4)

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.dt(states=batch["states"], actions=batch["actions"], returns_to_go=batch["returns_to_go"],
                      timesteps=batch["timesteps"], attention_mask=batch["attention_mask"])
        return out.action_preds, batch["attention_mask"]


def dt_action_loss(output: tuple[torch.Tensor, torch.Tensor], action_target: torch.Tensor) -> torch.Tensor:
    """`SequenceTrainer.train_step`'s loss: the predicted and target actions reshaped to
    (B · K, act_dim), kept where `attention_mask > 0`, their mean squared error."""
    action_preds, attention_mask = output
    act_dim = action_preds.shape[2]
    keep = attention_mask.reshape(-1) > 0
    return torch.mean((action_preds.reshape(-1, act_dim)[keep] - action_target.reshape(-1, act_dim)[keep]) ** 2)


def dt_rollouts(model: nn.Module, state_mean: np.ndarray, state_std: np.ndarray, episodes: int = DT_EVAL_EPISODES,
                target_return: float = DT_TARGET_RETURN, seed: int = 2_000) -> np.ndarray:
    """experiment.py's `evaluate_episode_rtg` for `episodes` episodes at once (eval mode, no
    gradient): each step the model reads the last K normalised states, actions (the new step's
    a zero), returns-to-go (the target, less each reward / `scale` as it comes: mode "normal") and
    timesteps, left-padded as `get_action` pads (zeros, mask 0), and its last predicted action is
    taken; an episode's return stops counting once it is done. Returns each episode's return."""
    spec, K = POINT_REACH, POINT_REACH.context
    env = PointReach(seed, episodes)
    state = env.reset()
    mean, std = torch.tensor(state_mean, dtype=torch.float32), torch.tensor(state_std, dtype=torch.float32)
    states = ((torch.from_numpy(state) - mean) / std)[:, None]
    actions = torch.zeros(episodes, 0, spec.act_dim)
    rtg = torch.full((episodes, 1, 1), target_return / spec.scale)
    timesteps = torch.zeros(episodes, 1, dtype=torch.int64)
    alive, returns = np.ones(episodes, dtype=bool), np.zeros(episodes)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for t in range(spec.max_steps):
            actions = torch.cat([actions, torch.zeros(episodes, 1, spec.act_dim)], 1)
            length = min(K, states.shape[1])
            pad = K - length
            batch = {"states": torch.cat([torch.zeros(episodes, pad, spec.state_dim), states[:, -length:]], 1),
                     "actions": torch.cat([torch.zeros(episodes, pad, spec.act_dim), actions[:, -length:]], 1),
                     "returns_to_go": torch.cat([torch.zeros(episodes, pad, 1), rtg[:, -length:]], 1),
                     "timesteps": torch.cat([torch.zeros(episodes, pad, dtype=torch.int64), timesteps[:, -length:]], 1),
                     "attention_mask": torch.cat([torch.zeros(episodes, pad, dtype=torch.int64),
                                                  torch.ones(episodes, length, dtype=torch.int64)], 1)}
            action = model(batch)[0][:, -1].float()
            actions[:, -1] = action
            state, reward, done = env.step(action.numpy().astype(np.float64))
            returns += reward * alive
            alive &= ~done
            if not alive.any():
                break
            states = torch.cat([states, ((torch.from_numpy(state) - mean) / std)[:, None]], 1)
            rtg = torch.cat([rtg, rtg[:, -1:] - torch.from_numpy(reward.astype(np.float32))[:, None, None] / spec.scale], 1)
            timesteps = torch.cat([timesteps, torch.full((episodes, 1), min(t + 1, spec.max_ep_len - 1))], 1)
    model.train(was_training)
    return returns


def dt_random_return(episodes: int = DT_EVAL_EPISODES, seed: int = 2_000) -> float:
    """The mean return of uniformly random forces on the evaluation's starts (chance for the return)."""
    env, rng = PointReach(seed, episodes), np.random.default_rng(seed + 1)
    env.reset()
    alive, returns = np.ones(episodes, dtype=bool), np.zeros(episodes)
    for _ in range(POINT_REACH.max_steps):
        _, reward, done = env.step(rng.uniform(-1, 1, (episodes, POINT_REACH.act_dim)))
        returns += reward * alive
        alive &= ~done
    return float(returns.mean())
PATCHTST_PATCH_LEN = 16
"""PatchTST's patch length (its scripts' `--patch_len 16`)."""
PATCHTST_STRIDE = 8
"""PatchTST's stride between patches (its scripts' `--stride 8`): patches overlap by half."""


class RevIN(nn.Module):
    """Kim et al.'s reversible instance normalisation as PatchTST's `layers/RevIN.py` writes it:
    `forward(x, "norm")` takes each sample's per-channel mean and std (biased, + `eps` under the
    root) over the look-back, detached, keeps them, normalises and applies the learnable affine
    (`affine_weight`, `affine_bias`, one a channel); `forward(x, "denorm")` undoes the affine
    (÷ (weight + eps²)) and the statistics on the forecast. `subtract_last` off (the scripts'
    default): the centre is the mean, not the last value. x is (B, L, C)."""

    def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__()
        self.eps, self.affine = eps, affine
        if affine:
            self.affine_weight = nn.Parameter(torch.ones(num_features))
            self.affine_bias = nn.Parameter(torch.zeros(num_features))
        self.mean: torch.Tensor | None = None
        self.stdev: torch.Tensor | None = None

    def forward(self, x: torch.Tensor, mode: str) -> torch.Tensor:
        if mode == "norm":
            self.mean = x.mean(1, keepdim=True).detach()
            self.stdev = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + self.eps).detach()
            x = (x - self.mean) / self.stdev
            return x * self.affine_weight + self.affine_bias if self.affine else x
        if mode == "denorm":
            if self.affine:
                x = (x - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
            return x * self.stdev + self.mean
        raise ValueError(f"RevIN mode {mode!r}")


class PatchTSTPatchify(nn.Module):
    """`padding_patch="end"`: `nn.ReplicationPad1d((0, stride))` repeats each channel's last value
    `stride` times, then `unfold(-1, patch_len, stride)`: (B, C, L) → (B, C, patches, patch_len),
    patches = (L − patch_len) / stride + 2."""

    def __init__(self, patch_len: int = PATCHTST_PATCH_LEN, stride: int = PATCHTST_STRIDE) -> None:
        super().__init__()
        self.patch_len, self.stride = patch_len, stride
        self.pad = nn.ReplicationPad1d((0, stride))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.pad(z).unfold(-1, self.patch_len, self.stride)


class PatchTSTPositionalEncoding(nn.Module):
    """The original's `positional_encoding("zeros", learn_pe=True, ...)`: a learned (patches, d_model)
    table initialised uniform in ±0.02, added to the patch embeddings before the residual dropout."""

    def __init__(self, patches: int, d_model: int, dropout: float) -> None:
        super().__init__()
        self.position_enc = nn.Parameter(torch.empty(patches, d_model).uniform_(-0.02, 0.02))
        self.positional_dropout = nn.Dropout(dropout)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return self.positional_dropout(u + self.position_enc)


class PatchTSTBatchNorm(nn.Module):
    """`norm="BatchNorm"`: `Transpose(1, 2)`, `nn.BatchNorm1d(d_model)`, `Transpose(1, 2)`: each
    feature normalised over every (sample × channel) sequence and every patch of the batch."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.batchnorm = nn.BatchNorm1d(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.batchnorm(x.transpose(1, 2)).transpose(1, 2)


class PatchTSTAttention(nn.Module):
    """The original's `_MultiheadAttention` with `_ScaledDotProductAttention` and `res_attention=True`:
    q, k, v projections with biases, scores q·kᵀ × head_dim^−½ plus the previous layer's scores
    (`prev`, before their softmax), softmax, attention dropout, `to_out` (Linear, dropout); returns
    the output and this layer's scores for the next. (Its scale is an `nn.Parameter` with
    `requires_grad=False` where `lsa` is off: a constant here.)"""

    def __init__(self, d_model: int, heads: int, attn_dropout: float = 0.0, proj_dropout: float = 0.0) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.W_Q = nn.Linear(d_model, d_model)
        self.W_K = nn.Linear(d_model, d_model)
        self.W_V = nn.Linear(d_model, d_model)
        self.attn_dropout = nn.Dropout(attn_dropout)
        self.to_out = nn.Sequential(nn.Linear(d_model, d_model), nn.Dropout(proj_dropout))
        self.scale = self.head_dim ** -0.5

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        bs, n, _ = x.shape
        q = self.W_Q(x).view(bs, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.W_K(x).view(bs, n, self.heads, self.head_dim).permute(0, 2, 3, 1)
        v = self.W_V(x).view(bs, n, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k) * self.scale
        if prev is not None:
            scores = scores + prev
        weights = self.attn_dropout(F.softmax(scores, dim=-1))
        out = torch.matmul(weights, v).transpose(1, 2).reshape(bs, n, self.heads * self.head_dim)
        return self.to_out(out), scores


class PatchTSTEncoderLayer(nn.Module):
    """The original's `TSTEncoderLayer`, post-norm (`pre_norm=False`): x + dropout(attention(x)) →
    BatchNorm, then x + dropout(ff(x)) → BatchNorm, ff = Linear(d, d_ff) → GELU → dropout → Linear(d_ff, d)."""

    def __init__(self, d_model: int, heads: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = PatchTSTAttention(d_model, heads, proj_dropout=dropout)
        self.dropout_attn = nn.Dropout(dropout)
        self.norm_attn = PatchTSTBatchNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))
        self.dropout_ffn = nn.Dropout(dropout)
        self.norm_ffn = PatchTSTBatchNorm(d_model)

    def forward(self, src: torch.Tensor, prev: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        attended, scores = self.self_attn(src, prev)
        src = self.norm_attn(src + self.dropout_attn(attended))
        src = self.norm_ffn(src + self.dropout_ffn(self.ff(src)))
        return src, scores


class PatchTSTEncoder(nn.Module):
    """The original's `TSTiEncoder` ("i": channel-independent) in the Hugging Face port's layout:
    `embedder` (W_P, Linear(patch_len, d_model)) of every patch, `positional_encoder`, `layers`
    (residual attention: each layer's scores passed to the next)."""

    def __init__(self, patches: int, patch_len: int, d_model: int, heads: int, d_ff: int, layers: int,
                 dropout: float) -> None:
        super().__init__()
        self.embedder = nn.Linear(patch_len, d_model)
        self.positional_encoder = PatchTSTPositionalEncoding(patches, d_model, dropout)
        self.layers = nn.ModuleList(PatchTSTEncoderLayer(d_model, heads, d_ff, dropout) for _ in range(layers))

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """(B, C, patches, patch_len) → (B, C, patches, d_model), each channel its own sequence."""
        bs, channels = patches.shape[:2]
        x = self.embedder(patches)
        u = self.positional_encoder(x.reshape(bs * channels, *x.shape[2:]))
        scores = None
        for layer in self.layers:
            u, scores = layer(u, scores)
        return u.reshape(bs, channels, *u.shape[1:])


class PatchTSTHead(nn.Module):
    """The original's `Flatten_Head` (`individual=False`): each channel's (d_model × patches)
    features, d_model-major as `Flatten(start_dim=-2)` reads them, through one shared
    `projection` Linear to the horizon, then `head_dropout` (0, its scripts' default)."""

    def __init__(self, features: int, horizon: int, head_dropout: float = 0.0) -> None:
        super().__init__()
        self.projection = nn.Linear(features, horizon)
        self.dropout = nn.Dropout(head_dropout)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.projection(z.transpose(-1, -2).flatten(-2)))


class PatchTST(nn.Module):
    """Nie et al.'s PatchTST, supervised (yuqinie98/PatchTST's `PatchTST_backbone`, names after the
    Hugging Face port where the original's are flat): (B, L, C) look-back → RevIN norm → (B, C, L)
    → end-padded overlapping patches → channel-independent Transformer encoder (shared weights, each
    channel a sequence of patches) → flatten head → (B, C, H) → (B, H, C) → RevIN denorm. ETTh1's
    script's sizes: d_model 16, 4 heads, 3 layers, d_ff 128, dropout 0.3, head dropout 0.

    Units: the RevIN affine, the patch embedding, the positions, each encoder layer, the head;
    hidden: the encoder layers; exposed: the head's projection (the forecast before denorm, no
    normalisation after it: behind the post-norm BatchNorms a scaled embedding or ff is normalised).
    RevIN's affine reaches the forecast around the blocks (its denorm: `field.TIED`)."""

    def __init__(self, channels: int, lookback: int, horizon: int, patch_len: int = PATCHTST_PATCH_LEN,
                 stride: int = PATCHTST_STRIDE, d_model: int = 16, heads: int = 4, d_ff: int = 128, layers: int = 3,
                 dropout: float = 0.3) -> None:
        super().__init__()
        patches = (lookback - patch_len) // stride + 1 + 1  # + 1: padding_patch="end"
        self.revin = RevIN(channels)
        self.patchify = PatchTSTPatchify(patch_len, stride)
        self.encoder = PatchTSTEncoder(patches, patch_len, d_model, heads, d_ff, layers, dropout)
        self.head = PatchTSTHead(d_model * patches, horizon)
        self.patches = patches
        self.units = ["revin", "encoder.embedder", "encoder.positional_encoder",
                      *(f"encoder.layers.{i}" for i in range(layers)), "head"]
        self.hidden = [f"encoder.layers.{i}" for i in range(layers)]
        self.exposed = ["head.projection"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.revin(x, "norm").permute(0, 2, 1)
        z = self.head(self.encoder(self.patchify(z)))
        return self.revin(z.permute(0, 2, 1), "denorm")


def patchtst_evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 256) -> dict[str, float]:
    """The original's `test` metrics on the standardised held-out windows: MSE and MAE over every
    window, step and channel (eval mode, no gradient)."""
    was_training = model.training
    model.eval()
    squared, absolute = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, len(x), batch):
            error = model(x[start:start + batch]).float() - y[start:start + batch]
            squared += float((error ** 2).sum())
            absolute += float(error.abs().sum())
    model.train(was_training)
    return {"val_mse": squared / y.numel(), "val_mae": absolute / y.numel()}


class TimmBasicBlock(nn.Module):
    """timm's `BasicBlock` (expansion 1, no SE, drop-block or drop-path): conv1 3×3 (the stride) →
    bn1 → act1 → conv2 3×3 → bn2, plus the shortcut (`downsample`: 1×1 conv + BN where the shape
    changes), then act2. `zero_init_last` sets bn2's weight to 0: the block starts as its shortcut."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.act2 = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def zero_init_last(self) -> None:
        nn.init.zeros_(self.bn2.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        x = self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x)))))
        return self.act2(x + shortcut)


class TimmResNet(nn.Module):
    """timm's `ResNet` layout, small for 16×16 colour patterns: a flat stem (`conv1` 3×3 stride 1,
    `bn1`, `act1`; timm's default 7×7 stride-2 conv and max-pool would leave 4×4 maps), stages
    `layer1`–`layer3` of `blocks` `TimmBasicBlock`s each at `widths` (strides 1, 2, 2), global
    average pooling (`global_pool`), `fc`. timm's `init_weights`: every conv Kaiming-normal
    (fan-out, ReLU), BN at 1 and 0, the `fc` at torch's default, then `zero_init_last` on every block."""

    def __init__(self, classes: int = 4, widths: tuple[int, ...] = (16, 32, 64), blocks: int = 1,
                 channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.act1 = nn.ReLU(inplace=True)
        inplanes, names = widths[0], []
        for i, planes in enumerate(widths):
            stage = []
            for j in range(blocks):
                stage.append(TimmBasicBlock(inplanes, planes, stride=(1 if i == 0 else 2) if j == 0 else 1))
                inplanes = planes
                names.append(f"layer{i + 1}.{j}")
            setattr(self, f"layer{i + 1}", nn.Sequential(*stage))
        self.stages = len(widths)
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(inplanes, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        for module in self.modules():
            if hasattr(module, "zero_init_last"):
                module.zero_init_last()
        self.units = ["conv1", "bn1", *names, "fc"]
        self.hidden = names
        # The logits: every conv meets a BatchNorm next (the stem's, each block's bn1 / bn2 / downsample's).
        self.exposed = ["fc"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.bn1(self.conv1(x)))
        for i in range(self.stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(self.global_pool(x).flatten(1))


def timm_top1(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """timm's `validate` top-1 (%) over held-out images, in eval mode without gradient (its
    `accuracy(output, target, topk=(1,))`), the model's mode restored after."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        top1 = 100.0 * float((model(x).argmax(1) == y).float().mean())
    model.train(was_training)
    return top1


class SwaGcResNet(TimmResNet):
    """`TimmResNet` (timm's layout and init: `conv1`, `bn1`, `act1`, `layer1`–`layer3` of one
    `TimmBasicBlock` each at 16 / 32 / 64 channels, `global_pool`, `fc`; ~78k parameters) with
    timm's `set_grad_checkpointing()`: while training (`self.training`, Hugging Face's
    `self.gradient_checkpointing and self.training`), each stage runs as
    `torch.utils.checkpoint.checkpoint(stage, x, use_reentrant=False)`, its activations dropped
    after the forward and the stage's forward run again inside backward to rebuild them (its
    BatchNorms' running statistics updated by both runs, as under torch's checkpoint they are);
    an eval-mode forward runs the stages plainly."""

    def __init__(self, classes: int = 4, widths: tuple[int, ...] = (16, 32, 64), blocks: int = 1,
                 channels: int = 3) -> None:
        super().__init__(classes=classes, widths=widths, blocks=blocks, channels=channels)
        self.grad_checkpointing = False
        self.set_grad_checkpointing(True)
        # The SWA docstring's `SGD(model.parameters(), ...)`: one weight decay on every parameter.
        self.decay_everything = True

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """timm's `model.set_grad_checkpointing(enable)`."""
        self.grad_checkpointing = enable

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        x = self.act1(self.bn1(self.conv1(x)))
        for i in range(self.stages):
            stage = getattr(self, f"layer{i + 1}")
            if self.grad_checkpointing and self.training:
                x = checkpoint(stage, x, use_reentrant=False)
            else:
                x = stage(x)
        return self.fc(self.global_pool(x).flatten(1))


def swa_gc_top1(model: nn.Module, swa_model: nn.Module, loader, x: torch.Tensor, y: torch.Tensor) -> float:
    """The held-out top-1 (%) the SWA recipe reports: once `swa_model` (an `AveragedModel`) has
    averaged anything (`n_averaged` > 0), `torch.optim.swa_utils.update_bn(loader, swa_model)` (its
    BatchNorms' statistics reset and recomputed over one pass of the training loader, in train mode
    under `no_grad`), then the SWA model's top-1 in eval mode (`timm_top1`); before that, the
    model's own top-1."""
    if int(swa_model.n_averaged) == 0:
        return timm_top1(model, x, y)
    torch.optim.swa_utils.update_bn(loader, swa_model)
    return timm_top1(swa_model, x, y)


AGP_START = 30
"""Zhu & Gupta's t0 for the pruning (their "starting step"): 20 % of a 150-step run."""
AGP_EVERY = 5
"""Their Δt, steps between pruning events (the paper's 100-1000 of a run of tens of thousands)."""
AGP_EVENTS = 15
"""Their n: the last pruning event at t0 + n Δt = step 105, 70 % of a 150-step run."""
AGP_INITIAL_SPARSITY = 0.0
"""Their s_i (Distiller's `initial_sparsity`; the AGP examples' 0.05 for some layers, 0 here)."""
AGP_FINAL_SPARSITY = 0.875
"""Their s_f: 87.5 %, the paper's Table 1 and 2 level for most of its models."""


class AGPVGG(nn.Module):
    """A small VGG in Distiller's `distiller/models/cifar10/vgg_cifar.py` layout (torchvision's
    `make_layers` with batch norm: `features` is one flat `nn.Sequential` of 3×3 convs (with
    bias, padding 1) each followed by a `BatchNorm2d` and a ReLU, and 2×2 max-pools at `'M'`;
    then `x.view(x.size(0), -1)` and one `nn.Linear` `classifier`), sized for the 8×8 digits:
    `cfg` (16, M, 32, M, 64, M) pools them to 1×1×64 as vgg_cifar's five pools take 32×32 CIFAR
    to 1×1×512. Distiller's `_initialize_weights`: convs Kaiming-normal (fan-out, ReLU) with bias
    0, BN 1 and 0, the linear layer N(0, 0.01) with bias 0. 23 824 prunable weights.

    What the faults hit, once pruned (every fault's t0, 40-100, comes after the first event at step
    30): the module's only Parameter is then `weight_orig` (the same tensor object as the `weight`
    it was: `prune` re-registers it, so the optimizer's groups and momentum keep it), and its
    `weight` a plain tensor recomputed as `weight_orig * weight_mask` by the forward pre-hook.
    `WeightScale` multiplies the module's parameters whose names start with "weight": `weight_orig`,
    as a bad checkpoint merge or re-init of the state dict would (its keys are `weight_orig` and
    `weight_mask`); the effective weight is scaled alike, its masked entries stay 0. At the events
    after t0 the global ranking then sees that layer ×100-300 and prunes the others instead (what a
    real run would do with such a layer). `LrSpike` raises the lr of a conv's group: it holds
    `weight_orig` (gradient 0 on masked entries, ∂L/∂weight · mask) and the bias. `DetachedLayer`
    hooks a conv's output; pruning goes on upstream of it on weights that no longer learn.
    `MissingStep` leaves the pruning events in place (the loop calls them, not the optimizer).

    Not the 16×16 colour patterns the other CNNs read: measured on the healthy loop (unrecorded,
    seeds 0-2), every VGG from widths (4, 8, 16) to (16, 32, 64, 64) fits them to a loss of
    0.001-0.01 by step 30, before the first pruning event, and 87.5 % sparsity leaves it there
    (widths (8, 16, 32, 32): the last 10 losses 0.001-0.004, no event moves the loss by more than
    0.01); only at widths (4, 8, 16) did the events show, as jumps from 0.002 to 0.5. On the
    digits the loss is 0.05-0.15 when pruning starts; the heavy early events lift its 5-step means
    (healthy seed 0: 0.04 at steps 50-54, 0.14-0.16 over 60-69) and it recovers (0.03 by 90), while
    step by step the events sit within the batch noise (docs/benchmarks.md, round 32).

    Its units are the convs, the norms and the classifier, each module its own (the flat
    `features.<i>` names); `hidden` the convs (an lr spike or a detach hits one); `exposed` the
    classifier: every conv meets a BatchNorm next. `prunable(model)` lists what `agp_prune` prunes:
    every conv's and the classifier's `weight`."""

    cfg = (16, "M", 32, "M", 64, "M")

    def __init__(self, classes: int = 10, channels: int = 1, image: int = 8) -> None:
        super().__init__()
        layers, inplanes, side = [], channels, image
        for v in self.cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
                side //= 2
            else:
                layers += [nn.Conv2d(inplanes, v, kernel_size=3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                inplanes = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(inplanes * side * side, classes)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                nn.init.constant_(module.bias, 0)
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.constant_(module.weight, 1)
                nn.init.constant_(module.bias, 0)
            elif isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, 0, 0.01)
                nn.init.constant_(module.bias, 0)
        convs = [f"features.{i}" for i, m in enumerate(self.features) if isinstance(m, nn.Conv2d)]
        norms = [f"features.{i}" for i, m in enumerate(self.features) if isinstance(m, nn.BatchNorm2d)]
        self.units = [name for pair in zip(convs, norms) for name in pair] + ["classifier"]
        self.hidden = convs
        self.exposed = ["classifier"]
        # Distiller's compress_classifier.py: torch.optim.SGD(model.parameters(), ..., weight_decay=args.weight_decay)
        self.decay_everything = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(x)
        return self.classifier(x.view(x.size(0), -1))


def prunable(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """`parameters_to_prune` as the PyTorch pruning tutorial's global example builds it: (module,
    "weight") of every conv and linear layer (biases and norms are left dense)."""
    return [(m, "weight") for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]


def agp_sparsity(step: int, start: int = AGP_START, every: int = AGP_EVERY, events: int = AGP_EVENTS,
                 initial: float = AGP_INITIAL_SPARSITY, final: float = AGP_FINAL_SPARSITY) -> float | None:
    """Zhu & Gupta's target sparsity s_t = s_f + (s_i − s_f)(1 − (t − t0)/(n Δt))³ at a pruning
    step (t ∈ {t0, t0 + Δt, …, t0 + n Δt}), None at every other step (Distiller's
    `AutomatedGradualPruner`, its `PruningPolicy` fired at `starting_epoch`, every `frequency`
    until `ending_epoch`)."""
    if step < start or step > start + events * every or (step - start) % every:
        return None
    return final + (initial - final) * (1 - (step - start) / (events * every)) ** 3


def global_sparsity(model: nn.Module) -> float:
    """The share of zeros over every prunable weight as the model computes it (`weight` =
    `weight_orig` × `weight_mask` once pruned): the tutorial's "Global sparsity"."""
    weights = [getattr(m, name) for m, name in prunable(model)]
    return float(sum(int((w == 0).sum()) for w in weights) / sum(w.numel() for w in weights))


def agp_prune(model: nn.Module, step: int, current: list[float]) -> float | None:
    """One AGP event at `step`, if it is one: the target sparsity s_t reached by
    `prune.global_unstructured(prunable(model), pruning_method=prune.L1Unstructured, amount=...)`.
    torch's `PruningContainer` takes a float `amount` as the share of the entries still unpruned
    (the weights already masked are not ranked again), so the amount for s_t after s_{t−Δt} is
    (s_t − s_{t−Δt}) / (1 − s_{t−Δt}); `current` holds s_{t−Δt} (one float, updated). The first
    event (s_i = 0) prunes nothing but installs the reparametrisation (`weight_orig`,
    `weight_mask`, the pre-hook) on every prunable module. torch ranks each module's `weight` as
    it is: once pruned, the tensor its pre-hook computed at the last forward (in the loop, which
    prunes at the top of a step, the previous step's forward: one optimizer update stale), as
    every loop that calls `prune` between steps ranks it. Returns s_t, or None off the events."""
    from torch.nn.utils import prune

    target = agp_sparsity(step)
    if target is None:
        return None
    amount = max(0.0, (target - current[0]) / (1 - current[0]))
    prune.global_unstructured(prunable(model), pruning_method=prune.L1Unstructured, amount=amount)
    current[0] = target
    return target


QAT_BACKEND = "qnnpack"
"""train_quantization.py's `--backend` default (one of `torch.backends.quantized.supported_engines`):
the qconfig's and the int8 copy's engine."""


def qat_conv_bn_relu(inp: int, oup: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """torchvision's `Conv2dNormActivation` as its quantizable MobileNetV2 builds it: `0` a bias-free
    conv (padding (k − 1) // 2), `1` BatchNorm, `2` ReLU (ReLU6 replaced, as `_replace_relu` does)."""
    return nn.Sequential(nn.Conv2d(inp, oup, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(oup), nn.ReLU(inplace=False))


class QatInvertedResidual(nn.Module):
    """torchvision's `QuantizableInvertedResidual`: a 1×1 expansion ConvBNReLU (where the ratio is not
    1), a depthwise 3×3 ConvBNReLU, a 1×1 linear projection conv + BN; the shortcut added through a
    `FloatFunctional` (`skip_add.add`: an observed, then int8, add) where stride 1 keeps the shape."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = inp * expand_ratio
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(qat_conv_bn_relu(inp, hidden, kernel=1))
        layers += [qat_conv_bn_relu(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)
        self.skip_add = torch.ao.nn.quantized.FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_res_connect:
            return self.skip_add.add(x, self.conv(x))
        return self.conv(x)

    def fuse_model(self, is_qat: bool) -> None:
        """torchvision's: the projection conv fused with its BN (`conv.<i>`, `conv.<i + 1>`)."""
        for idx in range(len(self.conv)):
            if type(self.conv[idx]) is nn.Conv2d:
                fuse = torch.ao.quantization.fuse_modules_qat if is_qat else torch.ao.quantization.fuse_modules
                fuse(self.conv, [str(idx), str(idx + 1)], inplace=True)


class QatMobileNetV2(nn.Module):
    """torchvision's `QuantizableMobileNetV2`, small for 16×16 colour patterns: `quant`
    (`QuantStub`), `features` (a 3×3 ConvBNReLU stem at stride 1, where MobileNetV2's stride 2
    would leave 8×8 maps before the first block; inverted residuals at (t, c, n, s) `settings`; a
    1×1 ConvBNReLU to `last_channel`), `adaptive_avg_pool2d`, `classifier` (Dropout 0.2, Linear),
    `dequant` (`DeQuantStub`). torchvision's init: convs Kaiming-normal fan-out, BN 1 and 0, the
    Linear normal(0, 0.01) with a zero bias. `fuse_model(is_qat)` fuses every ConvBNReLU (`0`,
    `1`, `2`) and every block's projection conv + BN, as torchvision's does."""

    def __init__(self, classes: int = 4, stem: int = 16,
                 settings: tuple[tuple[int, int, int, int], ...] = ((1, 8, 1, 1), (4, 16, 2, 2), (4, 24, 2, 2)),
                 last_channel: int = 64) -> None:
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        features: list[nn.Module] = [qat_conv_bn_relu(3, stem)]
        inp = stem
        for t, c, n, s in settings:
            for i in range(n):
                features.append(QatInvertedResidual(inp, c, s if i == 0 else 1, t))
                inp = c
        features.append(qat_conv_bn_relu(inp, last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last_channel, classes))
        self.dequant = torch.ao.quantization.DeQuantStub()
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)
        self.units = [f"features.{i}" for i in range(len(features))] + ["classifier"]
        self.hidden = [f"features.{i}" for i in range(1, len(features) - 1)]  # the inverted residuals
        # The logits: every conv meets a (fused) BatchNorm next.
        self.exposed = ["classifier.1"]
        # train_quantization.py's SGD(model.parameters(), weight_decay=1e-4): every parameter decays.
        self.decay_everything = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant(x)
        x = self.features(x)
        x = nn.functional.adaptive_avg_pool2d(x, (1, 1)).reshape(x.shape[0], -1)
        x = self.classifier(x)
        return self.dequant(x)

    def fuse_model(self, is_qat: bool) -> None:
        fuse = torch.ao.quantization.fuse_modules_qat if is_qat else torch.ao.quantization.fuse_modules
        for m in self.modules():
            if type(m) is nn.Sequential and len(m) == 3 and isinstance(m[0], nn.Conv2d) \
                    and isinstance(m[1], nn.BatchNorm2d) and isinstance(m[2], nn.ReLU):
                fuse(m, ["0", "1", "2"], inplace=True)
            elif type(m) is QatInvertedResidual:
                m.fuse_model(is_qat)


def qat_prepare(model: QatMobileNetV2, backend: str = QAT_BACKEND) -> QatMobileNetV2:
    """train_quantization.py's eager-mode QAT preparation, in place: `fuse_model(is_qat=True)`,
    `qconfig = get_default_qat_qconfig(backend)`, `prepare_qat`, then `enable_observer` and
    `enable_fake_quant` on every module (its loop's first lines)."""
    model.train()
    model.fuse_model(is_qat=True)
    model.qconfig = torch.ao.quantization.get_default_qat_qconfig(backend)
    torch.ao.quantization.prepare_qat(model, inplace=True)
    model.apply(torch.ao.quantization.enable_observer)
    model.apply(torch.ao.quantization.enable_fake_quant)
    return model


def qat_int8_top1(model: nn.Module, x: torch.Tensor, y: torch.Tensor, backend: str = QAT_BACKEND) -> float:
    """The reference's quantized evaluation: `copy.deepcopy(model)`, `eval()`, `convert(inplace=True)`
    to int8 modules, top-1 (%) on CPU under the `backend` engine (restored after)."""
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = backend
    try:
        quantized = copy.deepcopy(model)
        quantized.eval()
        torch.ao.quantization.convert(quantized, inplace=True)
        with torch.no_grad():
            return 100.0 * float((quantized(x).argmax(1) == y).float().mean())
    finally:
        torch.backends.quantized.engine = engine


def deq_anderson(f: Callable[[torch.Tensor], torch.Tensor], x0: torch.Tensor, m: int = 5, lam: float = 1e-4,
                 max_iter: int = 25, tol: float = 1e-2, beta: float = 1.0) -> tuple[torch.Tensor, list[float]]:
    """The "Deep Implicit Layers" tutorial's `anderson` (chapter 4): Anderson acceleration of the
    fixed-point iteration z ← f(z) from `x0`, a memory of `m` iterates, the least-squares mixing
    weights α from the bordered system [[0, 1ᵀ], [1, GGᵀ + λI]] (G the last residuals), β-damped;
    stops when ‖f(z) − z‖ / (1e-5 + ‖f(z)‖) < `tol` or after `max_iter` − 2 mixing steps (the two
    plain iterations that seed the memory first). Returns (z, the relative residual of each mixing
    step). `torch.linalg.solve` where the tutorial's torch 1.x called `torch.solve`."""
    bsz = x0.shape[0]
    d = x0[0].numel()
    X = torch.zeros(bsz, m, d, dtype=x0.dtype, device=x0.device)
    F_ = torch.zeros(bsz, m, d, dtype=x0.dtype, device=x0.device)
    X[:, 0], F_[:, 0] = x0.reshape(bsz, -1), f(x0).reshape(bsz, -1)
    X[:, 1], F_[:, 1] = F_[:, 0], f(F_[:, 0].view_as(x0)).reshape(bsz, -1)
    H = torch.zeros(bsz, m + 1, m + 1, dtype=x0.dtype, device=x0.device)
    H[:, 0, 1:] = H[:, 1:, 0] = 1
    y = torch.zeros(bsz, m + 1, 1, dtype=x0.dtype, device=x0.device)
    y[:, 0] = 1
    res: list[float] = []
    k = 1
    for k in range(2, max_iter):
        n = min(k, m)
        G = F_[:, :n] - X[:, :n]
        H[:, 1:n + 1, 1:n + 1] = torch.bmm(G, G.transpose(1, 2)) + lam * torch.eye(
            n, dtype=x0.dtype, device=x0.device)[None]
        alpha = torch.linalg.solve(H[:, :n + 1, :n + 1], y[:, :n + 1])[:, 1:n + 1, 0]  # (bsz, n)
        X[:, k % m] = beta * (alpha[:, None] @ F_[:, :n])[:, 0] + (1 - beta) * (alpha[:, None] @ X[:, :n])[:, 0]
        F_[:, k % m] = f(X[:, k % m].view_as(x0)).reshape(bsz, -1)
        res.append((F_[:, k % m] - X[:, k % m]).norm().item() / (1e-5 + F_[:, k % m].norm().item()))
        if res[-1] < tol:
            break
    return X[:, k % m].view_as(x0), res


class DEQResNetLayer(nn.Module):
    """The tutorial's `ResNetLayer`, the DEQ's cell f(z, x): y = norm1(relu(conv1(z))), then
    norm3(relu(z + norm2(x + conv2(y)))); both convs 3×3 without bias, initialised N(0, 0.01) (so f
    starts close to a function of x alone: a contraction the solver converges on)."""

    def __init__(self, n_channels: int, n_inner_channels: int, kernel_size: int = 3, num_groups: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(n_channels, n_inner_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.conv2 = nn.Conv2d(n_inner_channels, n_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.norm1 = nn.GroupNorm(num_groups, n_inner_channels)
        self.norm2 = nn.GroupNorm(num_groups, n_channels)
        self.norm3 = nn.GroupNorm(num_groups, n_channels)
        self.conv1.weight.data.normal_(0, 0.01)
        self.conv2.weight.data.normal_(0, 0.01)

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(F.relu(self.conv1(z)))
        return self.norm3(F.relu(z + self.norm2(x + self.conv2(y))))


class DEQFixedPoint(nn.Module):
    """The tutorial's `DEQFixedPoint`: the forward solver (`deq_anderson`) from z = 0 under
    `torch.no_grad()`, then z = f(z*, x) once with autograd on (re-engaging the tape), and the
    implicit backward: f0 = f(z0, x) at a detached copy z0 of z*, and a `register_hook` on z that
    replaces the incoming gradient by the solution g of g = (∂f0/∂z0)ᵀ g + grad (the same solver on
    `autograd.grad(f0, z0, g, retain_graph=True)`), what the implicit function theorem gives for
    dL/dz*. The hook is registered only where z takes gradients (`z.requires_grad`: an eval under
    `no_grad` has no tape to hook; the tutorial's eval ran with autograd on, locuslab/deq's guards
    it by `self.training` the same way). `forward_res` / `backward_res`: the solvers' relative
    residuals of the last call (the tutorial keeps them; its notebook plots them)."""

    def __init__(self, f: nn.Module, solver: Callable = deq_anderson, **kwargs) -> None:
        super().__init__()
        self.f = f
        self.solver = solver
        self.kwargs = kwargs
        self.forward_res: list[float] = []
        self.backward_res: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # compute forward pass and re-engage autograd tape
        with torch.no_grad():
            z, self.forward_res = self.solver(lambda z: self.f(z, x), torch.zeros_like(x), **self.kwargs)
        z = self.f(z, x)
        if not z.requires_grad:
            return z
        # set up Jacobian vector product (without additional forward calls)
        z0 = z.clone().detach().requires_grad_()
        f0 = self.f(z0, x)

        def backward_hook(grad: torch.Tensor) -> torch.Tensor:
            g, self.backward_res = self.solver(
                lambda y: torch.autograd.grad(f0, z0, y, retain_graph=True)[0] + grad, grad, **self.kwargs)
            return g

        z.register_hook(backward_hook)
        return z


class DEQClassifier(nn.Module):
    """The tutorial's chapter-4 CIFAR-10 DEQ (`nn.Sequential(Conv2d(3, 48, 3, padding 1, bias),
    BatchNorm2d, DEQFixedPoint(ResNetLayer(48, 64), anderson, tol=1e-2, max_iter=25, m=5),
    BatchNorm2d, AvgPool2d(8, 8), Flatten, Linear(48·4·4, 10))`), small for 1×8×8 digits and a
    2-core CPU: `channels` 8 and `inner` 16 where the tutorial has 48 and 64, `groups` 4 GroupNorm
    groups where it has 8 (2 channels a group, 4 in the inner norm), 2×2 pooling to the tutorial's
    4×4 map. Named children in the Sequential's order: `conv`, `bn_in`, `deq` (its cell `deq.f`),
    `bn_out`, `pool`, `fc`."""

    def __init__(self, classes: int = 10, in_channels: int = 1, channels: int = 8, inner: int = 16,
                 groups: int = 4, pool: int = 2, side: int = 8, tol: float = 1e-2, max_iter: int = 25,
                 m: int = 5) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, bias=True, padding=1)
        self.bn_in = nn.BatchNorm2d(channels)
        self.deq = DEQFixedPoint(DEQResNetLayer(channels, inner, kernel_size=3, num_groups=groups),
                                 deq_anderson, tol=tol, max_iter=max_iter, m=m)
        self.bn_out = nn.BatchNorm2d(channels)
        self.pool = nn.AvgPool2d(pool, pool)
        self.fc = nn.Linear(channels * (side // pool) ** 2, classes)
        self.units = ["conv", "bn_in", "deq", "bn_out", "fc"]
        self.hidden = ["conv", "deq"]
        # The cell's conv2 adds to the injection x before norm2 (scaled, it drowns x); conv1 meets a
        # ReLU then GroupNorm (scale-free), the stem conv a BatchNorm; the head reads the loss directly.
        self.exposed = ["deq.f.conv2", "fc"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.deq(self.bn_in(self.conv(x)))
        return self.fc(self.pool(self.bn_out(z)).flatten(1))


class WRNBasicBlock(nn.Module):
    """xternalz/WideResNet-pytorch's `BasicBlock` (wideresnet.py), pre-activation: bn1 → relu1 →
    conv1 (the stride) → bn2 → relu2 → dropout (`drop_rate`, F.dropout) → conv2, added to the input
    (`equalInOut`) or to the 1×1 `convShortcut` of the pre-activated input where the shape changes
    (the repository's in-place ReLUs and its `x = relu1(bn1(x))` reuse kept)."""

    def __init__(self, in_planes: int, out_planes: int, stride: int, drop_rate: float = 0.0) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, 3, stride=1, padding=1, bias=False)
        self.droprate = drop_rate
        self.equalInOut = in_planes == out_planes
        self.convShortcut = None if self.equalInOut else nn.Conv2d(in_planes, out_planes, 1, stride=stride,
                                                                   padding=0, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.equalInOut:
            x = self.relu1(self.bn1(x))
            out = x
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out)))
        if self.droprate > 0:
            out = F.dropout(out, p=self.droprate, training=self.training)
        out = self.conv2(out)
        return torch.add(x if self.equalInOut else self.convShortcut(x), out)


class WRNNetworkBlock(nn.Module):
    """xternalz/WideResNet-pytorch's `NetworkBlock`: `nb_layers` `WRNBasicBlock`s in `self.layer`,
    the first with the group's stride."""

    def __init__(self, nb_layers: int, in_planes: int, out_planes: int, stride: int, drop_rate: float = 0.0) -> None:
        super().__init__()
        self.layer = nn.Sequential(*(WRNBasicBlock(in_planes if i == 0 else out_planes, out_planes,
                                                   stride if i == 0 else 1, drop_rate) for i in range(nb_layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class WideResNetDDP(nn.Module):
    """xternalz/WideResNet-pytorch's `WideResNet(depth, num_classes, widen_factor, dropRate)`
    (Zagoruyko & Komodakis 2016): `conv1` 3×3 to 16 channels, `block1`–`block3` of (depth − 4) / 6
    pre-activation blocks at 16k / 32k / 64k channels (strides 1, 2, 2), `bn1` → `relu` → average
    pooling over the last map → `fc`. Its init: convs N(0, √(2 / (k·k·out))) (Kaiming fan-out),
    BatchNorm 1 / 0, the `fc` bias 0 (its weight torch's default). WRN-10-2 here (one block a group,
    k = 2), dropout 0 (the paper's CIFAR runs without it); 16×16 inputs pool their 4×4 map where
    the repository's 32×32 CIFAR pool 8×8."""

    def __init__(self, classes: int = 4, depth: int = 10, widen_factor: int = 1, drop_rate: float = 0.0,
                 channels: int = 3, side: int = 16) -> None:
        super().__init__()
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        assert (depth - 4) % 6 == 0
        n = (depth - 4) // 6
        self.conv1 = nn.Conv2d(channels, widths[0], 3, stride=1, padding=1, bias=False)
        self.block1 = WRNNetworkBlock(n, widths[0], widths[1], 1, drop_rate)
        self.block2 = WRNNetworkBlock(n, widths[1], widths[2], 2, drop_rate)
        self.block3 = WRNNetworkBlock(n, widths[2], widths[3], 2, drop_rate)
        self.bn1 = nn.BatchNorm2d(widths[3])
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(widths[3], classes)
        self.nChannels = widths[3]
        self.pooled = side // 4
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                fan = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2.0 / fan))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()
        self.units = ["conv1", "block1", "block2", "block3", "bn1", "fc"]
        self.hidden = ["block1", "block2", "block3"]
        # The logits; every conv meets a BatchNorm next (the blocks' conv2 the residual add, then the
        # next pre-activation BatchNorm).
        self.exposed = ["fc"]
        # torchvision's train.py with `--norm-weight-decay` None: one weight decay on every parameter.
        self.decay_everything = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block3(self.block2(self.block1(self.conv1(x))))
        out = self.relu(self.bn1(out))
        out = F.avg_pool2d(out, self.pooled)
        return self.fc(out.view(-1, self.nChannels))


def gloo_process_group():
    """A context: torchvision's `utils.init_distributed_mode` for one CPU process, a real
    `torch.distributed.init_process_group("gloo", init_method="file://…", world_size=1, rank=0)`
    whose rendezvous file sits in its own temporary directory (runs in parallel never share one),
    `destroy_process_group()` on the way out, an error included."""
    import contextlib
    import tempfile

    import torch.distributed as dist

    @contextlib.contextmanager
    def group():
        with tempfile.TemporaryDirectory(prefix="ddp_wrn-") as tmp:
            dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", world_size=1, rank=0)
            try:
                yield
            finally:
                dist.destroy_process_group()

    return group()


def ddp_wrap(model: nn.Module) -> nn.Module:
    """train.py's `model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])`
    on CPU (no device ids); the wrapper's parameters and modules are the model's with a `module.`
    prefix. The zoo's bookkeeping (`units`, `hidden`, `exposed`, `decay_everything`) is copied onto
    the wrapper with that prefix, so that faults and truths name what the recorder sees."""
    ddp = nn.parallel.DistributedDataParallel(model)
    for attr in ("units", "hidden", "exposed"):
        setattr(ddp, attr, [f"module.{name}" for name in getattr(model, attr)])
    ddp.decay_everything = getattr(model, "decay_everything", False)
    return ddp


class WRNEpochLoader:
    """train.py's data path under DDP: `DistributedSampler(dataset)` (its rank and world size from
    the process group, shuffle with `seed`), `DataLoader(dataset, batch_size, sampler=...)`
    (drop_last False, no workers), `train_sampler.set_epoch(epoch)` at the top of each epoch.
    Calling it gives the next batch (x, y); `epoch` is the epoch that batch belongs to."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int) -> None:
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

        dataset = TensorDataset(x, y)
        self.sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
        self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler)
        self.epoch, self._it = 0, None

    def start(self, epoch: int) -> None:
        """Begin `epoch` afresh (train.py after `--resume`: `for epoch in range(args.start_epoch, ...)`)."""
        self.epoch, self._it = epoch, None

    def __call__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._it is None:
            self.sampler.set_epoch(self.epoch)
            self._it = iter(self.loader)
        try:
            return tuple(next(self._it))
        except StopIteration:
            self.epoch += 1
            self._it = None
            return self()


def wrn_evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """train.py's `evaluate`: eval mode, `torch.inference_mode()`, the criterion's loss
    (cross-entropy) and top-1 (%) over the whole held-out set; the training mode restored after."""
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        logits = model(x)
        loss = float(F.cross_entropy(logits.float(), y))
        top1 = 100.0 * float((logits.argmax(1) == y).float().mean())
    model.train(was_training)
    return loss, top1


class MocoSplitBatchNorm(nn.BatchNorm2d):
    """The MoCo CIFAR-10 demo's `SplitBatchNorm` (facebookresearch/moco, colab/moco_cifar10_demo.ipynb):
    in train mode the batch is normalised as `num_splits` sub-batches (the input viewed as
    (N / S, C·S, H, W): sub-batch s holds the samples s, s + S, …), each with its own statistics, as
    S GPUs' BatchNorms would (main_moco.py's DDP with one BatchNorm a GPU); the running statistics
    are the splits' mean. In eval mode an ordinary BatchNorm on the running statistics."""

    def __init__(self, num_features: int, num_splits: int, **kwargs) -> None:
        super().__init__(num_features, **kwargs)
        self.num_splits = num_splits

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        n, c, h, w = input.shape
        if self.training or not self.track_running_stats:
            running_mean_split = self.running_mean.repeat(self.num_splits)
            running_var_split = self.running_var.repeat(self.num_splits)
            outcome = F.batch_norm(input.view(-1, c * self.num_splits, h, w), running_mean_split, running_var_split,
                                   self.weight.repeat(self.num_splits), self.bias.repeat(self.num_splits),
                                   True, self.momentum, self.eps).view(n, c, h, w)
            self.running_mean.data.copy_(running_mean_split.view(self.num_splits, c).mean(dim=0))
            self.running_var.data.copy_(running_var_split.view(self.num_splits, c).mean(dim=0))
            return outcome
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, False,
                            self.momentum, self.eps)


MOCO_BN_SPLITS = 4
"""Sub-batches of the MoCo encoders' `MocoSplitBatchNorm` (the demo's `bn_splits` 8 at batch 512; 4
at batch 64: 16 images a split, 4 under `healthy_accum`'s quarter batches)."""
MOCO_DIM = 32
"""MoCo's feature dimension (main_moco.py's `--moco-dim` 128 after 2048 ResNet-50 features; 32 after 32)."""
MOCO_K = 128
"""MoCo's queue length (main_moco.py's `--moco-k` 65536, 256 batches of 256; the demo's 4096, 8 of 512;
here 2 batches of `field.MOCO_BATCH`). builder.py's queue starts as random unit vectors, easy
negatives: until real keys fill it the loss sits far below ln(1 + K) (step 0: ~0.9 at K 128, ~1.9 at K
512), so a queue that takes 8 batches to fill puts 8 easy steps in the yardstick's first 10. Measured
on the healthy loop (seed 0, unrecorded, first/last 10-step loss means, lr 0.03): K 512 5.09 -> 4.91
(0.96×), K 256 4.69 -> 3.71 (0.79×), K 128 4.28 -> 3.17 (0.74×)."""
MOCO_M = 0.99
"""MoCo's key-encoder momentum (main_moco.py's `--moco-m` 0.999 over ~250 000 iterations; the demo's
0.99 for its 200-epoch CIFAR-10 run; at 0.999 a 150-step run's key encoder would move only 1 − 0.999¹⁵⁰
= 14 % of the way from its initialisation, at 0.99 78 %)."""
MOCO_T = 0.2
"""MoCo v2's softmax temperature (main_moco.py's `--moco-t` 0.2 with `--mlp --aug-plus --cos`)."""


class MocoBasicBlock(nn.Module):
    """torchvision's `BasicBlock` (conv3×3 → BN → ReLU → conv3×3 → BN, + shortcut, ReLU), its BNs
    `MocoSplitBatchNorm`s (the demo's `norm_layer`), a 1×1 conv + BN `downsample` where the shape changes."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1, splits: int = MOCO_BN_SPLITS) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = MocoSplitBatchNorm(planes, splits)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = MocoSplitBatchNorm(planes, splits)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False),
                                            MocoSplitBatchNorm(planes, splits))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + identity)


class MocoResNet(nn.Module):
    """MoCo's `base_encoder` (torchvision's `resnet50(num_classes=dim)`; here a small ResNet for the
    16×16 colour patterns as the demo's CIFAR variant: a 3×3 stride-1 `conv1` with no max-pool), `conv1` → `bn1`
    → `relu`, `layer1` (a `MocoBasicBlock` at `width`), `layer2` (one at 2 × `width`, stride 2),
    `avgpool`, and the `fc` that builder.py's `mlp` swaps in: `Sequential(Linear(d, d), ReLU(),
    Linear(d, dim))` (MoCo v2's MLP head). torchvision's init: convs Kaiming-normal fan-out, BN 1 and 0."""

    def __init__(self, dim: int = MOCO_DIM, width: int = 16, splits: int = MOCO_BN_SPLITS, channels: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 3, padding=1, bias=False)
        self.bn1 = MocoSplitBatchNorm(width, splits)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = MocoBasicBlock(width, width, splits=splits)
        self.layer2 = MocoBasicBlock(width, 2 * width, stride=2, splits=splits)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        features = 2 * width  # builder.py: dim_mlp = self.encoder_q.fc.weight.shape[1]
        self.fc = nn.Sequential(nn.Linear(features, features), nn.ReLU(), nn.Linear(features, dim))
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(self.avgpool(x).flatten(1))


class MoCo(nn.Module):
    """facebookresearch/moco's `moco/builder.py` `MoCo` (v2: `mlp=True`, T 0.2), one process: a query
    encoder `encoder_q` and a key encoder `encoder_k` built alike, `encoder_k` initialised as a copy of
    `encoder_q` with `requires_grad = False` ("not update by gradient"), a `queue` buffer (dim × K,
    `randn` normalised along dim) and a `queue_ptr` buffer (int64). `forward(views)` takes a
    (2B, 3, 16, 16) batch (views i and i + B are a pair, `data.two_views_sampler`): im_q the first B,
    im_k the other B; q = normalize(encoder_q(im_q)); under `torch.no_grad()` the momentum update
    (each key parameter ← m·key + (1 − m)·query), the keys' batch shuffled (the demo's
    `_batch_shuffle_single_gpu`: a randperm, undone after encoder_k), k = normalize(encoder_k(im_k));
    logits = [q·k, q·queue] / T, (B, 1 + K); then `_dequeue_and_enqueue(k)`: k written at
    `queue_ptr`, the pointer moved by B mod K. The loss is cross-entropy against label 0 (`moco_loss`).
    One departure: in eval mode (the loop's `val_loss` forward) neither the momentum update nor the
    shuffle nor the enqueue runs (builder.py has no eval; the demo's monitor reads `encoder_q` alone),
    so held-out keys never enter the queue. The shuffle's randperm comes from the model's own generator
    (seeded from torch's at construction), so an eval never moves the training's draws."""

    def __init__(self, dim: int = MOCO_DIM, K: int = MOCO_K, m: float = MOCO_M, T: float = MOCO_T,
                 splits: int = MOCO_BN_SPLITS, channels: int = 3) -> None:
        super().__init__()
        self.K, self.m, self.T = K, m, T
        self.encoder_q = MocoResNet(dim, splits=splits, channels=channels)
        self.encoder_k = MocoResNet(dim, splits=splits, channels=channels)
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data.copy_(param_q.data)  # initialize
            param_k.requires_grad = False  # not update by gradient
        self.register_buffer("queue", F.normalize(torch.randn(dim, K), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))
        self.shuffle_generator = torch.Generator().manual_seed(int(torch.randint(2 ** 31, (1,))))
        self.units = ["encoder_q.conv1", "encoder_q.bn1", "encoder_q.layer1", "encoder_q.layer2", "encoder_q.fc",
                      "encoder_k"]  # encoder_k: a unit with no param group (requires_grad False, as LoRA's base)
        self.hidden = ["encoder_q.conv1", "encoder_q.layer1", "encoder_q.layer2"]
        # What reaches the loss without a normalisation after it: the MLP head's layers (q is
        # L2-normalised, which a scale of the last Linear's weight alone leaves alone; its first layer
        # goes through a ReLU into the second, whose output mixes the scaled and unscaled parts only
        # through the bias).
        self.exposed = ["encoder_q.fc.0", "encoder_q.fc.2"]
        self.decay_everything = True  # main_moco.py: SGD(model.parameters(), weight_decay=1e-4)

    @torch.no_grad()
    def _momentum_update_key_encoder(self) -> None:
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys: torch.Tensor) -> None:
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        assert self.K % batch_size == 0  # for simplicity
        self.queue[:, ptr:ptr + batch_size] = keys.T
        self.queue_ptr[0] = (ptr + batch_size) % self.K

    def forward(self, views: torch.Tensor) -> torch.Tensor:
        n = len(views) // 2
        im_q, im_k = views[:n], views[n:]
        q = F.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            if self.training:
                self._momentum_update_key_encoder()
                idx_shuffle = torch.randperm(n, generator=self.shuffle_generator)
                k = self.encoder_k(im_k[idx_shuffle])
                k = F.normalize(k, dim=1)[torch.argsort(idx_shuffle)]
            else:
                k = F.normalize(self.encoder_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T
        if self.training:
            self._dequeue_and_enqueue(k)
        return logits


def moco_loss(logits: torch.Tensor, _targets=None) -> torch.Tensor:
    """main_moco.py's `criterion(output, target)`: cross-entropy over [positive, K negatives] with the
    positive key at index 0 (`labels = torch.zeros(N, dtype=torch.long)`)."""
    return F.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long, device=logits.device))


def weighted_knn_top1(bank: torch.Tensor, bank_labels: torch.Tensor, features: torch.Tensor, labels: torch.Tensor,
                      k: int, t: float) -> float:
    """Top-1 (%) of the weighted kNN of Wu et al. 2018 that MoCo's demo (`knn_predict`) and DINO's
    eval_knn.py (`knn_classifier`) both compute: each row of `features` is scored against the `bank`
    by cosine similarity (both L2-normalised here), and its `k` most similar bank rows vote for their
    labels with weight exp(sim / t)."""
    bank, features = F.normalize(bank, dim=1).T, F.normalize(features, dim=1)
    classes = int(bank_labels.max()) + 1
    sim_weight, sim_indices = (features @ bank).topk(k=k, dim=-1)
    sim_labels = torch.gather(bank_labels.expand(len(features), -1), dim=-1, index=sim_indices)
    one_hot = torch.zeros(len(features) * k, classes).scatter(-1, sim_labels.reshape(-1, 1), 1.0)
    scores = (one_hot.view(len(features), k, classes) * (sim_weight / t).exp().unsqueeze(-1)).sum(1)
    return 100.0 * float((scores.argmax(1) == labels).float().mean())


def moco_knn_top1(model: MoCo, memory: torch.Tensor, memory_labels: torch.Tensor, x: torch.Tensor,
                  y: torch.Tensor, k: int = 20, t: float = 0.1) -> float:
    """The demo's kNN monitor (`test` / `knn_predict`), top-1 (%): `encoder_q` in eval mode without
    gradient embeds the unaugmented training images (the feature bank) and the held-out ones
    (`weighted_knn_top1`; the demo's k 200 of 50 000, t 0.1; here k 20 of 1 600). The model's mode
    restored after."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        top1 = weighted_knn_top1(model.encoder_q(memory), memory_labels, model.encoder_q(x), y, k, t)
    model.train(was_training)
    return top1


TACOTRON_SYMBOLS = 21
"""Tacotron 2's `n_symbols` here: the pad `_` (ID 0, as upstream's `text/symbols.py` puts `_pad`
first) and 20 characters (`TACOTRON_CHARS`)."""
TACOTRON_CHARS = 20
TACOTRON_MELS = 16
"""`n_mel_channels` (upstream 80)."""
TACOTRON_EMBEDDING = 64
"""`symbols_embedding_dim` and `encoder_embedding_dim` (upstream 512)."""
TACOTRON_PRENET = 64
"""`prenet_dim` (upstream 256)."""
TACOTRON_RNN = 64
"""`attention_rnn_dim` and `decoder_rnn_dim` (upstream 1024; 64 here: at 128 a healthy run took
~20 s unrecorded on one shared thread, at 64 ~11-13 s)."""
TACOTRON_ATTENTION = 64
"""`attention_dim` (upstream 128)."""
TACOTRON_LOCATION_FILTERS = 8
"""`attention_location_n_filters` (upstream 32)."""
TACOTRON_LOCATION_KERNEL = 15
"""`attention_location_kernel_size` (upstream 31, over texts of ~100 characters; here ≤ 10)."""
TACOTRON_POSTNET = 64
"""`postnet_embedding_dim` (upstream 512)."""


class TacotronLinearNorm(nn.Module):
    """NVIDIA/tacotron2 `layers.py`'s `LinearNorm`: an `nn.Linear` named `linear_layer`, its weight
    Xavier-uniform with gain `calculate_gain(w_init_gain)`."""

    def __init__(self, in_dim: int, out_dim: int, bias: bool = True, w_init_gain: str = "linear") -> None:
        super().__init__()
        self.linear_layer = nn.Linear(in_dim, out_dim, bias=bias)
        nn.init.xavier_uniform_(self.linear_layer.weight, gain=nn.init.calculate_gain(w_init_gain))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_layer(x)


class TacotronConvNorm(nn.Module):
    """`layers.py`'s `ConvNorm`: an `nn.Conv1d` named `conv` ("same" padding (k − 1) / 2 by
    default), Xavier-uniform with gain `calculate_gain(w_init_gain)`."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 1, stride: int = 1,
                 padding: int | None = None, dilation: int = 1, bias: bool = True, w_init_gain: str = "linear") -> None:
        super().__init__()
        if padding is None:
            assert kernel_size % 2 == 1
            padding = int(dilation * (kernel_size - 1) / 2)
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding,
                              dilation=dilation, bias=bias)
        nn.init.xavier_uniform_(self.conv.weight, gain=nn.init.calculate_gain(w_init_gain))

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        return self.conv(signal)


def tacotron_mask_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    """`utils.py`'s `get_mask_from_lengths`: (B, max length) True on the valid positions."""
    max_len = int(torch.max(lengths).item())
    ids = torch.arange(0, max_len, dtype=torch.long, device=lengths.device)
    return ids < lengths.unsqueeze(1)


class TacotronLocationLayer(nn.Module):
    """`model.py`'s `LocationLayer`: `location_conv` (2 → n_filters over the previous and the
    cumulative attention weights, no bias) then `location_dense` (n_filters → attention_dim, tanh gain)."""

    def __init__(self, attention_n_filters: int, attention_kernel_size: int, attention_dim: int) -> None:
        super().__init__()
        padding = int((attention_kernel_size - 1) / 2)
        self.location_conv = TacotronConvNorm(2, attention_n_filters, kernel_size=attention_kernel_size,
                                              padding=padding, bias=False, stride=1, dilation=1)
        self.location_dense = TacotronLinearNorm(attention_n_filters, attention_dim, bias=False, w_init_gain="tanh")

    def forward(self, attention_weights_cat: torch.Tensor) -> torch.Tensor:
        processed_attention = self.location_conv(attention_weights_cat).transpose(1, 2)
        return self.location_dense(processed_attention)


class TacotronAttention(nn.Module):
    """`model.py`'s location-sensitive `Attention`: energies v·tanh(W q + V m + U f) of the query
    (the attention RNN's hidden state), the processed memory (`memory_layer`, computed once a
    decode) and the location features of [previous, cumulative] weights; masked by the text lengths
    with -inf (`score_mask_value`), softmax over the text, context = weights @ memory."""

    def __init__(self, attention_rnn_dim: int, embedding_dim: int, attention_dim: int,
                 attention_location_n_filters: int, attention_location_kernel_size: int) -> None:
        super().__init__()
        self.query_layer = TacotronLinearNorm(attention_rnn_dim, attention_dim, bias=False, w_init_gain="tanh")
        self.memory_layer = TacotronLinearNorm(embedding_dim, attention_dim, bias=False, w_init_gain="tanh")
        self.v = TacotronLinearNorm(attention_dim, 1, bias=False)
        self.location_layer = TacotronLocationLayer(attention_location_n_filters, attention_location_kernel_size,
                                                    attention_dim)
        self.score_mask_value = -float("inf")

    def get_alignment_energies(self, query: torch.Tensor, processed_memory: torch.Tensor,
                               attention_weights_cat: torch.Tensor) -> torch.Tensor:
        processed_query = self.query_layer(query.unsqueeze(1))
        processed_attention_weights = self.location_layer(attention_weights_cat)
        energies = self.v(torch.tanh(processed_query + processed_attention_weights + processed_memory))
        return energies.squeeze(-1)

    def forward(self, attention_hidden_state, memory, processed_memory, attention_weights_cat, mask):
        alignment = self.get_alignment_energies(attention_hidden_state, processed_memory, attention_weights_cat)
        if mask is not None:
            alignment.data.masked_fill_(mask, self.score_mask_value)
        attention_weights = F.softmax(alignment, dim=1)
        attention_context = torch.bmm(attention_weights.unsqueeze(1), memory).squeeze(1)
        return attention_context, attention_weights


class TacotronPrenet(nn.Module):
    """`model.py`'s `Prenet`: `layers` of bias-free `LinearNorm` + ReLU, each followed by dropout 0.5
    with `training=True`: on in eval mode too, as upstream (its inference relies on it)."""

    def __init__(self, in_dim: int, sizes: list[int]) -> None:
        super().__init__()
        in_sizes = [in_dim] + sizes[:-1]
        self.layers = nn.ModuleList([TacotronLinearNorm(in_size, out_size, bias=False)
                                     for (in_size, out_size) in zip(in_sizes, sizes)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.layers:
            x = F.dropout(F.relu(linear(x)), p=0.5, training=True)
        return x


class TacotronPostnet(nn.Module):
    """`model.py`'s `Postnet`: five `Sequential(ConvNorm(k 5), BatchNorm1d)`, tanh and dropout 0.5
    after each but the last (dropout only), its output added to the decoder's frames by `Tacotron2`."""

    def __init__(self, n_mel_channels: int = TACOTRON_MELS, postnet_embedding_dim: int = TACOTRON_POSTNET,
                 postnet_kernel_size: int = 5, postnet_n_convolutions: int = 5) -> None:
        super().__init__()
        pad = int((postnet_kernel_size - 1) / 2)
        self.convolutions = nn.ModuleList()
        self.convolutions.append(nn.Sequential(
            TacotronConvNorm(n_mel_channels, postnet_embedding_dim, kernel_size=postnet_kernel_size, stride=1,
                             padding=pad, dilation=1, w_init_gain="tanh"),
            nn.BatchNorm1d(postnet_embedding_dim)))
        for _ in range(1, postnet_n_convolutions - 1):
            self.convolutions.append(nn.Sequential(
                TacotronConvNorm(postnet_embedding_dim, postnet_embedding_dim, kernel_size=postnet_kernel_size,
                                 stride=1, padding=pad, dilation=1, w_init_gain="tanh"),
                nn.BatchNorm1d(postnet_embedding_dim)))
        self.convolutions.append(nn.Sequential(
            TacotronConvNorm(postnet_embedding_dim, n_mel_channels, kernel_size=postnet_kernel_size, stride=1,
                             padding=pad, dilation=1, w_init_gain="linear"),
            nn.BatchNorm1d(n_mel_channels)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(len(self.convolutions) - 1):
            x = F.dropout(torch.tanh(self.convolutions[i](x)), 0.5, self.training)
        return F.dropout(self.convolutions[-1](x), 0.5, self.training)


class TacotronEncoder(nn.Module):
    """`model.py`'s `Encoder`: three `Sequential(ConvNorm(k 5, relu gain), BatchNorm1d)` each
    followed by ReLU and dropout 0.5, then a bidirectional LSTM (embedding / 2 a direction) over the
    sequences packed by their lengths (`pack_padded_sequence`: the collate sorts them descending)."""

    def __init__(self, encoder_embedding_dim: int = TACOTRON_EMBEDDING, encoder_n_convolutions: int = 3,
                 encoder_kernel_size: int = 5) -> None:
        super().__init__()
        self.convolutions = nn.ModuleList([nn.Sequential(
            TacotronConvNorm(encoder_embedding_dim, encoder_embedding_dim, kernel_size=encoder_kernel_size, stride=1,
                             padding=int((encoder_kernel_size - 1) / 2), dilation=1, w_init_gain="relu"),
            nn.BatchNorm1d(encoder_embedding_dim)) for _ in range(encoder_n_convolutions)])
        self.lstm = nn.LSTM(encoder_embedding_dim, int(encoder_embedding_dim / 2), 1, batch_first=True,
                            bidirectional=True)

    def forward(self, x: torch.Tensor, input_lengths: torch.Tensor) -> torch.Tensor:
        for conv in self.convolutions:
            x = F.dropout(F.relu(conv(x)), 0.5, self.training)
        x = x.transpose(1, 2)
        input_lengths = input_lengths.cpu().numpy()
        x = nn.utils.rnn.pack_padded_sequence(x, input_lengths, batch_first=True)
        self.lstm.flatten_parameters()
        outputs, _ = self.lstm(x)
        outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True)
        return outputs


class TacotronDecoder(nn.Module):
    """`model.py`'s `Decoder` (n_frames_per_step 1), teacher-forced: a zero go frame, then each
    target frame through the `prenet`; per frame `decode`: `attention_rnn` (LSTMCell over [prenet
    frame, previous context], its hidden state dropped out at `p_attention_dropout`), the
    `attention_layer` on [previous, cumulative] weights (the cumulative weights summed in place, as
    upstream), `decoder_rnn` (LSTMCell over [attention hidden, context], dropout `p_decoder_dropout`),
    `linear_projection` and `gate_layer` on [decoder hidden, context]."""

    def __init__(self, n_mel_channels: int = TACOTRON_MELS, n_frames_per_step: int = 1,
                 encoder_embedding_dim: int = TACOTRON_EMBEDDING, attention_rnn_dim: int = TACOTRON_RNN,
                 decoder_rnn_dim: int = TACOTRON_RNN, prenet_dim: int = TACOTRON_PRENET,
                 attention_dim: int = TACOTRON_ATTENTION, attention_location_n_filters: int = TACOTRON_LOCATION_FILTERS,
                 attention_location_kernel_size: int = TACOTRON_LOCATION_KERNEL, p_attention_dropout: float = 0.1,
                 p_decoder_dropout: float = 0.1) -> None:
        super().__init__()
        self.n_mel_channels = n_mel_channels
        self.n_frames_per_step = n_frames_per_step
        self.encoder_embedding_dim = encoder_embedding_dim
        self.attention_rnn_dim = attention_rnn_dim
        self.decoder_rnn_dim = decoder_rnn_dim
        self.p_attention_dropout = p_attention_dropout
        self.p_decoder_dropout = p_decoder_dropout
        self.prenet = TacotronPrenet(n_mel_channels * n_frames_per_step, [prenet_dim, prenet_dim])
        self.attention_rnn = nn.LSTMCell(prenet_dim + encoder_embedding_dim, attention_rnn_dim)
        self.attention_layer = TacotronAttention(attention_rnn_dim, encoder_embedding_dim, attention_dim,
                                                 attention_location_n_filters, attention_location_kernel_size)
        self.decoder_rnn = nn.LSTMCell(attention_rnn_dim + encoder_embedding_dim, decoder_rnn_dim, 1)
        self.linear_projection = TacotronLinearNorm(decoder_rnn_dim + encoder_embedding_dim,
                                                    n_mel_channels * n_frames_per_step)
        self.gate_layer = TacotronLinearNorm(decoder_rnn_dim + encoder_embedding_dim, 1, bias=True,
                                             w_init_gain="sigmoid")

    def get_go_frame(self, memory: torch.Tensor) -> torch.Tensor:
        return memory.new_zeros(memory.size(0), self.n_mel_channels * self.n_frames_per_step)

    def initialize_decoder_states(self, memory: torch.Tensor, mask: torch.Tensor) -> None:
        B, MAX_TIME = memory.size(0), memory.size(1)
        self.attention_hidden = memory.new_zeros(B, self.attention_rnn_dim)
        self.attention_cell = memory.new_zeros(B, self.attention_rnn_dim)
        self.decoder_hidden = memory.new_zeros(B, self.decoder_rnn_dim)
        self.decoder_cell = memory.new_zeros(B, self.decoder_rnn_dim)
        self.attention_weights = memory.new_zeros(B, MAX_TIME)
        self.attention_weights_cum = memory.new_zeros(B, MAX_TIME)
        self.attention_context = memory.new_zeros(B, self.encoder_embedding_dim)
        self.memory = memory
        self.processed_memory = self.attention_layer.memory_layer(memory)
        self.mask = mask

    def parse_decoder_inputs(self, decoder_inputs: torch.Tensor) -> torch.Tensor:
        decoder_inputs = decoder_inputs.transpose(1, 2)  # (B, n_mel, T_out) -> (B, T_out, n_mel)
        decoder_inputs = decoder_inputs.view(decoder_inputs.size(0), int(decoder_inputs.size(1) / self.n_frames_per_step), -1)
        return decoder_inputs.transpose(0, 1)  # (T_out, B, n_mel)

    def parse_decoder_outputs(self, mel_outputs, gate_outputs, alignments):
        alignments = torch.stack(alignments).transpose(0, 1)
        gate_outputs = torch.stack(gate_outputs).transpose(0, 1).contiguous()
        mel_outputs = torch.stack(mel_outputs).transpose(0, 1).contiguous()
        mel_outputs = mel_outputs.view(mel_outputs.size(0), -1, self.n_mel_channels)
        return mel_outputs.transpose(1, 2), gate_outputs, alignments

    def decode(self, decoder_input: torch.Tensor):
        cell_input = torch.cat((decoder_input, self.attention_context), -1)
        self.attention_hidden, self.attention_cell = self.attention_rnn(
            cell_input, (self.attention_hidden, self.attention_cell))
        self.attention_hidden = F.dropout(self.attention_hidden, self.p_attention_dropout, self.training)
        attention_weights_cat = torch.cat((self.attention_weights.unsqueeze(1),
                                           self.attention_weights_cum.unsqueeze(1)), dim=1)
        self.attention_context, self.attention_weights = self.attention_layer(
            self.attention_hidden, self.memory, self.processed_memory, attention_weights_cat, self.mask)
        self.attention_weights_cum += self.attention_weights
        decoder_input = torch.cat((self.attention_hidden, self.attention_context), -1)
        self.decoder_hidden, self.decoder_cell = self.decoder_rnn(decoder_input, (self.decoder_hidden, self.decoder_cell))
        self.decoder_hidden = F.dropout(self.decoder_hidden, self.p_decoder_dropout, self.training)
        decoder_hidden_attention_context = torch.cat((self.decoder_hidden, self.attention_context), dim=1)
        decoder_output = self.linear_projection(decoder_hidden_attention_context)
        gate_prediction = self.gate_layer(decoder_hidden_attention_context)
        return decoder_output, gate_prediction, self.attention_weights

    def forward(self, memory: torch.Tensor, decoder_inputs: torch.Tensor, memory_lengths: torch.Tensor):
        decoder_input = self.get_go_frame(memory).unsqueeze(0)
        decoder_inputs = self.parse_decoder_inputs(decoder_inputs)
        decoder_inputs = torch.cat((decoder_input, decoder_inputs), dim=0)
        decoder_inputs = self.prenet(decoder_inputs)
        self.initialize_decoder_states(memory, mask=~tacotron_mask_from_lengths(memory_lengths))
        mel_outputs, gate_outputs, alignments = [], [], []
        while len(mel_outputs) < decoder_inputs.size(0) - 1:
            decoder_input = decoder_inputs[len(mel_outputs)]
            mel_output, gate_output, attention_weights = self.decode(decoder_input)
            mel_outputs += [mel_output.squeeze(1)]
            gate_outputs += [gate_output.squeeze(1)]
            alignments += [attention_weights]
        return self.parse_decoder_outputs(mel_outputs, gate_outputs, alignments)


class Tacotron2(nn.Module):
    """NVIDIA/tacotron2 `model.py`'s `Tacotron2`, scaled down (`TACOTRON_*`): `embedding` (uniform
    ±√3·√(2 / (n_symbols + dim)), as upstream), `encoder`, teacher-forced `decoder`, `postnet` added
    as a residual; `parse_output` with `mask_padding`: past each utterance's length both mel outputs
    are filled with 0 and the gate energies with 1e3 (through `.data`, as upstream: no gradient
    there). `forward(inputs)` takes `parse_batch`'s x, (text_padded, input_lengths, mel_padded,
    max_len, output_lengths), and returns (mel_outputs, mel_outputs_postnet, gate_outputs,
    alignments); a tuple where upstream returns a list (the zoo's loop casts a tuple's elements)."""

    def __init__(self, n_symbols: int = TACOTRON_SYMBOLS, symbols_embedding_dim: int = TACOTRON_EMBEDDING,
                 n_mel_channels: int = TACOTRON_MELS, mask_padding: bool = True) -> None:
        super().__init__()
        self.mask_padding = mask_padding
        self.n_mel_channels = n_mel_channels
        self.n_frames_per_step = 1
        self.embedding = nn.Embedding(n_symbols, symbols_embedding_dim)
        std = math.sqrt(2.0 / (n_symbols + symbols_embedding_dim))
        val = math.sqrt(3.0) * std  # uniform bounds for std
        self.embedding.weight.data.uniform_(-val, val)
        self.encoder = TacotronEncoder(symbols_embedding_dim)
        self.decoder = TacotronDecoder(n_mel_channels, encoder_embedding_dim=symbols_embedding_dim)
        self.postnet = TacotronPostnet(n_mel_channels)
        self.units = ["embedding", *(f"encoder.convolutions.{i}" for i in range(3)), "encoder.lstm",
                      "decoder.prenet", "decoder.attention_rnn", "decoder.attention_layer", "decoder.decoder_rnn",
                      "decoder.linear_projection", "decoder.gate_layer",
                      *(f"postnet.convolutions.{i}" for i in range(5))]
        # The blocks between the characters and the frames. The last is the one `detach` cuts:
        # `encoder.convolutions.2`, whose output is a plain tensor with only the embedding and
        # the first two convolutions before it. Not `encoder.lstm`: its output is a
        # PackedSequence, which faults.DetachedLayer cannot `.detach()`; not a decoder LSTMCell:
        # the attention context reaches the projections around it, so the units before it keep
        # their gradient.
        self.hidden = ["encoder.lstm", "decoder.attention_rnn", "decoder.attention_layer", "decoder.decoder_rnn",
                       "postnet.convolutions.1", "postnet.convolutions.2",
                       "encoder.convolutions.0", "encoder.convolutions.1", "encoder.convolutions.2"]
        # What reaches the loss (or the recurrence) without a normalisation after it: the decoder's
        # LSTMCells (their gates saturate), its two projections, the postnet's last BatchNorm affine
        # (the residual added to the frames). The convolutions each sit before a BatchNorm.
        self.exposed = ["decoder.attention_rnn", "decoder.decoder_rnn", "decoder.linear_projection.linear_layer",
                        "decoder.gate_layer.linear_layer", "postnet.convolutions.4.1"]
        self.decay_everything = True  # train.py: Adam(model.parameters(), weight_decay=hparams.weight_decay)

    def parse_output(self, outputs, output_lengths=None):
        if self.mask_padding and output_lengths is not None:
            mask = ~tacotron_mask_from_lengths(output_lengths)
            mask = mask.expand(self.n_mel_channels, mask.size(0), mask.size(1))
            mask = mask.permute(1, 0, 2)
            outputs[0].data.masked_fill_(mask, 0.0)
            outputs[1].data.masked_fill_(mask, 0.0)
            outputs[2].data.masked_fill_(mask[:, 0, :], 1e3)  # gate energies
        return tuple(outputs)

    def forward(self, inputs):
        text_inputs, text_lengths, mels, max_len, output_lengths = inputs
        text_lengths, output_lengths = text_lengths.data, output_lengths.data
        embedded_inputs = self.embedding(text_inputs).transpose(1, 2)
        encoder_outputs = self.encoder(embedded_inputs, text_lengths)
        mel_outputs, gate_outputs, alignments = self.decoder(encoder_outputs, mels, memory_lengths=text_lengths)
        mel_outputs_postnet = self.postnet(mel_outputs)
        mel_outputs_postnet = mel_outputs + mel_outputs_postnet
        return self.parse_output([mel_outputs, mel_outputs_postnet, gate_outputs, alignments], output_lengths)


def tacotron2_loss(model_output, targets) -> torch.Tensor:
    """`loss_function.py`'s `Tacotron2Loss`: MSE(mel_out, mel_target) + MSE(mel_out_postnet,
    mel_target) + BCEWithLogits(gate_out, gate_target), each a mean over every padded position
    (the masked outputs equal the zero-padded targets there, the 1e3 gate energies the padded 1s)."""
    mel_target, gate_target = targets[0], targets[1]
    mel_target.requires_grad = False
    gate_target.requires_grad = False
    gate_target = gate_target.view(-1, 1)
    mel_out, mel_out_postnet, gate_out, _ = model_output
    gate_out = gate_out.view(-1, 1)
    mel_loss = nn.MSELoss()(mel_out, mel_target) + nn.MSELoss()(mel_out_postnet, mel_target)
    gate_loss = nn.BCEWithLogitsLoss()(gate_out, gate_target)
    return mel_loss + gate_loss


def tacotron_collate(batch: list[tuple[torch.Tensor, torch.Tensor]]):
    """`data_utils.py`'s `TextMelCollate` (n_frames_per_step 1) then `Tacotron2.parse_batch`:
    utterances sorted by text length, descending (for packing), texts zero-padded, mels zero-padded to
    the longest, gate 1 from each mel's last frame on; returns (x, y) = ((text_padded, input_lengths,
    mel_padded, max_len, output_lengths), (mel_padded, gate_padded))."""
    input_lengths, ids_sorted_decreasing = torch.sort(torch.LongTensor([len(x[0]) for x in batch]), dim=0,
                                                      descending=True)
    max_input_len = int(input_lengths[0])
    text_padded = torch.LongTensor(len(batch), max_input_len).zero_()
    for i in range(len(ids_sorted_decreasing)):
        text = batch[ids_sorted_decreasing[i]][0]
        text_padded[i, :text.size(0)] = text
    num_mels = batch[0][1].size(0)
    max_target_len = max([x[1].size(1) for x in batch])
    mel_padded = torch.FloatTensor(len(batch), num_mels, max_target_len).zero_()
    gate_padded = torch.FloatTensor(len(batch), max_target_len).zero_()
    output_lengths = torch.LongTensor(len(batch))
    for i in range(len(ids_sorted_decreasing)):
        mel = batch[ids_sorted_decreasing[i]][1]
        mel_padded[i, :, :mel.size(1)] = mel
        gate_padded[i, mel.size(1) - 1:] = 1
        output_lengths[i] = mel.size(1)
    max_len = torch.max(input_lengths.data).item()
    return (text_padded, input_lengths, mel_padded, max_len, output_lengths), (mel_padded, gate_padded)


LINK_PRED_HIDDEN = 128
"""gnn.py's `--hidden_channels` (256 there), for the encoder's layers and the predictor's alike.
At 256 (lr 1e-3, seeds 0-2, unrecorded) a run took ~11 s on one shared thread and val_loss climbed
back to 1.39-1.62 by step 150 (1.01-1.05 at its lowest) while Hits@50 reached 0.63-0.66; at 128
~3-6 s, val_loss 1.06-1.15 at step 140, Hits@50 0.57-0.60."""
LINK_PRED_LAYERS = 3
"""gnn.py's `--num_layers` 3, for the encoder (`SAGE`) and the predictor (`LinkPredictor`) alike."""
LINK_PRED_CLIP = 1.0
"""gnn.py's `train()`: `clip_grad_norm_(model.parameters(), 1.0)`, then the predictor's at 1.0."""


class SAGEConv(nn.Module):
    """PyG's `SAGEConv` at its defaults (aggr "mean", `root_weight`, no `normalize`, no `project`):
    out_i = lin_l(mean_{j ∈ N(i)} x_j) + lin_r(x_i), `lin_l` with a bias, `lin_r` without (its
    names and its Linear inits: PyG's `Linear` resets as torch's). The mean over `edge_index` (2, E:
    source, target) by `index_add_`, what torch_sparse's `matmul(adj_t, x, reduce="mean")` computes
    for gnn.py's `adj_t`; a node without neighbours aggregates 0."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.lin_l = nn.Linear(in_channels, out_channels)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        total = torch.zeros_like(x).index_add_(0, dst, x[src])
        count = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device).index_add_(
            0, dst, torch.ones_like(dst, dtype=x.dtype))
        return self.lin_l(total / count.clamp(min=1).unsqueeze(1)) + self.lin_r(x)


class SAGE(nn.Module):
    """gnn.py's `SAGE`: `convs`, `num_layers` SAGEConvs (in → hidden → … → out), ReLU and dropout
    after each but the last."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int,
                 dropout: float) -> None:
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(in_channels, hidden_channels)])
        for _ in range(num_layers - 2):
            self.convs.append(SAGEConv(hidden_channels, hidden_channels))
        self.convs.append(SAGEConv(hidden_channels, out_channels))
        self.dropout = dropout

    def forward(self, x: torch.Tensor, adj_t: torch.Tensor) -> torch.Tensor:
        for conv in self.convs[:-1]:
            x = conv(x, adj_t)
            x = F.relu(x)
            x = F.dropout(x, p=self.dropout, training=self.training)
        return self.convs[-1](x, adj_t)


class LinkPredictor(nn.Module):
    """gnn.py's `LinkPredictor`: `lins`, an MLP on x_i * x_j (ReLU and dropout between), a sigmoid
    after the last: the probability of an edge."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, num_layers: int,
                 dropout: float) -> None:
        super().__init__()
        self.lins = nn.ModuleList([nn.Linear(in_channels, hidden_channels)])
        for _ in range(num_layers - 2):
            self.lins.append(nn.Linear(hidden_channels, hidden_channels))
        self.lins.append(nn.Linear(hidden_channels, out_channels))
        self.dropout = dropout

    def forward(self, x_i: torch.Tensor, x_j: torch.Tensor) -> torch.Tensor:
        x = x_i * x_j
        for lin in self.lins[:-1]:
            x = lin(x)
            x = F.relu(x)
            x = F.dropout(x, p=self.dropout, training=self.training)
        return torch.sigmoid(self.lins[-1](x))


class SageLinkPredictor(nn.Module):
    """gnn.py's two modules in one, as the zoo trains one model: `encoder` (its `model`, a `SAGE`)
    and `predictor` (its `LinkPredictor`), both `LINK_PRED_LAYERS` deep and `LINK_PRED_HIDDEN`
    wide, dropout 0.0 (gnn.py's default). Its forward takes the batch dict {`x`: node features,
    `edge_index`: the training graph (both directions), `edge_label_index`: (2, n) node pairs to
    score} and returns each pair's probability (n,): `h = model(data.x, data.adj_t)` over the whole
    graph, then `predictor(h[edge[0]], h[edge[1]])`."""

    def __init__(self, features: int, hidden: int = LINK_PRED_HIDDEN, layers: int = LINK_PRED_LAYERS,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.encoder = SAGE(features, hidden, hidden, layers, dropout)
        self.predictor = LinkPredictor(hidden, hidden, 1, layers, dropout)
        convs = [f"encoder.convs.{i}" for i in range(layers)]
        self.units = convs + [f"predictor.lins.{i}" for i in range(layers)]
        # The encoder's layers are the blocks: a detach of its last cuts the whole encoder off
        # (h computed without gradient, the predictor trained on fixed embeddings).
        self.hidden = convs
        # No normalisation anywhere: every Linear reaches the loss unnormalised.
        self.exposed = [f"{conv}.{lin}" for conv in convs for lin in ("lin_l", "lin_r")] + \
            [f"predictor.lins.{i}" for i in range(layers)]
        # gnn.py's Adam(list(model.parameters()) + list(predictor.parameters()), lr): no weight
        # decay, every parameter alike: one group a unit.
        self.decay_everything = True

    def encode(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.encoder(batch["x"], batch["edge_index"])

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        h = self.encode(batch)
        edge = batch["edge_label_index"]
        return self.predictor(h[edge[0]], h[edge[1]]).squeeze(-1)


def link_pred_loss(out: torch.Tensor, edge_label: torch.Tensor) -> torch.Tensor:
    """gnn.py's hand-written loss over a mini-batch's scored pairs: −log(pos_out + 1e-15).mean() −
    log(1 − neg_out + 1e-15).mean(), the positives the pairs labelled 1 (the batch's training
    edges), the negatives those labelled 0 (its uniformly sampled pairs; `edge_label` as PyG's
    link_pred.py builds it)."""
    pos_out, neg_out = out[edge_label == 1], out[edge_label == 0]
    pos_loss = -torch.log(pos_out + 1e-15).mean()
    neg_loss = -torch.log(1 - neg_out + 1e-15).mean()
    return pos_loss + neg_loss


def link_pred_clip_(model: SageLinkPredictor, max_norm: float = LINK_PRED_CLIP) -> None:
    """gnn.py's two clips before `optimizer.step()`: the encoder's gradients to norm `max_norm`,
    then the predictor's, each on its own."""
    nn.utils.clip_grad_norm_(model.encoder.parameters(), max_norm)
    nn.utils.clip_grad_norm_(model.predictor.parameters(), max_norm)


def link_pred_hits(model: SageLinkPredictor, x: torch.Tensor, edge_index: torch.Tensor, pos_edge: torch.Tensor,
                   neg_edge: torch.Tensor, k: int) -> float:
    """gnn.py's `test()` on one split: eval mode, no gradient, `h` of the whole graph once, every
    positive and negative pair (each (n, 2)) scored by the predictor, then ogb's `Evaluator`
    Hits@K: the share of positives scored above the K-th highest negative (1.0 where there are
    fewer than K negatives). The model's mode restored after."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        h = model.encoder(x, edge_index)
        pos = model.predictor(h[pos_edge[:, 0]], h[pos_edge[:, 1]]).squeeze(-1)
        neg = model.predictor(h[neg_edge[:, 0]], h[neg_edge[:, 1]]).squeeze(-1)
    model.train(was_training)
    if len(neg) < k:
        return 1.0
    kth_score_in_negative_edges = torch.topk(neg, k)[0][-1]
    return float(torch.sum(pos > kth_score_in_negative_edges)) / len(pos)
DINO_IMG = 16
"""The global crops' size (`DataAugmentationDINO`'s `RandomResizedCrop(224)`; the 16×16 colour patterns here)."""
DINO_LOCAL_IMG = 8
"""The local crops' size (upstream 96 of 224; 8 of 16 here, two patches a side)."""
DINO_WIDTH = 16
"""The ResNet backbone's first width (`DinoResNet`: 16, 32, 64 features; `embed_dim` 64)."""
DINO_OUT_DIM = 256
"""`DINOHead`'s `out_dim` (`--out_dim` 65536; 256 here): the softmax's prototypes; ln 256 is the
loss of a uniform student (the collapsed run's)."""
DINO_HIDDEN = 128
"""`DINOHead`'s `hidden_dim` (2048)."""
DINO_BOTTLENECK = 32
"""`DINOHead`'s `bottleneck_dim` (256)."""
DINO_LOCAL_CROPS = 4
"""`--local_crops_number` (upstream's default 8; 4 here for a 2-core CPU)."""
DINO_USE_BN_IN_HEAD = True
"""`--use_bn_in_head` (default False upstream): BatchNorm1d after each hidden Linear of the head. Without
it the scaled-down head (hidden 128 at trunc_normal(0.02)) carries an input-dependent signal of
~0.01 into its L2 normalisation, which AdamW's first steps on the biases swamp: the student's
outputs stopped depending on the image within 10 steps on every backbone and lr tried (seed 0)."""
"""The student's `--drop_path_rate` (main_dino.py's default 0.1; the teacher is built without)."""


def dino_cosine_scheduler(base_value: float, final_value: float, epochs: int, niter_per_ep: int,
                          warmup_epochs: int = 0, start_warmup_value: float = 0) -> np.ndarray:
    """facebookresearch/dino `utils.cosine_scheduler`: one value per iteration, a linear warm-up from
    `start_warmup_value` over `warmup_epochs` epochs, then a half cosine from `base_value` to
    `final_value` over the rest (main_dino.py's lr, weight-decay and teacher-momentum schedules)."""
    warmup_schedule = np.array([])
    warmup_iters = warmup_epochs * niter_per_ep
    if warmup_epochs > 0:
        warmup_schedule = np.linspace(start_warmup_value, base_value, warmup_iters)
    iters = np.arange(epochs * niter_per_ep - warmup_iters)
    schedule = final_value + 0.5 * (base_value - final_value) * (1 + np.cos(np.pi * iters / len(iters)))
    schedule = np.concatenate((warmup_schedule, schedule))
    assert len(schedule) == epochs * niter_per_ep
    return schedule


class DinoBasicBlock(nn.Module):
    """torchvision's `BasicBlock` (conv3×3 → BN → ReLU → conv3×3 → BN, + shortcut, ReLU), a 1×1 conv + BN
    `downsample` where the shape changes."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        return self.relu(out + identity)


class DinoResNet(nn.Module):
    """main_dino.py's `--arch resnet*` backbone (`torchvision_models.__dict__[args.arch]()`, its `fc`
    and `head` swapped for Identity by `MultiCropWrapper`), small: a 3×3 stride-1 `conv1` → `bn1` →
    `relu` (no max-pool, as CIFAR ResNets), `layer1`–`layer3` of one `DinoBasicBlock` each at
    `width`, 2 × and 4 × `width` (strides 1, 2, 2), `avgpool` (global: any crop size), `fc`; torchvision's
    init (convs Kaiming-normal fan-out, BN 1 / 0). `blocks` lists the layers (the student's units)."""

    def __init__(self, width: int = 16, in_chans: int = 3) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = DinoBasicBlock(width, width)
        self.layer2 = DinoBasicBlock(width, 2 * width, stride=2)
        self.layer3 = DinoBasicBlock(2 * width, 4 * width, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.num_features = 4 * width
        self.fc = nn.Linear(4 * width, 1000)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(self.avgpool(x).flatten(1))


class DINOHead(nn.Module):
    """vision_transformer.py's `DINOHead`: an `nlayers`-layer MLP (Linear → GELU → … → Linear to
    `bottleneck_dim`; `use_bn` False, main_dino.py's default), the output L2-normalised, then
    `last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))` with its
    magnitude `weight_g` filled with 1 and, with `norm_last_layer` (main_dino.py's default True),
    frozen (`requires_grad = False`). Linears trunc_normal(0.02), biases 0. The old
    `nn.utils.weight_norm` upstream calls (deprecated in torch ≥ 2.1, its FutureWarning silenced
    here): the layer's parameters are `weight_g` (out_dim, 1) and `weight_v`, its `weight` a plain
    tensor recomputed by a forward pre-hook."""

    def __init__(self, in_dim: int, out_dim: int, use_bn: bool = False, norm_last_layer: bool = True,
                 nlayers: int = 3, hidden_dim: int = DINO_HIDDEN, bottleneck_dim: int = DINO_BOTTLENECK) -> None:
        super().__init__()
        import warnings

        nlayers = max(nlayers, 1)
        if nlayers == 1:
            self.mlp = nn.Linear(in_dim, bottleneck_dim)
        else:
            layers = [nn.Linear(in_dim, hidden_dim)]
            if use_bn:
                layers.append(nn.BatchNorm1d(hidden_dim))
            layers.append(nn.GELU())
            for _ in range(nlayers - 2):
                layers.append(nn.Linear(hidden_dim, hidden_dim))
                if use_bn:
                    layers.append(nn.BatchNorm1d(hidden_dim))
                layers.append(nn.GELU())
            layers.append(nn.Linear(hidden_dim, bottleneck_dim))
            self.mlp = nn.Sequential(*layers)
        self.apply(self._init_weights)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
        self.last_layer.weight_g.data.fill_(1)
        if norm_last_layer:
            self.last_layer.weight_g.requires_grad = False

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mlp(x)
        x = F.normalize(x, dim=-1, p=2)
        return self.last_layer(x)


class DinoMultiCropWrapper(nn.Module):
    """utils.py's `MultiCropWrapper`: the crops (a list; here also the loader's dict of crops, taken in
    order) batched by resolution (`torch.unique_consecutive` over their widths: the global crops
    together, the local crops together, so the backbone's BatchNorms see one resolution a forward),
    one backbone forward per resolution, the pooled features concatenated, one head forward over
    all. `units`, `hidden`, `exposed`: the student's (the recorded module)."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        backbone.fc, backbone.head = nn.Identity(), nn.Identity()  # disable layers dedicated to ImageNet labels
        self.backbone = backbone
        self.head = head
        self.units = ["backbone.conv1", "backbone.bn1", "backbone.layer1", "backbone.layer2", "backbone.layer3",
                      "head.mlp", "head.last_layer"]
        self.hidden = ["backbone.layer1", "backbone.layer2", "backbone.layer3"]
        # The one layer after the head's L2 normalisation: the weight-normed last layer, whose frozen
        # magnitude weight_g (1) sets the logits' scale (a weight rescale multiplies weight_g too).
        self.exposed = ["head.last_layer"]

    def forward(self, x) -> torch.Tensor:
        if isinstance(x, dict):
            x = list(x.values())
        if not isinstance(x, list):
            x = [x]
        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in x]), return_counts=True)[1], 0)
        start_idx, output = 0, torch.empty(0).to(x[0].device)
        for end_idx in idx_crops:
            _out = self.backbone(torch.cat(x[start_idx:end_idx]))
            if isinstance(_out, tuple):
                _out = _out[0]
            output = torch.cat((output, _out))
            start_idx = end_idx
        return self.head(output)


class DinoTeacher(nn.Module):
    """The teacher's call in main_dino.py's `train_one_epoch`: `teacher(images[:2])`, only the two
    global crops (the loader's first two) through the teacher's `MultiCropWrapper` (`wrapper`)."""

    def __init__(self, wrapper: DinoMultiCropWrapper) -> None:
        super().__init__()
        self.wrapper = wrapper

    def forward(self, x) -> torch.Tensor:
        crops = list(x.values()) if isinstance(x, dict) else list(x)
        return self.wrapper(crops[:2])


def dino_student(out_dim: int = DINO_OUT_DIM) -> DinoMultiCropWrapper:
    """main_dino.py's student for a torchvision `--arch` (`DinoResNet`, `embed_dim =
    student.fc.weight.shape[1]`) in a `MultiCropWrapper` with a `DINOHead(embed_dim, out_dim,
    use_bn=args.use_bn_in_head, norm_last_layer=True)`."""
    backbone = DinoResNet(DINO_WIDTH)
    embed_dim = backbone.fc.weight.shape[1]
    return DinoMultiCropWrapper(backbone, DINOHead(embed_dim, out_dim, use_bn=DINO_USE_BN_IN_HEAD,
                                                   norm_last_layer=True))


def dino_teacher(student: DinoMultiCropWrapper, out_dim: int = DINO_OUT_DIM) -> DinoTeacher:
    """main_dino.py's teacher: the same architecture built anew, the student's
    weights and buffers loaded (`teacher_without_ddp.load_state_dict(student.module.state_dict())`), then
    `for p in teacher.parameters(): p.requires_grad = False` ("there is no backpropagation through
    the teacher"). The global-crops view (`DinoTeacher`)."""
    backbone = DinoResNet(DINO_WIDTH)
    teacher = DinoMultiCropWrapper(backbone, DINOHead(backbone.fc.weight.shape[1], out_dim,
                                                      use_bn=DINO_USE_BN_IN_HEAD))
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad = False
    return DinoTeacher(teacher)


@torch.no_grad()
def dino_ema_update(student: nn.Module, teacher: DinoTeacher, m: float) -> None:
    """main_dino.py's "EMA update for the teacher": param_k ← m·param_k + (1 − m)·param_q over
    `zip(student.parameters(), teacher_without_ddp.parameters())` (weight_g included, both 1)."""
    for param_q, param_k in zip(student.parameters(), teacher.wrapper.parameters()):
        param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)


class DINOLoss(nn.Module):
    """main_dino.py's `DINOLoss`: the student's outputs / `student_temp` (0.1) split into `ncrops`
    chunks; the teacher's (2 global chunks) softmax((out − center) / τ_t) with τ_t the epoch's
    `teacher_temp_schedule` (linear from `warmup_teacher_temp` to `teacher_temp` over
    `warmup_teacher_temp_epochs`, then constant), detached; the cross-entropy Σ −q·log_softmax(s)
    averaged over every (teacher crop, student crop) pair but the same view's; then `update_center`
    under no_grad: center ← 0.9·center + 0.1·mean of the teacher's outputs (one process: no
    all_reduce). One departure: the center moves only where gradients are on (the loop's training
    forwards), not in the loop's held-out `val_loss` forward (upstream computes no held-out loss)."""

    def __init__(self, out_dim: int, ncrops: int, warmup_teacher_temp: float, teacher_temp: float,
                 warmup_teacher_temp_epochs: int, nepochs: int, student_temp: float = 0.1,
                 center_momentum: float = 0.9) -> None:
        super().__init__()
        self.student_temp = student_temp
        self.center_momentum = center_momentum
        self.ncrops = ncrops
        self.register_buffer("center", torch.zeros(1, out_dim))
        # we apply a warm up for the teacher temperature because
        # a too high temperature makes the training instable at the beginning
        self.teacher_temp_schedule = np.concatenate((
            np.linspace(warmup_teacher_temp, teacher_temp, warmup_teacher_temp_epochs),
            np.ones(nepochs - warmup_teacher_temp_epochs) * teacher_temp))

    def forward(self, student_output: torch.Tensor, teacher_output: torch.Tensor, epoch: int) -> torch.Tensor:
        student_out = student_output / self.student_temp
        student_out = student_out.chunk(self.ncrops)
        temp = self.teacher_temp_schedule[epoch]
        teacher_out = F.softmax((teacher_output - self.center) / temp, dim=-1)
        teacher_out = teacher_out.detach().chunk(2)
        total_loss, n_loss_terms = 0, 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue  # we skip cases where student and teacher operate on the same view
                loss = torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                total_loss += loss.mean()
                n_loss_terms += 1
        total_loss /= n_loss_terms
        if torch.is_grad_enabled():
            self.update_center(teacher_output)
        return total_loss

    @torch.no_grad()
    def update_center(self, teacher_output: torch.Tensor) -> None:
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True) / len(teacher_output)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


def dino_clip_gradients(model: nn.Module, clip: float) -> list[float]:
    """utils.py's `clip_gradients`: each parameter's gradient scaled to norm ≤ `clip` on its own
    (clip / (norm + 1e-6) where below 1), not the global norm; returns the norms."""
    norms = []
    for name, p in model.named_parameters():
        if p.grad is not None:
            param_norm = p.grad.data.norm(2)
            norms.append(param_norm.item())
            clip_coef = clip / (param_norm + 1e-6)
            if clip_coef < 1:
                p.grad.data.mul_(clip_coef)
    return norms


def dino_cancel_gradients_last_layer(epoch: int, model: nn.Module, freeze_last_layer: int) -> None:
    """utils.py's `cancel_gradients_last_layer`: during the first `freeze_last_layer` epochs every
    parameter with "last_layer" in its name gets `grad = None` (the optimizer skips it)."""
    if epoch >= freeze_last_layer:
        return
    for n, p in model.named_parameters():
        if "last_layer" in n:
            p.grad = None


def dino_params_groups(model: nn.Module) -> list[dict]:
    """utils.py's `get_params_groups`: [regularized, not_regularized (weight_decay 0)], a parameter
    not regularized where its name ends in ".bias" or it is 1-D; frozen ones left out."""
    regularized, not_regularized = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if name.endswith(".bias") or len(param.shape) == 1:
            not_regularized.append(param)
        else:
            regularized.append(param)
    return [{"params": regularized}, {"params": not_regularized, "weight_decay": 0.0}]


def dino_knn_top1(backbone: nn.Module, train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                  test_y: torch.Tensor, k: int = 20, T: float = 0.07) -> float:
    """eval_knn.py's `knn_classifier`, top-1 (%): the backbone's pooled features in eval mode without
    gradient (`extract_features`) of the train images (the bank) and the test ones
    (`weighted_knn_top1`; T 0.07, k 20: eval_knn.py's `--nb_knn` 10, 20, 100, 200). The mode restored after."""
    was_training = backbone.training
    backbone.eval()
    with torch.no_grad():
        top1 = weighted_knn_top1(backbone(train_x), train_y, backbone(test_x), test_y, k, T)
    backbone.train(was_training)
    return top1


# --- DETR (facebookresearch/detr) ------------------------------------------------------------------

DETR_HIDDEN = 64
"""`--hidden_dim` (256 upstream): the transformer's width."""
DETR_HEADS = 4
"""`--nheads` (8 upstream)."""
DETR_ENC_LAYERS = 1
"""`--enc_layers` (6 upstream)."""
DETR_DEC_LAYERS = 2
"""`--dec_layers` (6 upstream): each layer's output is a prediction (`return_intermediate`, `aux_loss`).
At 2 encoder and 3 decoder layers the healthy runs learned less in 150 steps (held-out AP50 at step
125: 0.026 / 0.056 for seeds 0 / 1, against 0.167 / 0.149 for seeds 0 / 2 at 1 and 2)."""
DETR_FFN = 128
"""`--dim_feedforward` (2048 upstream)."""
DETR_DROPOUT = 0.1
"""`--dropout` 0.1 as upstream."""
DETR_QUERIES = 6
"""`--num_queries` (100 upstream, for COCO's images of up to ~60 objects; 6 here for at most 2)."""
DETR_SET_COST = (1.0, 5.0, 2.0)
"""main.py's `--set_cost_class`, `--set_cost_bbox`, `--set_cost_giou`: the matcher's cost weights."""
DETR_LOSS_COEF = {"loss_ce": 1.0, "loss_bbox": 5.0, "loss_giou": 2.0}
"""detr.py's `build`'s `weight_dict` (`--bbox_loss_coef` 5, `--giou_loss_coef` 2, loss_ce 1)."""
DETR_EOS_COEF = 0.1
"""`--eos_coef` 0.1: the no-object class's weight in the cross-entropy."""

DETR_LR_BACKBONE_SCALE = 0.1
"""main.py's `--lr_backbone` 1e-5 over `--lr` 1e-4: the backbone's lr a tenth of the rest's."""


def detr_box_cxcywh_to_xyxy(x: torch.Tensor) -> torch.Tensor:
    """util/box_ops.py's `box_cxcywh_to_xyxy`."""
    x_c, y_c, w, h = x.unbind(-1)
    return torch.stack([x_c - 0.5 * w, y_c - 0.5 * h, x_c + 0.5 * w, y_c + 0.5 * h], dim=-1)


def detr_box_area(boxes: torch.Tensor) -> torch.Tensor:
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def detr_box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """util/box_ops.py's `box_iou`: the (N, M) IoU and union of two sets of x1y1x2y2 boxes."""
    area1, area2 = detr_box_area(boxes1), detr_box_area(boxes2)
    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    union = area1[:, None] + area2 - inter
    return inter / union, union


def detr_generalized_box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """util/box_ops.py's `generalized_box_iou` (Rezatofighi et al. 2019), pairwise (N, M), with its
    asserts that the boxes are not degenerate (x2 ≥ x1, y2 ≥ y1)."""
    assert (boxes1[:, 2:] >= boxes1[:, :2]).all()
    assert (boxes2[:, 2:] >= boxes2[:, :2]).all()
    iou, union = detr_box_iou(boxes1, boxes2)
    lt = torch.min(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])
    wh = (rb - lt).clamp(min=0)
    area = wh[:, :, 0] * wh[:, :, 1]
    return iou - (area - union) / area


class DetrBackboneBody(nn.Module):
    """The backbone's body: a small conv net in torchvision ResNet's naming (a 3×3 `conv1`, `bn1`,
    then `layer1` … `layer3`, each conv → BatchNorm → ReLU; strides 2, 1, 2, 1: 32×32 images to an
    8×8 map of `num_channels`), its convs initialised as torchvision's ResNet (`kaiming_normal_`,
    fan_out, relu). backbone.py's `IntermediateLayerGetter` returns `layer3` here (`layer4` of a
    ResNet-50 there). Plain, trained `nn.BatchNorm2d`, not backbone.py's `FrozenBatchNorm2d`: that
    freezes an ImageNet ResNet's statistics and affine parameters, and there is no pretrained
    backbone here; frozen at their initial values (weight 1, bias 0, mean 0, var 1: the identity)
    the run learned less (seed 0, on an earlier, harder task of up to 4 smaller objects and 10
    queries: held-out AP50 0.000 at step 149 at lr 1e-3, 2e-3 and 3e-3, against 0.001 with BatchNorm
    trained at 1e-3 and 0.019 with the backbone's lr at 1e-3 too)."""

    def __init__(self, widths: tuple[int, ...] = (32, 64, 64, 128), strides: tuple[int, ...] = (2, 1, 2, 1)):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, stride=strides[0], padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        for i, (cin, cout, stride) in enumerate(zip(widths, widths[1:], strides[1:]), start=1):
            self.add_module(f"layer{i}", nn.Sequential(OrderedDict(
                conv=nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), bn=nn.BatchNorm2d(cout),
                relu=nn.ReLU(inplace=True))))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        return self.layer3(self.layer2(self.layer1(x)))


class DetrBackbone(nn.Module):
    """backbone.py's `BackboneBase`: `body` and `num_channels`; every image here is the same size,
    so its `NestedTensor` mask is all False (no padding) and `forward` returns the map alone."""

    def __init__(self):
        super().__init__()
        self.body = DetrBackboneBody()
        self.num_channels = 128

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class PositionEmbeddingSine(nn.Module):
    """models/position_encoding.py's `PositionEmbeddingSine` (temperature 10000, `normalize=True`,
    scale 2π, as `build_position_encoding` builds it with `N_steps = hidden_dim // 2`) over the
    not-mask's cumulative sums; the mask is all False here (unpadded images)."""

    def __init__(self, num_pos_feats: int = 64, temperature: int = 10000, normalize: bool = True):
        super().__init__()
        self.num_pos_feats, self.temperature, self.normalize = num_pos_feats, temperature, normalize
        self.scale = 2 * math.pi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        not_mask = torch.ones(x.shape[0], x.shape[2], x.shape[3], dtype=torch.bool, device=x.device)
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        if self.normalize:
            eps = 1e-6
            y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
            x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class DetrJoiner(nn.Sequential):
    """backbone.py's `Joiner(backbone, position_embedding)`: `backbone.0` the conv net, `backbone.1`
    the positional encoding of its output (hence detr's parameter names `backbone.0.body.…`)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self[0](x)
        return features, self[1](features).to(features.dtype)


class DetrTransformerEncoderLayer(nn.Module):
    """transformer.py's `TransformerEncoderLayer.forward_post` (`normalize_before` False): self-attention
    with the positional encoding added to queries and keys (not values), dropout, residual, LayerNorm;
    the ReLU FFN likewise."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, dropout: float):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, src: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        q = k = src + pos
        src2 = self.self_attn(q, k, value=src)[0]
        src = self.norm1(src + self.dropout1(src2))
        src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))
        return self.norm2(src + self.dropout2(src2))


class DetrTransformerDecoderLayer(nn.Module):
    """transformer.py's `TransformerDecoderLayer.forward_post`: self-attention among the object queries
    (`query_pos` added to q and k), cross-attention to the memory (`query_pos` on the queries, the
    encoder's `pos` on the keys), the ReLU FFN; each residual, dropout and post-LayerNorm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int, dropout: float):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, pos: torch.Tensor,
                query_pos: torch.Tensor) -> torch.Tensor:
        q = k = tgt + query_pos
        tgt2 = self.self_attn(q, k, value=tgt)[0]
        tgt = self.norm1(tgt + self.dropout1(tgt2))
        tgt2 = self.multihead_attn(query=tgt + query_pos, key=memory + pos, value=memory)[0]
        tgt = self.norm2(tgt + self.dropout2(tgt2))
        tgt2 = self.linear2(self.dropout(F.relu(self.linear1(tgt))))
        return self.norm3(tgt + self.dropout3(tgt2))


class DetrTransformerEncoder(nn.Module):
    """transformer.py's `TransformerEncoder` (post-norm: no final norm)."""

    def __init__(self, layers: int, **kwargs):
        super().__init__()
        self.layers = nn.ModuleList(DetrTransformerEncoderLayer(**kwargs) for _ in range(layers))

    def forward(self, src: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            src = layer(src, pos)
        return src


class DetrTransformerDecoder(nn.Module):
    """transformer.py's `TransformerDecoder` with `return_intermediate=True` and its `norm` (the
    decoder's LayerNorm): every layer's output normalised and stacked, (layers, Q, B, d)."""

    def __init__(self, layers: int, d_model: int, **kwargs):
        super().__init__()
        self.layers = nn.ModuleList(DetrTransformerDecoderLayer(d_model=d_model, **kwargs) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, pos: torch.Tensor,
                query_pos: torch.Tensor) -> torch.Tensor:
        intermediate = []
        for layer in self.layers:
            tgt = layer(tgt, memory, pos, query_pos)
            intermediate.append(self.norm(tgt))
        return torch.stack(intermediate)


class DetrTransformer(nn.Module):
    """transformer.py's `Transformer`: the (B, C, H, W) map flattened to (HW, B, C), the encoder, the
    decoder from zero targets with the learned queries as `query_pos`; `_reset_parameters`'s
    `xavier_uniform_` on every parameter of rank > 1. Returns hs (layers, B, Q, d)."""

    def __init__(self, d_model: int = DETR_HIDDEN, nhead: int = DETR_HEADS, num_encoder_layers: int = DETR_ENC_LAYERS,
                 num_decoder_layers: int = DETR_DEC_LAYERS, dim_feedforward: int = DETR_FFN,
                 dropout: float = DETR_DROPOUT):
        super().__init__()
        kwargs = {"nhead": nhead, "dim_feedforward": dim_feedforward, "dropout": dropout}
        self.encoder = DetrTransformerEncoder(num_encoder_layers, d_model=d_model, **kwargs)
        self.decoder = DetrTransformerDecoder(num_decoder_layers, d_model, **kwargs)
        self.d_model = d_model
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src: torch.Tensor, query_embed: torch.Tensor, pos_embed: torch.Tensor) -> torch.Tensor:
        bs = src.shape[0]
        src = src.flatten(2).permute(2, 0, 1)
        pos_embed = pos_embed.flatten(2).permute(2, 0, 1)
        query_embed = query_embed.unsqueeze(1).repeat(1, bs, 1)
        tgt = torch.zeros_like(query_embed)
        memory = self.encoder(src, pos_embed)
        hs = self.decoder(tgt, memory, pos_embed, query_embed)
        return hs.transpose(1, 2)


class DetrMLP(nn.Module):
    """detr.py's `MLP` ("very simple multi-layer perceptron (also called FFN)"): ReLU between layers."""

    def __init__(self, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int):
        super().__init__()
        h = [hidden_dim] * (num_layers - 1)
        self.num_layers = num_layers
        self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
        return x


class DETR(nn.Module):
    """detr.py's `DETR`: backbone → 1×1 `input_proj` → transformer with `query_embed` → `class_embed`
    (`Linear(d, num_classes + 1)`, the last the no-object class) and `bbox_embed` (a 3-layer MLP,
    sigmoid: normalised cx, cy, w, h) on every decoder layer's output; the last layer's as
    `pred_logits` / `pred_boxes`, the others' in `aux_outputs` (`aux_loss`, `_set_aux_loss`)."""

    def __init__(self, num_classes: int, num_queries: int = DETR_QUERIES):
        super().__init__()
        self.backbone = DetrJoiner(DetrBackbone(), PositionEmbeddingSine(DETR_HIDDEN // 2))
        self.transformer = DetrTransformer()
        hidden_dim = self.transformer.d_model
        self.num_queries = num_queries
        self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
        self.bbox_embed = DetrMLP(hidden_dim, hidden_dim, 4, 3)
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.input_proj = nn.Conv2d(self.backbone[0].num_channels, hidden_dim, kernel_size=1)
        self.aux_loss = True
        enc = [f"transformer.encoder.layers.{i}" for i in range(DETR_ENC_LAYERS)]
        dec = [f"transformer.decoder.layers.{i}" for i in range(DETR_DEC_LAYERS)]
        body = ["backbone.0.body.conv1", "backbone.0.body.bn1", *(f"backbone.0.body.layer{i}" for i in (1, 2, 3))]
        self.units = [*body, "input_proj", *enc, "query_embed", *dec, "transformer.decoder.norm",
                      "class_embed", "bbox_embed"]
        # An lr spike hits an encoder or decoder layer; the detach cuts the encoder's last layer (the
        # memory), whose output and every unit's before it reach the loss only through it (a decoder
        # layer's is not: each earlier decoder layer's output reaches the loss by its aux head too).
        self.hidden = [*dec, *enc]
        # Post-norm: every encoder and decoder layer's output (input_proj's too, after the first
        # residual) passes a LayerNorm; only the heads reach the loss without one.
        self.exposed = ["class_embed", "bbox_embed.layers.0", "bbox_embed.layers.1", "bbox_embed.layers.2"]
        # main.py's param_dicts: the backbone's parameters at `lr_backbone` (a path component `backbone`).
        self.lr_scale = {"backbone": DETR_LR_BACKBONE_SCALE}
        self.decay_everything = True  # main.py's AdamW(param_dicts, weight_decay=1e-4): every parameter decays

    def forward(self, samples: torch.Tensor) -> dict:
        src, pos = self.backbone(samples)
        hs = self.transformer(self.input_proj(src), self.query_embed.weight, pos)
        outputs_class = self.class_embed(hs)
        outputs_coord = self.bbox_embed(hs).sigmoid()
        out = {"pred_logits": outputs_class[-1], "pred_boxes": outputs_coord[-1]}
        if self.aux_loss:
            out["aux_outputs"] = [{"pred_logits": a, "pred_boxes": b}
                                  for a, b in zip(outputs_class[:-1], outputs_coord[:-1])]
        return out


def detr_targets(y: dict) -> list[dict]:
    """engine.py's `targets` (one dict of `labels` and `boxes` an image) from the collated batch's
    padded rows (labels −1 past each image's objects)."""
    return [{"labels": labels[labels >= 0], "boxes": boxes[labels >= 0]} for labels, boxes in zip(y["labels"], y["boxes"])]


class HungarianMatcher(nn.Module):
    """models/matcher.py's `HungarianMatcher`: under `torch.no_grad`, the batch's (B·Q, ΣT) cost
    cost_class · (−p(class)) + cost_bbox · L1(cxcywh) + cost_giou · (−GIoU), split per image and
    solved by scipy's `linear_sum_assignment`. The one departure: a cost matrix with NaN or ±inf in it
    (a run whose outputs went non-finite) has them replaced by finite numbers first, where upstream's
    scipy raises ValueError ("matrix contains invalid numeric entries") and the run dies in the
    matcher; here the step's loss (NaN) is computed and recorded as every other family's is."""

    def __init__(self, cost_class: float = 1, cost_bbox: float = 1, cost_giou: float = 1):
        super().__init__()
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou

    @torch.no_grad()
    def forward(self, outputs: dict, targets: list[dict]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        from scipy.optimize import linear_sum_assignment

        bs, num_queries = outputs["pred_logits"].shape[:2]
        out_prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)
        out_bbox = outputs["pred_boxes"].flatten(0, 1)
        tgt_ids = torch.cat([v["labels"] for v in targets])
        tgt_bbox = torch.cat([v["boxes"] for v in targets])
        cost_class = -out_prob[:, tgt_ids]
        cost_bbox = torch.cdist(out_bbox, tgt_bbox, p=1)
        finite = torch.isfinite(out_bbox).all()
        xyxy = detr_box_cxcywh_to_xyxy(out_bbox if finite else torch.nan_to_num(out_bbox))
        cost_giou = -detr_generalized_box_iou(xyxy, detr_box_cxcywh_to_xyxy(tgt_bbox))
        C = self.cost_bbox * cost_bbox + self.cost_class * cost_class + self.cost_giou * cost_giou
        C = C.view(bs, num_queries, -1).cpu()
        C = torch.nan_to_num(C, nan=1e6, posinf=1e6, neginf=-1e6)  # the departure (see above)
        sizes = [len(v["boxes"]) for v in targets]
        indices = [linear_sum_assignment(c[i]) for i, c in enumerate(C.split(sizes, -1))]
        return [(torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)) for i, j in indices]


class SetCriterion(nn.Module):
    """detr.py's `SetCriterion` with losses ['labels', 'boxes']: the Hungarian match of the last
    layer's predictions, cross-entropy over every query (unmatched ones to the no-object class,
    weighted `eos_coef`: `empty_weight`), L1 and 1 − GIoU of the matched boxes each over the batch's
    `num_boxes`; and the same for every `aux_outputs` entry (its own matching, keys suffixed `_i`).
    Returns the loss dict scaled by `weight_dict`, engine.py's `loss_dict_reduced_scaled`, whose
    sum is the loss backpropagated. (`loss_cardinality` and `class_error` are logging only, under
    no_grad, and left out.)"""

    def __init__(self, num_classes: int, matcher: HungarianMatcher, weight_dict: dict, eos_coef: float):
        super().__init__()
        self.num_classes, self.matcher, self.weight_dict, self.eos_coef = num_classes, matcher, weight_dict, eos_coef
        empty_weight = torch.ones(num_classes + 1)
        empty_weight[-1] = eos_coef
        self.register_buffer("empty_weight", empty_weight)

    @staticmethod
    def _get_src_permutation_idx(indices):
        batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
        return batch_idx, torch.cat([src for (src, _) in indices])

    def loss_labels(self, outputs, targets, indices, num_boxes):
        src_logits = outputs["pred_logits"]
        idx = self._get_src_permutation_idx(indices)
        target_classes_o = torch.cat([t["labels"][J] for t, (_, J) in zip(targets, indices)])
        target_classes = torch.full(src_logits.shape[:2], self.num_classes, dtype=torch.int64)
        target_classes[idx] = target_classes_o
        return {"loss_ce": F.cross_entropy(src_logits.transpose(1, 2), target_classes, self.empty_weight)}

    def loss_boxes(self, outputs, targets, indices, num_boxes):
        idx = self._get_src_permutation_idx(indices)
        src_boxes = outputs["pred_boxes"][idx]
        target_boxes = torch.cat([t["boxes"][i] for t, (_, i) in zip(targets, indices)], dim=0)
        loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction="none")
        src_xyxy = detr_box_cxcywh_to_xyxy(src_boxes)
        if not torch.isfinite(src_xyxy).all():  # GIoU's asserts would raise on NaN: the NaN carried on instead
            loss_giou = src_boxes.sum() * math.nan
        else:
            loss_giou = (1 - torch.diag(detr_generalized_box_iou(src_xyxy, detr_box_cxcywh_to_xyxy(target_boxes)))).sum()
        return {"loss_bbox": loss_bbox.sum() / num_boxes, "loss_giou": loss_giou / num_boxes}

    def forward(self, outputs: dict, targets: list[dict]) -> dict[str, torch.Tensor]:
        outputs_without_aux = {k: v for k, v in outputs.items() if k != "aux_outputs"}
        indices = self.matcher(outputs_without_aux, targets)
        num_boxes = max(float(sum(len(t["labels"]) for t in targets)), 1.0)  # one process: no all_reduce
        losses = {**self.loss_labels(outputs, targets, indices, num_boxes),
                  **self.loss_boxes(outputs, targets, indices, num_boxes)}
        for i, aux_outputs in enumerate(outputs.get("aux_outputs", [])):
            indices = self.matcher(aux_outputs, targets)
            for name, value in {**self.loss_labels(aux_outputs, targets, indices, num_boxes),
                                **self.loss_boxes(aux_outputs, targets, indices, num_boxes)}.items():
                losses[f"{name}_{i}"] = value
        return {k: v * self.weight_dict[k] for k, v in losses.items() if k in self.weight_dict}


def detr_weight_dict(dec_layers: int = DETR_DEC_LAYERS) -> dict[str, float]:
    """detr.py's `build`: the coefficients, copied for each auxiliary layer (`_i`, i < dec_layers − 1)."""
    weights = dict(DETR_LOSS_COEF)
    for i in range(dec_layers - 1):
        weights.update({f"{k}_{i}": v for k, v in DETR_LOSS_COEF.items()})
    return weights


def detr_criterion(num_classes: int) -> SetCriterion:
    """detr.py's `build`: `HungarianMatcher(cost_class=1, cost_bbox=5, cost_giou=2)` and
    `SetCriterion(num_classes, matcher, weight_dict, eos_coef=0.1, losses=['labels', 'boxes'])`."""
    return SetCriterion(num_classes, HungarianMatcher(*DETR_SET_COST), detr_weight_dict(), DETR_EOS_COEF)


def detr_loss(num_classes: int) -> Callable[[dict, dict], dict[str, torch.Tensor]]:
    """The loop's `loss_fn`: the criterion on the model's outputs and the batch's targets."""
    criterion = detr_criterion(num_classes)
    return lambda outputs, y: criterion(outputs, detr_targets(y))


def detr_postprocess(outputs: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """detr.py's `PostProcess` (boxes left normalised): each query's best real class and its
    probability (softmax over every class, the no-object one dropped), its box as x1y1x2y2."""
    prob = F.softmax(outputs["pred_logits"], -1)
    scores, labels = prob[..., :-1].max(-1)
    return scores, labels, detr_box_cxcywh_to_xyxy(outputs["pred_boxes"])


def voc_ap50(scores: list[np.ndarray], labels: list[np.ndarray], boxes: list[np.ndarray],
             gt_labels: list[np.ndarray], gt_boxes: list[np.ndarray], classes: int,
             iou_threshold: float = 0.5) -> float:
    """PASCAL VOC's AP at IoU 0.5 averaged over the classes that have ground truth (VOC 2010's
    all-point interpolation: the area under the precision envelope): per class every detection of
    the held-out images by descending score, a true positive where its IoU with a not yet matched
    ground-truth box of its class in its image is the highest and ≥ 0.5, a false positive otherwise."""
    aps = []
    for c in range(classes):
        total = sum(int((g == c).sum()) for g in gt_labels)
        if total == 0:
            continue
        found = [(float(s), i, b) for i, (ss, ls, bs) in enumerate(zip(scores, labels, boxes))
                 for s, l, b in zip(ss, ls, bs) if l == c]
        found.sort(key=lambda item: -item[0])
        taken = [np.zeros(int((g == c).sum()), dtype=bool) for g in gt_labels]
        tp = np.zeros(len(found))
        for k, (_, i, b) in enumerate(found):
            gt = gt_boxes[i][gt_labels[i] == c]
            if len(gt) == 0:
                continue
            lt, rb = np.maximum(gt[:, :2], b[:2]), np.minimum(gt[:, 2:], b[2:])
            inter = np.clip(rb - lt, 0, None).prod(1)
            union = (b[2:] - b[:2]).prod() + (gt[:, 2:] - gt[:, :2]).prod(1) - inter
            iou = inter / union
            best = int(np.argmax(iou))
            if iou[best] >= iou_threshold and not taken[i][best]:
                taken[i][best], tp[k] = True, 1.0
        tps = np.cumsum(tp)
        recall = tps / total
        precision = tps / np.arange(1, len(found) + 1)
        mrec = np.concatenate([[0.0], recall, [1.0]])
        mpre = np.concatenate([[0.0], precision, [0.0]])
        mpre = np.maximum.accumulate(mpre[::-1])[::-1]
        changes = np.where(mrec[1:] != mrec[:-1])[0]
        aps.append(float(((mrec[changes + 1] - mrec[changes]) * mpre[changes + 1]).sum()))
    return float(np.mean(aps))


@torch.no_grad()
def detr_evaluate_ap50(model: DETR, images: torch.Tensor, labels: torch.Tensor, boxes: torch.Tensor,
                       batch: int = 100) -> float:
    """engine.py's `evaluate` reduced to one number: the model in eval mode, `PostProcess` on each
    held-out batch, VOC AP50 over the classes (`voc_ap50`; COCO's evaluator reports AP at 0.5 among
    its twelve numbers); back to train mode after."""
    was_training = model.training
    model.eval()
    scores, found, predicted = [], [], []
    for start in range(0, len(images), batch):
        s, l, b = detr_postprocess(model(images[start:start + batch]))
        scores.extend(s.float().numpy())
        found.extend(l.numpy())
        predicted.extend(b.float().numpy())
    model.train(was_training)
    gt_labels = [row[row >= 0].numpy() for row in labels]
    gt_boxes = [detr_box_cxcywh_to_xyxy(b[row >= 0]).numpy() for row, b in zip(labels, boxes)]
    classes = int(model.class_embed.out_features - 1)
    return voc_ap50(scores, found, predicted, gt_labels, gt_boxes, classes)
DEEPAR_PREDICTION_LENGTH = 24
"""`prediction_length`: a day of hours (`data.RELATED_SERIES`)."""
DEEPAR_CONTEXT_LENGTH = DEEPAR_PREDICTION_LENGTH
"""`context_length`: GluonTS's `DeepAREstimator` default, the prediction length."""
DEEPAR_LAGS = (1, 2, 3, 4, 5, 6, 7, 23, 24, 25, 47, 48, 49, 71, 72, 73, 95, 96, 97, 119, 120, 121, 143, 144, 145,
               167, 168, 169)
"""`lags_seq`: GluonTS's `get_lags_for_frequency("H")` up to a week (its 2-4 week and 30-day lags,
335-721, cut: the series are 28 days long)."""
DEEPAR_TIME_FEATURES = 3
"""`time_features_from_frequency_str("H")`'s hour-of-day and day-of-week, each in [−0.5, 0.5] (its
day-of-month and day-of-year left out: 28 days of one synthetic month), and `AddAgeFeature`'s
log10(2 + t), t the hour since the series began."""
DEEPAR_HIDDEN = 40
"""`hidden_size` (GluonTS's default 40)."""
DEEPAR_LAYERS = 2
"""`num_layers` (GluonTS's default 2)."""
DEEPAR_DROPOUT = 0.1
"""`dropout_rate` (GluonTS's default 0.1): `nn.LSTM(dropout=...)`, between the two layers."""
DEEPAR_EMBEDDING = 24
"""`embedding_dimension`: GluonTS's default min(50, (cardinality + 1) // 2) for 48 series."""
DEEPAR_SAMPLES = 20
"""`num_parallel_samples`: sample paths a series a forecast (GluonTS's default 100; 20 here, where a
run forecasts the held-out day after every one of its 150 steps: 100 took ~0.3 s a forecast on one
thread, 45 of a run's 55 s)."""
DEEPAR_QUANTILES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""GluonTS `Evaluator`'s default quantiles, over which `mean_wQuantileLoss` averages."""


class MeanScaler(nn.Module):
    """GluonTS torch's `MeanScaler(dim=1, keepdim=True)`: each series' scale the mean |value| over its
    observed context; a series whose context sums to 0 (none observed, or all zeros: an intermittent
    series' quiet day) gets the batch's mean scale (`default_scale` None); floored at
    `minimum_scale` 1e-10 and detached; returns (data / scale, scale)."""

    def __init__(self, minimum_scale: float = 1e-10) -> None:
        super().__init__()
        self.minimum_scale = minimum_scale

    def forward(self, data: torch.Tensor, observed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ts_sum = (data * observed).abs().sum(1, keepdim=True)
        num_observed = observed.sum(1, keepdim=True)
        default_scale = ts_sum.sum(0) / torch.clamp(num_observed.sum(0), min=1)
        scale = ts_sum / torch.clamp(num_observed, min=1)
        scale = torch.where(ts_sum > 0, scale, default_scale)
        scale = torch.clamp(scale, min=self.minimum_scale).detach()
        return data / scale, scale


class FeatureEmbedder(nn.Module):
    """GluonTS's `FeatureEmbedder`: one `nn.Embedding` a categorical feature (`_embedders`), their
    outputs concatenated; here one feature, the series' ID."""

    def __init__(self, cardinalities: list[int], embedding_dims: list[int]) -> None:
        super().__init__()
        self._embedders = nn.ModuleList([nn.Embedding(c, d) for c, d in zip(cardinalities, embedding_dims)])

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.cat([embed(cat.squeeze(-1)) for embed, cat in
                          zip(self._embedders, torch.chunk(features, len(self._embedders), dim=-1))], dim=-1)


class StudentTProjection(nn.Module):
    """GluonTS's `StudentTOutput().get_args_proj(hidden_size)` (`PtArgProj`): `proj`, one Linear a
    distribution argument (df, loc, scale), then `StudentTOutput.domain_map`: scale = softplus(scale)
    (GluonTS's later releases: squareplus), df = 2 + softplus(df); returns (df, loc, scale)."""

    def __init__(self, in_features: int) -> None:
        super().__init__()
        self.proj = nn.ModuleList([nn.Linear(in_features, 1) for _ in range(3)])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        df, loc, scale = (proj(x).squeeze(-1) for proj in self.proj)
        return 2.0 + F.softplus(df), loc, F.softplus(scale)


def deepar_time_features(hours: torch.Tensor) -> torch.Tensor:
    """(…, 3) time features at `hours` (an integer tensor of hours since the series began):
    `HourOfDay` and `DayOfWeek` as GluonTS's `time_feature` module scales them (index / (n − 1) −
    0.5), `AddAgeFeature(log_scale=True)`'s log10(2 + t)."""
    hour = (hours % 24).float() / 23.0 - 0.5
    day = ((hours // 24) % 7).float() / 6.0 - 0.5
    return torch.stack([hour, day, torch.log10(2.0 + hours.float())], dim=-1)


class DeepAR(nn.Module):
    """GluonTS's `gluonts/torch/model/deepar/module.py` `DeepARModel` (Salinas et al. 2020): an
    autoregressive LSTM over lagged, mean-scaled targets, time features and static features, its
    output projected to a Student's t a time step. `embedder` (`FeatureEmbedder` of the series ID,
    `DEEPAR_EMBEDDING` wide), `rnn` (`nn.LSTM`, `DEEPAR_LAYERS` × `DEEPAR_HIDDEN`, dropout
    `DEEPAR_DROPOUT`, batch first), `param_proj` (`StudentTProjection`), `scaler` (`MeanScaler` of
    the context window).

    Its forward is `unroll_lagged_rnn` on a training batch (the `InstanceSplitter`'s fields:
    `feat_static_cat`, `feat_static_real`, `past_time_feat`, `past_target`, `past_observed_values`
    over the past `DEEPAR_CONTEXT_LENGTH + max(DEEPAR_LAGS)` steps, `future_time_feat`,
    `future_target`, `future_observed_values` over the next `DEEPAR_PREDICTION_LENGTH`): the scale
    of the last `context_length` past values; the sequence past + future divided by it; at each of
    the context_length − 1 + prediction_length unrolled steps τ the input is the scaled values at τ
    − l for every lag l (`lagged_sequence_values`), the time features at τ, and the static features
    (the embedding, `feat_static_real`, log scale), teacher-forced; it returns what
    `DeepARLightningModule._compute_loss` reads, ((df, loc, scale) stacked (B, T, 3), the scale (B,
    1), the target window past[-context_length + 1:] + future (B, T) and its observed mask)."""

    def __init__(self, num_series: int, lags: tuple[int, ...] = DEEPAR_LAGS,
                 context_length: int = DEEPAR_CONTEXT_LENGTH, prediction_length: int = DEEPAR_PREDICTION_LENGTH,
                 hidden: int = DEEPAR_HIDDEN, layers: int = DEEPAR_LAYERS, dropout: float = DEEPAR_DROPOUT,
                 embedding: int = DEEPAR_EMBEDDING) -> None:
        super().__init__()
        self.lags = lags
        self.context_length, self.prediction_length = context_length, prediction_length
        self.past_length = context_length + max(lags)
        self.embedder = FeatureEmbedder([num_series], [embedding])
        # lags, time features, embedding, feat_static_real (GluonTS's dummy [0.0]), log scale
        self.rnn = nn.LSTM(len(lags) + DEEPAR_TIME_FEATURES + embedding + 1 + 1, hidden, layers, dropout=dropout,
                           batch_first=True)
        self.param_proj = StudentTProjection(hidden)
        self.scaler = MeanScaler()
        self.units = ["embedder", "rnn", "param_proj"]
        self.hidden = ["rnn"]  # the LSTM: a detach cuts it and the embedding off, the projection learns on
        self.exposed = ["embedder._embedders.0", "rnn", "param_proj.proj.0", "param_proj.proj.1", "param_proj.proj.2"]
        # DeepARLightningModule.configure_optimizers: Adam(self.model.parameters(), lr, weight_decay):
        # every parameter alike, one group a unit.
        self.decay_everything = True

    def _static(self, batch: dict[str, torch.Tensor], scale: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.embedder(batch["feat_static_cat"]), batch["feat_static_real"], scale.log()], dim=-1)

    def _inputs(self, sequence: torch.Tensor, start: int, steps: int, time_feat: torch.Tensor,
                static: torch.Tensor) -> torch.Tensor:
        """The RNN's inputs at positions start … start + steps − 1 of the scaled `sequence`: its
        value at τ − l for each lag l, the time features, the static features."""
        lagged = torch.stack([sequence[:, start - lag: start - lag + steps] for lag in self.lags], dim=-1)
        return torch.cat([lagged, time_feat, static.unsqueeze(1).expand(-1, steps, -1)], dim=-1)

    def unroll_lagged_rnn(self, batch: dict[str, torch.Tensor]):
        past, observed = batch["past_target"], batch["past_observed_values"]
        context = past[:, -self.context_length:]
        _, scale = self.scaler(context, observed[:, -self.context_length:])
        sequence = torch.cat([past, batch["future_target"]], dim=1) / scale
        time_feat = torch.cat([batch["past_time_feat"][:, -self.context_length + 1:], batch["future_time_feat"]],
                              dim=1)
        steps = self.context_length - 1 + self.prediction_length
        inputs = self._inputs(sequence, self.past_length - self.context_length + 1, steps, time_feat,
                              self._static(batch, scale))
        output, _ = self.rnn(inputs)
        return torch.stack(self.param_proj(output), dim=-1), scale

    def forward(self, batch: dict[str, torch.Tensor]):
        params, scale = self.unroll_lagged_rnn(batch)
        target = torch.cat([batch["past_target"][:, -self.context_length + 1:], batch["future_target"]], dim=1)
        observed = torch.cat([batch["past_observed_values"][:, -self.context_length + 1:],
                              batch["future_observed_values"]], dim=1)
        return params, scale, target, observed


def deepar_loss(output, _targets=None) -> torch.Tensor:
    """`DeepARLightningModule._compute_loss`: the Student's t negative log-likelihood of each
    unrolled step's target, averaged over the observed ones (`weighted_average`), here of the target
    divided by the series' scale. GluonTS's `distr_output.loss(target, params, scale)` scores the
    unscaled target under the `AffineTransformed` t, which adds log(scale) a step: a constant of the
    data, the same gradients. Not bounded below by 0: a sharp, right t scores a negative NLL."""
    params, scale, target, observed = output
    df, loc, t_scale = params.unbind(-1)
    nll = -student_t_log_prob(target / scale, df, loc, t_scale)
    return (nll * observed).sum() / torch.clamp(observed.sum(), min=1.0)


def student_t_log_prob(value: torch.Tensor, df: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`torch.distributions.StudentT(df, loc, scale).log_prob(value)`'s formula, without its argument
    check: StudentT builds a `Chi2(df)` that validates by default and raises a ValueError at the
    first NaN parameter; the zoo's loops see a NaN loss instead, as for every family."""
    y = (value - loc) / scale
    z = scale.log() + 0.5 * df.log() + 0.5 * math.log(math.pi) + torch.lgamma(0.5 * df) - torch.lgamma(0.5 * (df + 1.0))
    return -0.5 * (df + 1.0) * torch.log1p(y ** 2.0 / df) - z


def student_t_sample(df: torch.Tensor, loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`StudentT(df, loc, scale).sample()` as torch draws it (a standard normal, then a χ²(df) as
    Gamma(df / 2, rate 1/2)), without the argument check (`student_t_log_prob`)."""
    x = torch.randn_like(loc)
    chi2 = torch.distributions.Gamma(0.5 * df, torch.full_like(df, 0.5), validate_args=False).sample()
    return loc + scale * x * torch.rsqrt(chi2 / df)


def deepar_sample_paths(model: DeepAR, batch: dict[str, torch.Tensor], num_samples: int = DEEPAR_SAMPLES) -> torch.Tensor:
    """`DeepARModel.forward` (prediction): the context unrolled once (its last step's output the
    first future value's t), each series' LSTM state repeated `num_samples` times
    (`repeat_interleave`), then prediction_length − 1 steps that each sample the next value and feed
    it back, scaled, as the lags' newest value; returns (B, num_samples, prediction_length) paths in
    the data's units, drawn in float32 (under bf16 autocast too). The caller owns the mode and the
    random state."""
    past = batch["past_target"]
    context_len, horizon = model.context_length, model.prediction_length
    _, scale = model.scaler(past[:, -context_len:], batch["past_observed_values"][:, -context_len:])
    static = model._static(batch, scale)
    sequence = past / scale
    time_feat = torch.cat([batch["past_time_feat"][:, -context_len + 1:], batch["future_time_feat"][:, :1]], dim=1)
    inputs = model._inputs(sequence, model.past_length - context_len + 1, context_len, time_feat, static)
    output, state = model.rnn(inputs)
    repeat = lambda x, dim=0: x.repeat_interleave(num_samples, dim=dim)  # noqa: E731
    state = tuple(repeat(s, dim=1) for s in state)
    sequence, scale, static = repeat(sequence), repeat(scale), repeat(static)
    future_time_feat = repeat(batch["future_time_feat"])
    float32 = lambda args: tuple(a.float() for a in args)  # noqa: E731 - under bf16 autocast: no bf16 gamma sampler
    params = float32(model.param_proj(repeat(output[:, -1:])))
    samples = []
    for k in range(horizon):
        scaled = student_t_sample(*params)
        samples.append(scaled * scale)
        sequence = torch.cat([sequence, scaled], dim=1)
        if k == horizon - 1:
            break
        step_in = model._inputs(sequence, sequence.shape[1], 1, future_time_feat[:, k + 1:k + 2], static)
        output, state = model.rnn(step_in, state)
        params = float32(model.param_proj(output))
    return torch.cat(samples, dim=1).view(past.shape[0], num_samples, horizon)


def mean_weighted_quantile_loss(samples: torch.Tensor, target: torch.Tensor,
                                quantiles: tuple[float, ...] = DEEPAR_QUANTILES) -> float:
    """GluonTS `Evaluator`'s `mean_wQuantileLoss` over the whole set: for each quantile q the
    forecast's empirical q-quantile of the sample paths (B, S, P), its weighted quantile loss
    2 Σ |(y − ŷ_q)(1{y ≤ ŷ_q} − q)| / Σ |y| over every series and step, averaged over the quantiles
    (a CRPS estimate; lower is better, 0 a perfect forecast)."""
    levels = torch.tensor(quantiles, dtype=samples.dtype)
    forecast = torch.quantile(samples, levels, dim=1)  # (Q, B, P): np.quantile's linear interpolation
    q = levels[:, None, None]
    losses = 2 * ((target - forecast) * ((target <= forecast).to(samples.dtype) - q)).abs().sum((1, 2)) / target.abs().sum()
    return float(losses.mean())


FIELD_ARCHS = ("gpt", "transformer", "resnet", "gru", "vit", "lstm_lm", "mixer", "tcn", "llama", "autoencoder",
               "recsys", "moe", "vae", "unet", "seq2seq", "gnn", "simclr", "ddpm", "ctc", "mamba", "fttransformer",
               "convnext", "bert_mlm", "siren", "pointnet", "t5", "clip", "densenet", "reinforce", "wgan_gp", "swin",
               "dqn", "distil", "byol", "realnvp", "transe", "kws", "lora", "vqvae", "nbeats", "word2vec", "triplet",
               "sam", "ppo", "detector", "efficientnet", "pinn", "maml", "pix2pix", "bilstm_crf", "pixelcnn", "neural_ode",
               "nerf", "capsnet", "sac", "mae", "rwkv", "tabnet", "perceiver", "wavenet",
               "set_transformer", "conformer", "gat", "neural_process", "kan", "hypernetwork", "dit", "sae",
               "sngan", "electra_ft", "muon_gpt", "deeplab", "decision_transformer", "patchtst", "timm_mixup",
               "gradual_pruning", "qat", "albert", "deq", "ddp_wrn", "moco", "swa_gc",
               "tacotron", "link_pred", "dino", "detr", "deepar")
CONTEXT = 32
"""Tokens per sequence of the language models."""


FIELD_MODELS: dict[str, Callable[[int], nn.Module]] = {
    "gpt": lambda vocab: nanogpt_init(TinyGPT(vocab=vocab, context=CONTEXT, width=32, heads=4, layers=2)),
    "transformer": lambda vocab: EncoderClassifier(),
    "resnet": lambda vocab: ResNet(),
    "gru": lambda vocab: GRULM(vocab),
    "vit": lambda vocab: ViT(),
    "lstm_lm": lambda vocab: TiedLSTMLM(vocab),
    "mixer": lambda vocab: Mixer(),
    "tcn": lambda vocab: TCN(),
    "llama": lambda vocab: Llama(vocab, context=CONTEXT),
    "autoencoder": lambda vocab: ConvAutoencoder(),
    "recsys": lambda vocab: RecSys(CLICKS.cardinalities, CLICKS.items, CLICKS.dense),
    "moe": lambda vocab: MoELM(vocab, context=CONTEXT),
    "vae": lambda vocab: VAE(),
    "unet": lambda vocab: UNet(vocab),
    "seq2seq": lambda vocab: Seq2Seq(vocab),
    "gnn": lambda vocab: GCN(GRAPH.features, vocab),
    "simclr": lambda vocab: SimCLR(),
    "ddpm": lambda vocab: GaussianDiffusion(Denoiser()),
    "ctc": lambda vocab: CTCRecognizer(SPEECH.features, vocab),
    "mamba": lambda vocab: Mamba(vocab),
    "fttransformer": lambda vocab: FTTransformer(TABLE.numeric, TABLE.cardinalities, vocab),
    "convnext": lambda vocab: ConvNeXt(vocab),
    "bert_mlm": lambda vocab: BertMLM(vocab, positions=MLM.longest),
    "siren": lambda vocab: Siren(),
    "pointnet": lambda vocab: PointNet(vocab),
    "t5": lambda vocab: t5_sorter(vocab),
    "clip": lambda vocab: CLIP(vocab, CAPTIONS.length),
    "densenet": lambda vocab: DenseNet(vocab),
    "reinforce": lambda vocab: ActorCritic(CARTPOLE.observations, CARTPOLE.actions),
    "wgan_gp": lambda vocab: WGANGP(RING.noise),
    "swin": lambda vocab: swin_classifier(vocab),
    "dqn": lambda vocab: QNetwork(CARTPOLE.observations, CARTPOLE.actions),
    "distil": lambda vocab: KDStudent(vocab),
    "byol": lambda vocab: BYOL(),
    "realnvp": lambda vocab: RealNVP(DENSITY.dims),
    "transe": lambda vocab: TransE(KNOWLEDGE_GRAPH.entities, KNOWLEDGE_GRAPH.relations),
    "kws": lambda vocab: M5(vocab),
    "lora": lambda vocab: lora_gpt(vocab),
    "vqvae": lambda vocab: VQVAE(),
    "nbeats": lambda vocab: NBeats(SERIES.inputs, SERIES.horizon),
    "word2vec": lambda vocab: SkipGramModel(TOPICS.vocab),
    "triplet": lambda vocab: TripletEmbeddingNet(),
    "sam": lambda vocab: WideResNet(labels=vocab),
    "ppo": lambda vocab: PPOAgent(CARTPOLE.observations, CARTPOLE.actions),
    "detector": lambda vocab: TinyFCOS(vocab),
    "efficientnet": lambda vocab: EfficientNet(vocab),
    "pinn": lambda vocab: PoissonPINN(),
    "maml": lambda vocab: SineMAML(),
    "pix2pix": lambda vocab: Pix2Pix(),
    "bilstm_crf": lambda vocab: BiLSTMCRF(TAGGING.vocab, vocab),
    "pixelcnn": lambda vocab: PixelCNN(vocab),
    "neural_ode": lambda vocab: NeuralODE(),
    "nerf": lambda vocab: TinyNeRF(near=NERF_SCENE.near, far=NERF_SCENE.far),
    "capsnet": lambda vocab: CapsuleNet(vocab),
    "sac": lambda vocab: SoftActorCritic(POINT_MASS.observations, POINT_MASS.actions),
    "mae": lambda vocab: MaskedAutoencoderViT(),
    "rwkv": lambda vocab: RWKV(vocab),
    "tabnet": lambda vocab: TabNet(TABLE.numeric, TABLE.cardinalities, vocab),
    "perceiver": lambda vocab: Perceiver(vocab),
    "wavenet": lambda vocab: WaveNet(vocab),
    "set_transformer": lambda vocab: SetTransformer(dim_output=vocab),
    "conformer": lambda vocab: ConformerCTC(vocab + 1),
    "gat": lambda vocab: GAT(GRAPH.features, vocab),
    "neural_process": lambda vocab: ConditionalNeuralProcess(),
    "kan": lambda vocab: KAN((64, 32, vocab)),
    "hypernetwork": lambda vocab: HyperNetCNN(vocab),
    "dit": lambda vocab: DiTDiffusion(DiT(num_classes=vocab)),
    "sae": lambda vocab: SparseAutoencoder(),
    "sngan": lambda vocab: SNGAN(),
    "electra_ft": lambda vocab: ElectraClassifier(classes=vocab),
    "muon_gpt": lambda vocab: MuonGPT(vocab),
    "deeplab": lambda vocab: DeepLabV3(classes=vocab),
    "decision_transformer": lambda vocab: DecisionTransformer(),
    "patchtst": lambda vocab: PatchTST(ETT_LIKE.channels, ETT_LIKE.lookback, ETT_LIKE.horizon),
    "timm_mixup": lambda vocab: TimmResNet(classes=vocab),
    "gradual_pruning": lambda vocab: AGPVGG(classes=vocab),
    "qat": lambda vocab: qat_prepare(QatMobileNetV2(classes=vocab)),
    "albert": lambda vocab: albert_classifier(classes=vocab),
    "deq": lambda vocab: DEQClassifier(classes=vocab),
    # The bare Wide ResNet: `field._train` wraps it in DistributedDataParallel inside a process group.
    "ddp_wrn": lambda vocab: WideResNetDDP(classes=vocab),
    "moco": lambda vocab: MoCo(),
    "swa_gc": lambda vocab: SwaGcResNet(classes=vocab),
    "tacotron": lambda vocab: Tacotron2(),
    "link_pred": lambda vocab: SageLinkPredictor(LINK_GRAPH.features),
    "dino": lambda vocab: dino_student(),
    "detr": lambda vocab: DETR(num_classes=vocab),
    "deepar": lambda vocab: DeepAR(num_series=vocab),
}
"""Each architecture's model from `vocab`: the LMs' and the seq2seq model's vocabulary, the classes
of the segmentation and node classifiers, the CTC model's symbols + blank, the Conformer's tokens (its
head adds the blank) (ignored by the others)."""


def build_field_model(arch: str, vocab: int) -> nn.Module:
    """The architecture's model (`FIELD_MODELS`)."""
    if arch not in FIELD_MODELS:
        raise ValueError(f"unknown field architecture {arch!r}")
    return FIELD_MODELS[arch](vocab)
