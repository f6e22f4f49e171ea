//! Analytic FLOP counts for the FLOPs side of MFU, when no counter measured them.
//!
//! Conventions, the same as nanoGPT's `estimate_mfu`, PaLM (arXiv 2204.02311, appendix B) and
//! the vendors' peak figures they are divided by:
//!
//! - A multiply-add is **2 FLOPs**, so a dense `in → out` layer costs `2·in·out` per input row.
//! - Only the matrix work counts: activations, normalisation, softmax and the optimizer's update
//!   are left out (a few percent for dense models).
//! - A training step is forward + backward, and the backward pass of a dense layer does the
//!   work twice (gradients for the inputs and for the weights): **step ≈ 3 × forward**.
//! - Counts are per sample (per input row); for a sequence model, multiply by the tokens a
//!   sample holds, or use [`transformer_flops_per_token`].
//!
//! With gradient accumulation, a step's FLOPs are those of every micro-batch of the
//! optimizer step: pass all of its samples to [`training_step`].

/// Forward FLOPs of a dense (linear) layer for one input row: `2·in·out`, plus `out` for the
/// bias additions.
pub fn linear(in_features: usize, out_features: usize, bias: bool) -> f64 {
    let in_features = in_features as f64;
    let out_features = out_features as f64;
    let bias_flops = if bias { out_features } else { 0.0 };
    2.0 * in_features * out_features + bias_flops
}

/// Forward FLOPs of a 2-D convolution for one sample.
///
/// Each of the `out_channels × output_h × output_w` outputs takes
/// `(in_channels / groups) × kernel_h × kernel_w` multiply-adds, plus one addition for the bias.
/// `groups` should divide `in_channels` (Burn's `Conv2dConfig` requires it); a `groups` of 0
/// counts as 1. Stride, padding and dilation only act through `output_hw`.
pub fn conv2d(
    in_channels: usize,
    out_channels: usize,
    kernel: [usize; 2],
    output_hw: [usize; 2],
    groups: usize,
    bias: bool,
) -> f64 {
    let outputs = out_channels as f64 * output_hw[0] as f64 * output_hw[1] as f64;
    let inputs_per_output =
        in_channels as f64 / groups.max(1) as f64 * kernel[0] as f64 * kernel[1] as f64;
    let bias_flops = if bias { outputs } else { 0.0 };
    2.0 * inputs_per_output * outputs + bias_flops
}

/// FLOPs of one training step (forward + backward) over `samples` samples: `3 × forward ×
/// samples`. With gradient accumulation, `samples` is every sample of the optimizer step.
pub fn training_step(forward_flops_per_sample: f64, samples: u64) -> f64 {
    3.0 * forward_flops_per_sample * samples as f64
}

/// Training FLOPs (forward + backward) per token of a decoder-only transformer: `6N + 12·L·H·Q·T`.
///
/// `6N` is the matrix work of the `params` weights (2 forward + 4 backward per weight and token);
/// `12·L·H·Q·T` is attention's scores and weighted sum over a context of `seq_len` tokens in
/// `layers` layers of `heads` heads of size `head_dim`. This is karpathy/nanoGPT's
/// `estimate_mfu`, after PaLM (arXiv 2204.02311) appendix B. nanoGPT counts `params` without the
/// position embedding (a lookup, no matrix work); a token embedding tied to the output head
/// stays in, because the head's matmul is real. Multiply by the tokens of an optimizer step for
/// its FLOPs.
pub fn transformer_flops_per_token(
    params: u64,
    layers: usize,
    heads: usize,
    head_dim: usize,
    seq_len: usize,
) -> f64 {
    6.0 * params as f64 + 12.0 * layers as f64 * heads as f64 * head_dim as f64 * seq_len as f64
}

/// Sums the forward FLOPs of a model's layers, per sample.
///
/// ```
/// use kiln_ml_profile::flops::FlopsCounter;
///
/// // A 784 → 128 → 10 perceptron.
/// let mlp = FlopsCounter::new().linear(784, 128, true).linear(128, 10, true);
/// assert_eq!(mlp.forward_per_sample(), 2.0 * 784.0 * 128.0 + 128.0 + 2.0 * 128.0 * 10.0 + 10.0);
/// // One optimizer step over 4 micro-batches of 32 samples.
/// assert_eq!(mlp.training_step(4 * 32), 3.0 * mlp.forward_per_sample() * 128.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FlopsCounter {
    forward_per_sample: f64,
}

impl FlopsCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a dense layer; see [`linear`].
    pub fn linear(self, in_features: usize, out_features: usize, bias: bool) -> Self {
        self.layer(linear(in_features, out_features, bias))
    }

    /// Adds a 2-D convolution; see [`conv2d`].
    pub fn conv2d(
        self,
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; 2],
        output_hw: [usize; 2],
        groups: usize,
        bias: bool,
    ) -> Self {
        self.layer(conv2d(
            in_channels,
            out_channels,
            kernel,
            output_hw,
            groups,
            bias,
        ))
    }

    /// Adds the forward FLOPs per sample of anything counted by hand (a layer applied to every
    /// token of a sequence: its per-row count times the sequence length).
    pub fn layer(mut self, forward_flops_per_sample: f64) -> Self {
        self.forward_per_sample += forward_flops_per_sample;
        self
    }

    /// The forward FLOPs per sample counted so far.
    pub fn forward_per_sample(&self) -> f64 {
        self.forward_per_sample
    }

    /// FLOPs of one training step over `samples` samples; see [`training_step`].
    pub fn training_step(&self, samples: u64) -> f64 {
        training_step(self.forward_per_sample, samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_counts_two_flops_per_multiply_add_and_one_per_bias() {
        assert_eq!(linear(3, 4, false), 24.0);
        assert_eq!(linear(3, 4, true), 28.0);
        assert_eq!(linear(784, 128, true), 200_704.0 + 128.0);
    }

    #[test]
    fn conv2d_counts_every_output_position() {
        // 3 → 8 channels, 3×3 kernel, 4×4 output: 8·16 outputs × 27 multiply-adds.
        assert_eq!(conv2d(3, 8, [3, 3], [4, 4], 1, false), 2.0 * 27.0 * 128.0);
        assert_eq!(conv2d(3, 8, [3, 3], [4, 4], 1, true), 6912.0 + 128.0);
        // Depthwise: 8 → 8 channels in 8 groups, one input channel per output.
        assert_eq!(conv2d(8, 8, [3, 3], [2, 2], 8, false), 2.0 * 9.0 * 32.0);
        // Groups 0 is taken as 1 rather than dividing by zero.
        assert_eq!(conv2d(2, 1, [1, 1], [1, 1], 0, false), 4.0);
    }

    #[test]
    fn a_training_step_is_three_forwards() {
        assert_eq!(training_step(100.0, 8), 2400.0);
        assert_eq!(training_step(100.0, 0), 0.0);
    }

    #[test]
    fn transformer_estimate_matches_nanogpt_for_gpt2_small() {
        // GPT-2 small as nanoGPT configures it: N ≈ 124M, L = 12, H = 12, Q = 64, T = 1024:
        // 744M + 113.2M FLOPs per token.
        let per_token = transformer_flops_per_token(124_000_000, 12, 12, 64, 1024);
        assert_eq!(per_token, 6.0 * 124e6 + 12.0 * 12.0 * 12.0 * 64.0 * 1024.0);
        assert!((per_token - 857_246_208.0).abs() < 1e-3);
    }

    #[test]
    fn counter_sums_layers() {
        let net = FlopsCounter::new()
            .conv2d(1, 4, [3, 3], [26, 26], 1, true)
            .linear(4 * 26 * 26, 10, false)
            .layer(5.0);
        let conv = 2.0 * 9.0 * 4.0 * 676.0 + 4.0 * 676.0;
        let dense = 2.0 * 2704.0 * 10.0;
        assert_eq!(net.forward_per_sample(), conv + dense + 5.0);
        assert_eq!(net.training_step(2), 6.0 * (conv + dense + 5.0));
        assert_eq!(FlopsCounter::new().forward_per_sample(), 0.0);
    }
}
