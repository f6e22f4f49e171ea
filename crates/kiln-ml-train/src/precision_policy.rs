//! Which layers stay in f32 under mixed precision, and the per-step cast that honours it.
//!
//! Mixed precision runs each step on a low-precision copy of the f32 master model. Two kinds
//! of layer must not be cast with it:
//!
//! - **Precision-sensitive layers**: normalization layers divide by a variance that f16
//!   rounds badly, and users keep other layers (heads, losses) in f32 too.
//! - **Modules with running statistics** (Burn's `RunningState`, as in `BatchNorm`): a running
//!   state shares its value between clones and writes a mapped value back into that shared
//!   cell, so casting the per-step copy would cast the *master's* running mean and variance,
//!   lose their small updates, and make the trained model fail on f32 inputs.
//!
//! To a `ModuleMapper` a running state looks exactly like a parameter, so [`CastPlan::new`]
//! finds them by what they do: it casts a clone once, sees which master tensors changed dtype,
//! puts their original values back, and keeps the modules that own them in f32.

use std::collections::{HashMap, HashSet};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::backend::Backend;
use burn::tensor::{FloatDType, Tensor, TensorMetadata, TensorPrimitive};

use crate::{Error, Result};

/// The type names of Burn's normalization layers, kept in f32 by
/// [`PrecisionPolicy::keep_norms_f32`].
pub const NORM_LAYERS: [&str; 5] = [
    "BatchNorm",
    "LayerNorm",
    "GroupNorm",
    "InstanceNorm",
    "RmsNorm",
];

/// Which modules keep f32 weights under mixed precision (PyTorch's autocast keeps norms and
/// losses in f32 the same way). Modules with running statistics are always kept, whatever
/// this says. Call a kept module through [`Autocast::keep_f32`](crate::Autocast::keep_f32) so
/// its input is cast up and its output back down.
///
/// ```
/// use kiln_ml_train::{PrecisionPolicy, TrainerConfig};
///
/// // Burn's norm layers (the default) plus the `head` field and every `Attention` module.
/// let policy = PrecisionPolicy::default().keep("head").keep("Attention");
/// let config = TrainerConfig::new().with_precision_policy(policy);
/// assert!(config.precision_policy.keep_norms_f32);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrecisionPolicy {
    /// Keep Burn's normalization layers ([`NORM_LAYERS`]) in f32. Default true.
    pub keep_norms_f32: bool,
    /// More modules to keep in f32, each a field path from the model's root (`head`,
    /// `blocks.0.norm`) or a module type name (`Attention`). Default none.
    pub keep_f32: Vec<String>,
}

impl Default for PrecisionPolicy {
    fn default() -> Self {
        Self {
            keep_norms_f32: true,
            keep_f32: Vec::new(),
        }
    }
}

impl PrecisionPolicy {
    /// Also keeps the module at this field path, or of this type name, in f32.
    pub fn keep(mut self, path_or_type: impl Into<String>) -> Self {
        self.keep_f32.push(path_or_type.into());
        self
    }
}

/// The policy resolved against one model: what the per-step cast leaves in f32.
#[derive(Debug, Clone)]
pub(crate) struct CastPlan {
    policy: PrecisionPolicy,
    /// Paths of the modules that own running statistics.
    state_owners: Vec<String>,
    /// Paths of the running statistics held by the model's root itself: only these tensors
    /// are kept, since keeping their owner would keep the whole model in f32. By path, as the
    /// owners are: a loaded record gives them other ids.
    root_states: Vec<String>,
}

impl CastPlan {
    /// Resolves `policy` for `model`, finding the modules with running statistics (see the
    /// module docs). The master's values are left exactly as they were.
    ///
    /// A [`keep_f32`](PrecisionPolicy::keep_f32) entry that names no field path and no module
    /// type of the model is an error: a typo would otherwise silently cast the layer.
    pub(crate) fn new<B: Backend, M: Module<B> + Clone>(
        model: &M,
        policy: PrecisionPolicy,
        dtype: FloatDType,
    ) -> Result<Self> {
        let before = Snapshot::of(model);
        if let Some(unmatched) = policy
            .keep_f32
            .iter()
            .find(|name| !before.modules.iter().any(|module| module.matches(name)))
        {
            return Err(Error::InvalidConfig {
                field: "precision_policy.keep_f32",
                value: format!("{unmatched:?}"),
                reason: "names no field path and no module type of the model".into(),
            });
        }
        let mut plan = Self {
            policy,
            state_owners: Vec::new(),
            root_states: Vec::new(),
        };
        drop(plan.cast(model.clone(), dtype));
        let after = Snapshot::of(model);
        let shared: HashSet<ParamId> = after
            .tensors
            .iter()
            .filter(|(id, (_, tensor))| {
                before
                    .tensors
                    .get(id)
                    .is_some_and(|(_, original)| original.dtype() != tensor.dtype())
            })
            .map(|(id, _)| *id)
            .collect();
        if shared.is_empty() {
            return Ok(plan);
        }
        // Writing through a clone reaches the shared cells and nothing else.
        let _ = model.clone().map(&mut Restore {
            originals: &before.tensors,
            ids: &shared,
        });
        let mut owners = Vec::new();
        for id in &shared {
            let path = &before.tensors[id].0;
            let owner = parent_path(path);
            if owner.is_empty() {
                plan.root_states.push(path.join("."));
            } else {
                owners.push(owner);
            }
        }
        owners.sort();
        owners.dedup();
        log::info!(
            "kiln-ml-train: keeping modules with running statistics in f32: {owners:?} \
             (and {} running tensors of the root module)",
            plan.root_states.len()
        );
        plan.state_owners = owners;
        Ok(plan)
    }

    /// A copy of `module` with every float tensor cast to `dtype`, except those of kept
    /// modules. Parameter ids are kept, so gradients reach the master's parameters.
    pub(crate) fn cast<B: Backend, M: Module<B>>(&self, module: M, dtype: FloatDType) -> M {
        module.map(&mut PolicyCast {
            plan: self,
            frames: Frames::default(),
            dtype,
        })
    }

    /// The paths of the modules found to own running statistics.
    #[cfg(test)]
    pub(crate) fn state_owners(&self) -> &[String] {
        &self.state_owners
    }

    fn keeps(&self, frames: &Frames) -> bool {
        let path = frames.path.join(".");
        let inside = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}."));
        let by_name = |name: &str| frames.containers.iter().any(|c| c == name) || inside(name);
        (self.policy.keep_norms_f32
            && frames
                .containers
                .iter()
                .any(|container| NORM_LAYERS.contains(&container.as_str())))
            || self.policy.keep_f32.iter().any(|name| by_name(name))
            || self.state_owners.iter().any(|owner| inside(owner))
            || self.root_states.contains(&path)
    }
}

/// Where a mapper or visitor is: field names from the root, and the type of the module each
/// field belongs to (`Struct:Linear` becomes `Linear`; a `Vec`, array or tuple has no type
/// name, so `keep("Vec")` matches nothing).
#[derive(Debug, Default, Clone)]
struct Frames {
    path: Vec<String>,
    containers: Vec<String>,
}

impl Frames {
    fn enter(&mut self, name: &str, container_type: &str) {
        let type_name = container_type
            .strip_prefix("Struct:")
            .or_else(|| container_type.strip_prefix("Enum:"))
            .unwrap_or_default();
        self.path.push(name.to_owned());
        self.containers.push(type_name.to_owned());
    }

    /// Whether a `keep_f32` entry names this place: its path or one of its enclosing types.
    fn matches(&self, name: &str) -> bool {
        let path = self.path.join(".");
        path == name
            || path.starts_with(&format!("{name}."))
            || self.containers.iter().any(|c| c == name)
    }

    fn exit(&mut self) {
        self.path.pop();
        self.containers.pop();
    }
}

fn parent_path(path: &[String]) -> String {
    path[..path.len().saturating_sub(1)].join(".")
}

struct PolicyCast<'a> {
    plan: &'a CastPlan,
    frames: Frames,
    dtype: FloatDType,
}

impl<B: Backend> ModuleMapper<B> for PolicyCast<'_> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.frames.enter(name, container_type);
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.frames.exit();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.plan.keeps(&self.frames) {
            return param;
        }
        let dtype = self.dtype;
        param.map(|tensor| tensor.cast(dtype))
    }
}

/// Every float tensor of a module by id, with its path, and every place a module sits.
struct Snapshot<B: Backend> {
    tensors: HashMap<ParamId, (Vec<String>, TensorPrimitive<B>)>,
    modules: Vec<Frames>,
}

impl<B: Backend> Snapshot<B> {
    fn of<M: Module<B>>(module: &M) -> Self {
        let mut visitor = SnapshotVisitor {
            frames: Frames::default(),
            tensors: HashMap::new(),
            modules: Vec::new(),
        };
        module.visit(&mut visitor);
        Self {
            tensors: visitor.tensors,
            modules: visitor.modules,
        }
    }
}

struct SnapshotVisitor<B: Backend> {
    frames: Frames,
    tensors: HashMap<ParamId, (Vec<String>, TensorPrimitive<B>)>,
    modules: Vec<Frames>,
}

impl<B: Backend> ModuleVisitor<B> for SnapshotVisitor<B> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.frames.enter(name, container_type);
        self.modules.push(self.frames.clone());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.frames.exit();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let mut path = self.frames.path.clone();
        if path.is_empty() {
            path.push(String::new());
        }
        self.tensors
            .insert(param.id, (path, param.val().into_primitive()));
    }
}

/// Puts the original value back into the given (shared) tensors.
struct Restore<'a, B: Backend> {
    originals: &'a HashMap<ParamId, (Vec<String>, TensorPrimitive<B>)>,
    ids: &'a HashSet<ParamId>,
}

impl<B: Backend> ModuleMapper<B> for Restore<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if !self.ids.contains(&param.id) {
            return param;
        }
        let original = self.originals[&param.id].1.clone();
        param.map(|_| Tensor::from_primitive(original))
    }
}

#[cfg(test)]
/// Whether every float tensor of `module` (parameters and running statistics) is f32.
pub(crate) fn all_f32<B: Backend, M: Module<B>>(module: &M) -> bool {
    Snapshot::of(module)
        .tensors
        .values()
        .all(|(_, tensor)| tensor.dtype() == burn::tensor::DType::F32)
}

#[cfg(test)]
mod tests {
    use burn::backend::{Autodiff, Flex};
    use burn::nn::{BatchNorm, BatchNormConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
    use burn::tensor::DType;

    use super::*;

    type Ad = Autodiff<Flex>;

    #[derive(Module, Debug)]
    struct Net<B: Backend> {
        input: Linear<B>,
        batch_norm: BatchNorm<B>,
        layer_norm: LayerNorm<B>,
        head: Linear<B>,
    }

    fn net() -> Net<Ad> {
        let device = Default::default();
        let net = Net {
            input: LinearConfig::new(3, 4).init(&device),
            batch_norm: BatchNormConfig::new(4).init(&device),
            layer_norm: LayerNormConfig::new(4).init(&device),
            head: LinearConfig::new(4, 1).init(&device),
        };
        crate::materialize(&net);
        net
    }

    fn dtype_of(tensor: Tensor<Ad, 2>) -> DType {
        tensor.dtype()
    }

    #[test]
    fn norms_stay_f32_and_the_rest_is_cast() {
        let net = net();
        let plan = CastPlan::new(&net, PrecisionPolicy::default(), FloatDType::F16).unwrap();
        let copy = plan.cast(net.clone(), FloatDType::F16);
        assert_eq!(dtype_of(copy.input.weight.val()), DType::F16);
        assert_eq!(dtype_of(copy.head.weight.val()), DType::F16);
        assert_eq!(copy.batch_norm.gamma.val().dtype(), DType::F32);
        assert_eq!(copy.layer_norm.gamma.val().dtype(), DType::F32);
        assert!(all_f32(&net), "the master was cast");
    }

    #[test]
    fn running_statistics_are_found_restored_and_kept() {
        let net = net();
        // With the norm rule off, only the running-state detection protects the master.
        let policy = PrecisionPolicy {
            keep_norms_f32: false,
            keep_f32: Vec::new(),
        };
        let plan = CastPlan::new(&net, policy, FloatDType::F16).unwrap();
        assert_eq!(plan.state_owners(), ["batch_norm"]);
        assert!(
            all_f32(&net),
            "the master's running statistics were left cast"
        );
        let copy = plan.cast(net.clone(), FloatDType::F16);
        assert_eq!(copy.batch_norm.running_mean.value().dtype(), DType::F32);
        assert_eq!(copy.layer_norm.gamma.val().dtype(), DType::F16);
        assert!(all_f32(&net));
    }

    #[test]
    fn named_paths_and_types_are_kept() {
        let net = net();
        let by_path = CastPlan::new(
            &net,
            PrecisionPolicy::default().keep("head"),
            FloatDType::F16,
        )
        .unwrap();
        let copy = by_path.cast(net.clone(), FloatDType::F16);
        assert_eq!(dtype_of(copy.head.weight.val()), DType::F32);
        assert_eq!(dtype_of(copy.input.weight.val()), DType::F16);

        let by_type = CastPlan::new(
            &net,
            PrecisionPolicy::default().keep("Linear"),
            FloatDType::F16,
        )
        .unwrap();
        let copy = by_type.cast(net.clone(), FloatDType::F16);
        assert_eq!(dtype_of(copy.head.weight.val()), DType::F32);
        assert_eq!(dtype_of(copy.input.weight.val()), DType::F32);
    }

    #[test]
    fn a_keep_entry_that_names_nothing_is_refused() {
        let net = net();
        for typo in ["haed", "Vec", "input.weight.x"] {
            let error = CastPlan::new(&net, PrecisionPolicy::default().keep(typo), FloatDType::F16)
                .unwrap_err();
            let message = error.to_string();
            assert!(
                message.contains("keep_f32") && message.contains(typo),
                "{message}"
            );
        }
    }

    #[derive(Module, Debug)]
    struct Rooted<B: Backend> {
        layer: Linear<B>,
        running: burn::module::RunningState<Tensor<B, 1>>,
    }

    #[test]
    fn running_statistics_on_the_root_keep_only_themselves() {
        let device = Default::default();
        let net: Rooted<Ad> = Rooted {
            layer: LinearConfig::new(3, 4).init(&device),
            running: burn::module::RunningState::new(Tensor::zeros([4], &device)),
        };
        crate::materialize(&net);
        let plan = CastPlan::new(&net, PrecisionPolicy::default(), FloatDType::F16).unwrap();
        assert!(plan.state_owners().is_empty());
        let copy = plan.cast(net.clone(), FloatDType::F16);
        assert_eq!(dtype_of(copy.layer.weight.val()), DType::F16);
        assert_eq!(copy.running.value().dtype(), DType::F32);
        assert!(all_f32(&net));
    }
}
