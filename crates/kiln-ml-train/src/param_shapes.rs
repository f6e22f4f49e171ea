//! Parameter shapes of a module, to refuse checkpoints of a differently shaped model.
//!
//! Burn 0.21's `load_record` does not compare shapes: a checkpoint of a wider model loads
//! silently and the next forward pass panics. Comparing the shapes before and after loading turns
//! that into an error naming the parameter.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor};

/// A parameter's place in its module (`blocks.3.attn.weight`) and its shape.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct ParamShape {
    pub(crate) path: String,
    pub(crate) dims: Vec<usize>,
}

/// The path and shape of every parameter, in visiting order.
pub(crate) fn param_shapes<B: Backend, M: Module<B>>(module: &M) -> Vec<ParamShape> {
    let mut collector = ShapeCollector::default();
    module.visit(&mut collector);
    collector.shapes
}

/// The first parameter that differs, as (its description, its shape in `left`, in `right`):
/// by path and index (`blocks.3.attn.weight (parameter 37)`).
pub(crate) fn first_shape_difference(
    left: &[ParamShape],
    right: &[ParamShape],
) -> Option<(String, String, String)> {
    let describe = |shapes: &[ParamShape], index: usize| {
        shapes.get(index).map_or_else(
            || "no such parameter".to_owned(),
            |shape| format!("{:?}", shape.dims),
        )
    };
    (0..left.len().max(right.len()))
        .find(|&index| left.get(index) != right.get(index))
        .map(|index| {
            let mut paths: Vec<&str> = [left.get(index), right.get(index)]
                .into_iter()
                .flatten()
                .map(|shape| shape.path.as_str())
                .collect();
            paths.dedup();
            let name = format!("{} (parameter {index})", paths.join(" / "));
            (name, describe(left, index), describe(right, index))
        })
}

#[derive(Default)]
struct ShapeCollector {
    path: Vec<String>,
    shapes: Vec<ParamShape>,
}

impl ShapeCollector {
    fn push(&mut self, dims: &[usize]) {
        self.shapes.push(ParamShape {
            path: self.path.join("."),
            dims: dims.to_vec(),
        });
    }
}

impl<B: Backend> ModuleVisitor<B> for ShapeCollector {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_owned());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.push(&param.val().dims());
    }
    fn visit_int<const D: usize>(&mut self, param: &Param<Tensor<B, D, Int>>) {
        self.push(&param.val().dims());
    }
    fn visit_bool<const D: usize>(&mut self, param: &Param<Tensor<B, D, Bool>>) {
        self.push(&param.val().dims());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(path: &str, dims: &[usize]) -> ParamShape {
        ParamShape {
            path: path.to_owned(),
            dims: dims.to_vec(),
        }
    }

    #[test]
    fn differences_name_the_parameter() {
        let a = vec![shape("linear.weight", &[4, 2]), shape("linear.bias", &[2])];
        let b = vec![shape("linear.weight", &[4, 3]), shape("linear.bias", &[3])];
        assert_eq!(first_shape_difference(&a, &a), None);
        assert_eq!(
            first_shape_difference(&a, &b),
            Some((
                "linear.weight (parameter 0)".to_owned(),
                "[4, 2]".to_owned(),
                "[4, 3]".to_owned()
            ))
        );
        assert_eq!(
            first_shape_difference(&a, &a[..1]),
            Some((
                "linear.bias (parameter 1)".to_owned(),
                "[2]".to_owned(),
                "no such parameter".to_owned()
            ))
        );
    }

    /// Paths come from the module's fields, as Burn's records name them.
    #[test]
    fn paths_follow_the_module_fields() {
        use burn::backend::Flex;
        use burn::nn::{Linear, LinearConfig};

        #[derive(burn::module::Module, Debug)]
        struct Head<B: Backend> {
            layers: Vec<Linear<B>>,
        }
        let device = Default::default();
        let head = Head::<Flex> {
            layers: vec![
                LinearConfig::new(3, 4).init(&device),
                LinearConfig::new(4, 2).with_bias(false).init(&device),
            ],
        };
        let shapes = param_shapes(&head);
        let paths: Vec<&str> = shapes.iter().map(|shape| shape.path.as_str()).collect();
        assert_eq!(
            paths,
            ["layers.0.weight", "layers.0.bias", "layers.1.weight"]
        );
        assert_eq!(shapes[2].dims, [4, 2]);
    }
}
