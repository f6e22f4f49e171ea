//! The quickstart's optimizer, chosen on the command line: Burn's Adam (one update per
//! parameter tensor) or kiln-ml-train's `FusedAdam` (the same arithmetic over a few flat
//! buckets). One type for both, so the rest of the run is written once.

use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{
    Adam, AdamConfig, GradientsParams, LearningRate, MultiGradientsParams, Optimizer,
};
use burn::tensor::backend::AutodiffBackend;
use kiln_ml::train::{FusedAdam, FusedAdamConfig, FusedAdamRecord};

/// Which Adam updates the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OptimizerKind {
    /// Burn's `Adam`: several element-wise kernels per parameter tensor.
    Adam,
    /// kiln-ml-train's `FusedAdam`: Burn's arithmetic over every parameter at once.
    FusedAdam,
}

impl OptimizerKind {
    /// The name in `--json` output.
    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::Adam => "adam",
            OptimizerKind::FusedAdam => "fused-adam",
        }
    }

    /// The optimizer, with Burn's Adam defaults either way.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(self) -> QuickstartOptimizer<M, B> {
        match self {
            OptimizerKind::Adam => QuickstartOptimizer::Adam(AdamConfig::new().init()),
            OptimizerKind::FusedAdam => QuickstartOptimizer::Fused(FusedAdamConfig::adam().init()),
        }
    }
}

/// Burn's Adam or kiln's fused Adam.
#[derive(Clone)]
pub enum QuickstartOptimizer<M: AutodiffModule<B>, B: AutodiffBackend> {
    /// Burn's.
    Adam(OptimizerAdaptor<Adam, M, B>),
    /// kiln's.
    Fused(FusedAdam<B>),
}

/// Burn's Adam's state.
type AdamRecord<M, B> = <OptimizerAdaptor<Adam, M, B> as Optimizer<M, B>>::Record;

/// The state of whichever optimizer ran (Burn's Adam's, kiln's): a checkpoint of one does not
/// load into the other.
pub type QuickstartOptimizerRecord<M, B> = (Option<AdamRecord<M, B>>, Option<FusedAdamRecord<B>>);

impl<M: AutodiffModule<B>, B: AutodiffBackend> Optimizer<M, B> for QuickstartOptimizer<M, B> {
    type Record = QuickstartOptimizerRecord<M, B>;

    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        match self {
            QuickstartOptimizer::Adam(adam) => adam.step(lr, module, grads),
            QuickstartOptimizer::Fused(fused) => fused.step(lr, module, grads),
        }
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        match self {
            QuickstartOptimizer::Adam(adam) => adam.step_multi(lr, module, grads),
            QuickstartOptimizer::Fused(fused) => fused.step_multi(lr, module, grads),
        }
    }

    fn to_record(&self) -> Self::Record {
        match self {
            QuickstartOptimizer::Adam(adam) => (Some(adam.to_record()), None),
            QuickstartOptimizer::Fused(fused) => (
                None,
                Some(<FusedAdam<B> as Optimizer<M, B>>::to_record(fused)),
            ),
        }
    }

    fn load_record(self, record: Self::Record) -> Self {
        // A checkpoint written with the other optimizer leaves this one's fresh state.
        match (self, record) {
            (QuickstartOptimizer::Adam(adam), (Some(state), _)) => {
                QuickstartOptimizer::Adam(adam.load_record(state))
            }
            (QuickstartOptimizer::Fused(fused), (_, Some(state))) => QuickstartOptimizer::Fused(
                <FusedAdam<B> as Optimizer<M, B>>::load_record(fused, state),
            ),
            (optimizer, (adam, fused)) => {
                if adam.is_some() || fused.is_some() {
                    // The model and schedule resume; only the moments restart. Say so loudly.
                    eprintln!(
                        "warning   the checkpoint holds the other optimizer's state (it was \
                         written with --optimizer {}): this run's moments start from zero",
                        if adam.is_some() { "adam" } else { "fused-adam" }
                    );
                }
                optimizer
            }
        }
    }
}
